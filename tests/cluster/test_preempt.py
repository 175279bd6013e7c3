"""A save on preemption, through real processes and real signals: a SIGTERM (or a terminal's
Ctrl-C, SIGINT to the job's process group) mid-training drains the pipeline, saves the job at
the step it reached and exits 143 (130), its report saying ``preempted``; ``--resume`` of that
checkpoint ends like an uninterrupted run. A second signal during the save, or a
``preempt_grace`` the save cannot meet, stops the job at once, leaving the previous complete
checkpoint as ``latest``. No role process outlives the job in any case."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sniper._bench._chaos import RunningJob
from sniper.cluster._checkpoint import JOB, LATEST, load_job
from tests.data._helpers import write_criteo

EVERY = 30


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("preempt")
    write_criteo(root / "day.tsv", 40_000, seed=3)
    write_criteo(root / "eval.tsv", 2_000, seed=4)
    (root / "job.toml").write_text(
        f'data = "criteo:{root / "day.tsv"}"\n'
        f'eval_data = "criteo:{root / "eval.tsv"}"\n'
        "batch_size = 256\nnum_ps = 2\nprefetch = 1\nlr = 0.01\nprogress = false\n"
        f"checkpoint_every = {EVERY}\nworkers = 1\n[variables.default]\ndim = 8\n"
    )
    return root


@pytest.fixture(scope="module")
def reference(root: Path) -> dict[str, Any]:
    """The uninterrupted run's report (in one process: the local launcher trains alike)."""
    job = RunningJob(
        root,
        *("--config", "job.toml", "--launcher", "inprocess", "--checkpoint-dir", "reference"),
        *("--output", "reference.json"),
    )
    assert job.finish() == 0, job.tail()
    report: dict[str, Any] = json.loads((root / "reference.json").read_text())
    assert report["steps"] > 4 * EVERY and report["eval_data_examples"] == 2_000
    return report


class Job(RunningJob):
    """``sniper train`` of this test in a session of its own: ``ck-NAME`` its checkpoints,
    ``NAME.json`` its report."""

    def __init__(self, root: Path, name: str, *args: str) -> None:
        self.checkpoints = root / f"ck-{name}"
        self.report = root / f"{name}.json"
        super().__init__(
            root,
            *("--config", "job.toml", "--checkpoint-dir", str(self.checkpoints)),
            *("--output", str(self.report), *args),
            new_session=True,
        )

    def latest(self) -> str | None:
        latest = self.checkpoints / LATEST
        return latest.read_text().strip() if latest.is_file() else None

    def checkpointed(self) -> str:
        """Once its first checkpoint is complete (training goes on): its name."""
        self.wait_until(lambda: self.latest() is not None, "a checkpoint")
        self.roles()  # every role it runs, seen before the signal
        return str(self.latest())

    def ended(self, status: int) -> str:
        """Check it exits ``status`` with no role left; its standard error."""
        assert self.finish() == status, self.tail()
        assert not self.survivors(), "a role outlived the job"
        return "".join(self.stderr)


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    """The jobs a test starts (:func:`start`), killed if the test fails."""
    started: list[Job] = []
    yield started
    for job in started:
        job.stop()


def start(jobs: list[Job], root: Path, name: str, *args: str) -> Job:
    jobs.append(Job(root, name, *args))
    return jobs[-1]


@pytest.mark.parametrize(
    ("launcher", "signum"),
    [("local", signal.SIGTERM), ("inprocess", signal.SIGTERM), ("local", signal.SIGINT)],
)
def test_a_signal_saves_the_step_reached_and_its_resume_ends_like_an_uninterrupted_run(
    root: Path,
    reference: dict[str, Any],
    jobs: list[Job],
    launcher: str,
    signum: int,
) -> None:
    name = f"{launcher}-{signal.Signals(signum).name}"
    job = start(jobs, root, name, "--launcher", launcher)
    first = job.checkpointed()
    time.sleep(0.2)  # a few steps past that checkpoint
    if signum == signal.SIGINT:
        os.killpg(job.process.pid, signum)  # Ctrl-C: the terminal signals the whole group
    else:
        job.process.send_signal(signum)
    err = job.ended(128 + signum)

    report = json.loads(job.report.read_text())
    assert report["preempted"] is True
    saved = load_job(job.checkpoints)  # verifies every part
    assert saved.step == report["steps"] >= int(first.removeprefix("step-"))
    assert saved.step < reference["steps"]
    assert f"{signal.Signals(signum).name}: stopped at step {saved.step}; " in err

    resumed = RunningJob(
        root,
        *("--config", "job.toml", "--resume", str(job.checkpoints), "--launcher", launcher),
        *("--output", f"{name}-resumed.json"),
    )
    assert resumed.finish() == 0, resumed.tail()
    whole = json.loads((root / f"{name}-resumed.json").read_text())
    assert whole["resumed_from_step"] == saved.step and whole["preempted"] is False
    for key in ("steps", "examples", "eval_batches", "eval_data_examples"):
        assert whole[key] == reference[key], key
    assert abs(whole["eval_data_auc"] - reference["eval_data_auc"]) < 0.005


def test_a_second_sigterm_during_the_save_stops_at_once_keeping_the_previous_checkpoint(
    root: Path, jobs: list[Job]
) -> None:
    job = start(jobs, root, "twice", "--launcher", "local")
    job.checkpointed()
    time.sleep(0.2)
    previous = str(job.latest())
    job.process.send_signal(signal.SIGTERM)

    def saving() -> bool:
        """A step after ``latest``'s has begun and has no job.json yet."""
        return any(
            p.name > previous and not (p / JOB).exists() for p in job.checkpoints.glob("step-*")
        )

    deadline = time.monotonic() + 60
    while not saving():
        assert job.latest() == previous, "the save ended before it was seen under way"
        assert time.monotonic() < deadline and job.process.poll() is None, job.tail()
        time.sleep(0.001)
    job.process.send_signal(signal.SIGTERM)
    err = job.ended(128 + signal.SIGTERM)

    assert job.latest() == previous
    assert load_job(job.checkpoints).directory.name == previous
    assert "SIGTERM again: stopping at once without the checkpoint; the latest " in err
    assert not job.report.exists()


def test_a_save_that_cannot_finish_within_preempt_grace_stops_without_it(
    root: Path, jobs: list[Job]
) -> None:
    job = start(jobs, root, "grace", "--launcher", "local", "--preempt-grace", "0.005")
    job.checkpointed()
    time.sleep(0.1)  # past that checkpoint's pause, which a stop asked during it would end at
    previous = str(job.latest())
    job.process.send_signal(signal.SIGTERM)
    err = job.ended(128 + signal.SIGTERM)

    line = "SIGTERM: the checkpoint did not finish within preempt_grace 0.005 s; stopping"
    assert f"{line} without it; the latest checkpoint is {job.checkpoints}/{previous}" in err
    assert load_job(job.checkpoints).directory.name == previous
    assert not job.report.exists()


def test_without_a_checkpoint_dir_a_signal_stops_at_once_saying_nothing_was_saved(
    root: Path,
) -> None:
    job = RunningJob(
        root,
        *("--config", "job.toml", "--checkpoint-every", "0", "--launcher", "local"),
        *("--output", "unsaved.json"),
    )
    try:
        job.wait_for("started 1 hub(s)")
        job.roles()
        job.process.send_signal(signal.SIGTERM)
        assert job.finish() == 128 + signal.SIGTERM, job.tail()
    finally:
        job.stop()
    assert not job.survivors()
    assert "SIGTERM: stopping at once; nothing saved (no --checkpoint-dir)" in "".join(job.stderr)
