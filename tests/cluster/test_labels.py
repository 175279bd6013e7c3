"""Several labels through ``sniper train``: each label's figures in the report, kept by a
checkpoint across a resume, and a resume on data of other labels refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

JOB = """workload = "criteo_two_labels"
scale = 0.01
batch_size = 256
num_batches = 40
eval_every = 4
launcher = "inprocess"
progress = false
blas_threads = 1
output = "report.json"
[variables.default]
dim = 8
"""


CHECKPOINTED = ("--checkpoint-dir", "ck", "--checkpoint-every", "10")


def sniper(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sniper", "train", "--config", "job.toml", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_a_two_label_job_reports_each_label_and_resumes_with_them(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    first = sniper(tmp_path, *CHECKPOINTED, "--max-steps", "20")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "each label (the figures above are click's)" in first.stdout
    stopped = json.loads((tmp_path / "report.json").read_text())
    assert set(stopped["per_label"]) == {"click", "buy"}
    # The headline logloss is click's, beside click's AUC, not both labels' mean loss.
    assert stopped["train_logloss"] == stopped["per_label"]["click"]["train_logloss"]

    resumed = sniper(tmp_path, "--resume", "ck")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["resumed_from_step"] == 20 and report["steps"] > 20
    click, buy = report["per_label"]["click"], report["per_label"]["buy"]
    assert report["eval_auc"] == click["eval_auc"] and buy["eval_auc"] != click["eval_auc"]
    assert report["train_logloss"] == click["train_logloss"] != buy["train_logloss"]
    # The held-out scores of the first 20 steps came back with the checkpoint: the whole run's
    # batches are in the whole-run AUC of each label, not only this run's.
    assert report["eval_batches"] == 10 and 0 < buy["eval_auc_whole_run"] < 1


def test_a_resume_on_data_of_other_labels_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    first = sniper(tmp_path, *CHECKPOINTED, "--max-steps", "10")
    assert first.returncode == 0, first.stderr[-3000:]
    refused = sniper(tmp_path, "--resume", "ck", "--workload", "criteo")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert 'labels ["click", "buy"] -> ["label"] (the checkpoint fixed these' in refused.stderr
