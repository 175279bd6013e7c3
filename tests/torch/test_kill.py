"""A torch model's job survives ``kill -9`` of a ps: ``sniper train --launcher local`` with
``torch_mlp`` named in ``[model]`` restarts from its latest checkpoint (the module's and
optimizer's state_dict with the ps tables) and ends with the steps, examples and held-out AUC
(within 0.005) of an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sniper._bench._chaos import RunningJob
from tests.data._helpers import write_criteo

STARTED_PS = "started 2 ps on"


def _run(root: Path, name: str) -> RunningJob:
    return RunningJob(
        root,
        *("--config", "job.toml", "--checkpoint-dir", f"ck-{name}", "--output", f"{name}.json"),
    )


def test_a_torch_job_survives_kill_9_of_a_ps(tmp_path: Path) -> None:
    write_criteo(tmp_path / "day.tsv", 6_000, seed=3)
    write_criteo(tmp_path / "eval.tsv", 2_000, seed=4)
    (tmp_path / "job.toml").write_text(
        f'data = "criteo:{tmp_path / "day.tsv"}"\n'
        f'eval_data = "criteo:{tmp_path / "eval.tsv"}"\n'
        "batch_size = 256\nnum_ps = 2\nprefetch = 1\nprogress = false\nblas_threads = 1\n"
        'checkpoint_every = 6\nworkers = 1\nlauncher = "local"\n[variables.default]\ndim = 8\n'
        '[model]\nfactory = "torch_mlp"\noptimizer = "adam"\nlr = 0.003\n'
        "[model.params]\nhidden = [16]\n"
    )
    reference = _run(tmp_path, "reference")
    assert reference.finish() == 0, reference.tail()
    expected: dict[str, Any] = json.loads((tmp_path / "reference.json").read_text())
    assert expected["eval_data_auc"] > 0.6

    job = _run(tmp_path, "killed")
    try:
        job.wait_until((tmp_path / "ck-killed" / "latest").is_file, "a checkpoint")
        job.kill("ps 1")  # mid-step, after the first checkpoint
        assert job.finish() == 0, job.tail()
    finally:
        job.stop()
    assert not job.survivors()
    report = json.loads((tmp_path / "killed.json").read_text())
    err = "".join(job.stderr)
    assert report["restarts"] == 1, err[-3000:]
    assert "from the checkpoint of step" in err
    for key in ("steps", "examples", "eval_data_examples"):
        assert report[key] == expected[key], key
    assert abs(report["eval_data_auc"] - expected["eval_data_auc"]) < 0.005
