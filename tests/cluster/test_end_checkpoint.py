"""A job given a ``--checkpoint-dir`` and no ``--checkpoint-every`` saves the end of its
training, in processes and in one process alike: the directory names the model trained, and
``--resume`` and ``sniper eval --checkpoint`` read it (a run that saved nothing there lost the
work its user asked to keep)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sniper.cluster._checkpoint import load_job
from tests.cluster._sniper import sniper
from tests.data._helpers import write_criteo

JOB = """\
data = "criteo:day.tsv"
batch_size = 256
hidden = [16]
progress = false
[variables.default]
dim = 8
"""


def _train(tmp_path: Path, output: str, *args: str) -> dict[str, Any]:
    done = sniper(tmp_path, "train", "--config", "job.toml", "--output", output, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads((tmp_path / output).read_text())
    report["stdout"] = done.stdout
    return report


@pytest.mark.parametrize("launcher", ["local", "inprocess"])
def test_a_checkpoint_dir_alone_saves_the_end_and_resumes_from_it(
    tmp_path: Path, launcher: str
) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    write_criteo(tmp_path / "day.tsv", 6_000, seed=3)
    first = _train(
        tmp_path,
        "first.json",
        "--launcher",
        launcher,
        "--checkpoint-dir",
        "ck",
        "--max-steps",
        "12",
    )
    assert first["steps"] == 12 and first["checkpoints"] == 1
    assert "1 checkpoint(s); training paused" in str(first["stdout"])
    assert load_job(tmp_path / "ck").step == 12

    resumed = _train(tmp_path, "resumed.json", "--launcher", launcher, "--resume", "ck")
    assert resumed["resumed_from_step"] == 12
    assert resumed["steps"] > 12 and resumed["checkpoints"] == 1
    assert load_job(tmp_path / "ck").step == resumed["steps"]

    scored = sniper(tmp_path, "eval", "--checkpoint", "ck", "--data", "criteo:day.tsv")
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "AUC" in scored.stdout


def test_checkpoint_every_without_a_directory_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    done = sniper(tmp_path, "train", "--config", "job.toml", "--checkpoint-every", "5")
    assert done.returncode == 2
    assert "checkpoint_every needs checkpoint_dir (or resume)" in done.stderr
    assert not (tmp_path / "train_report.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--output", "out"), "output 'out' is a directory: name the JSON file to write"),
        (("--output", "job.toml/r.json"), "output 'job.toml/r.json': job.toml is a file, not"),
        (("--output", "no/r.json"), "output 'no/r.json': directory no does not exist: create"),
        (("--output", "day.tsv"), "output 'day.tsv' is the data file the job reads"),
        (
            ("--data", "criteo:days", "--output", "days/report.json"),
            "output 'days/report.json' is in the data the job reads (criteo:days): write the "
            "report elsewhere",
        ),
        (
            ("--checkpoint-dir", "job.toml/ck"),
            "checkpoint_dir 'job.toml/ck': {tmp}/job.toml is a file, not a directory",
        ),
    ],
)
def test_a_report_or_checkpoint_path_that_cannot_be_written_is_refused_before_training(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """Training, then failing to write the report or the end's checkpoint, lost the run; a
    report written over the data lost the data."""
    (tmp_path / "job.toml").write_text(JOB)
    write_criteo(tmp_path / "day.tsv", 300, seed=1)
    (tmp_path / "out").mkdir()
    (tmp_path / "days").mkdir()
    write_criteo(tmp_path / "days" / "day_0.tsv", 300, seed=1)  # a directory of days
    data = (tmp_path / "day.tsv").read_bytes()
    done = sniper(tmp_path, "train", "--config", "job.toml", *args)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"sniper: error: {message.format(tmp=tmp_path.resolve())}")
    assert (tmp_path / "day.tsv").read_bytes() == data
    assert not (tmp_path / "train_report.json").exists()
