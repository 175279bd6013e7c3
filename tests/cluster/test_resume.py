"""Durable training through real processes: `sniper train --checkpoint-dir` killed with -9
after a checkpoint, then `--resume`d (also on another number of ps), ends where an
uninterrupted run ends: the same batches and examples, and an evaluation AUC within 0.005."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sniper.cluster._checkpoint import load_job
from sniper.cluster._supervise import EXIT_GRACE, _RoleDied, _run_training
from sniper.roles import TrainingError, TrainReport
from tests.data._helpers import write_criteo

BATCH = 256


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("job")
    write_criteo(root / "day.tsv", 12_000, seed=3)
    write_criteo(root / "eval.tsv", 3_000, seed=4)
    (root / "job.toml").write_text(
        f'data = "criteo:{root / "day.tsv"}"\n'
        f'eval_data = "criteo:{root / "eval.tsv"}"\n'
        f"batch_size = {BATCH}\nnum_ps = 2\nprefetch = 1\nlr = 0.01\nprogress = false\n"
        "checkpoint_every = 10\nworkers = 1\n[variables.default]\ndim = 8\n"
    )
    return root


def train(job: Path, *args: str, config: str = "job.toml") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sniper", "train", "--config", str(job / config), *args],
        cwd=job,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> dict[str, object]:
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, err[-3000:]
    return {"stdout": out, "stderr": err}


def report(path: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(path.read_text())
    return loaded


def test_kill_9_after_a_checkpoint_then_resume_ends_like_an_uninterrupted_run(
    job: Path,
) -> None:
    # Two hubs and three reads in flight: the batches still reach training in one order.
    config = "hubs.toml"
    (job / config).write_text(
        "num_hubs = 2\n" + (job / "job.toml").read_text().replace("prefetch = 1", "prefetch = 3")
    )
    finish(train(job, "--checkpoint-dir", "full", "--output", "full.json", config=config))
    full = report(job / "full.json")
    assert full["checkpoints"] >= 4  # type: ignore[operator]

    killed = train(job, "--checkpoint-dir", "ck", "--output", "killed.json", config=config)
    deadline = time.monotonic() + 120
    while not (job / "ck" / "latest").is_file():
        assert killed.poll() is None, killed.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=30)
    assert not (job / "killed.json").exists()
    step = load_job(job / "ck").step
    assert 10 <= step < full["steps"]  # type: ignore[operator]

    finish(train(job, "--resume", "ck", "--output", "resumed.json", config=config))
    resumed = report(job / "resumed.json")
    assert resumed["resumed_from_step"] == step
    for key in ("steps", "examples", "eval_batches", "eval_data_examples"):
        assert resumed[key] == full[key], key
    assert abs(resumed["eval_data_auc"] - full["eval_data_auc"]) < 0.005  # type: ignore[operator]
    # keep_checkpoints = 3: the newest three complete steps stay, latest names the newest.
    steps = sorted(p.name for p in (job / "full").iterdir() if p.name.startswith("step-"))
    assert len(steps) == 3 and (job / "full" / "latest").read_text().strip() == steps[-1]


def test_a_damaged_job_checkpoint_is_refused_in_one_line(job: Path) -> None:
    finish(train(job, "--checkpoint-dir", "bad", "--max-steps", "10", "--output", "bad.json"))
    step = load_job(job / "bad").directory
    (step / "trainer.npz").write_bytes(b"not a model")
    err = finish_error(train(job, "--resume", "bad"))
    assert err == (
        f"sniper: error: job checkpoint {step}: trainer.npz does not match its checksum\n"
    )


def test_a_resume_on_three_ps_reshards_the_checkpoint_of_two(job: Path) -> None:
    finish(train(job, "--checkpoint-dir", "two", "--max-steps", "15", "--output", "two.json"))
    done = finish(train(job, "--resume", "two", "--num-ps", "3", "--output", "three.json"))
    assert "resharded the checkpoint of 2 ps for 3 ps" in done["stderr"]  # type: ignore[operator]
    three = report(job / "three.json")
    full_steps = -(-12_000 // BATCH) - -(-12_000 // BATCH) // 10  # batches less the held-out
    assert three["steps"] == full_steps
    assert [p.name for p in (job / "two").iterdir() if p.name.startswith(".")] == []


def test_resume_refuses_a_missing_checkpoint_and_a_changed_hub_count(job: Path) -> None:
    missing = finish_error(train(job, "--resume", "nowhere"))
    assert missing.startswith("sniper: error: ") and "holds no job checkpoint" in missing
    finish(train(job, "--checkpoint-dir", "one", "--max-steps", "10", "--output", "one.json"))
    hubs = finish_error(train(job, "--resume", "one", "--num-hubs", "2"))
    assert hubs == (
        "sniper: error: resume: the checkpoint was taken with 1 hub(s) and this run has "
        "num_hubs = 2; hubs split the data, so keep their number\n"
    )


def finish_error(process: subprocess.Popen[str]) -> str:
    _, err = process.communicate(timeout=120)
    assert process.returncode == 2, err[-3000:]
    return err


def _pid_of(job: Path, config_name: str, launcher: subprocess.Popen[str]) -> int:
    """The pid of the server the launcher started with ``config_name`` (ps.toml, hub-0.toml)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert launcher.poll() is None, launcher.communicate()[1][-3000:]
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_text()
            except OSError:
                continue
            if f"/{config_name}" in cmdline and "sniper-train-" in cmdline:
                status = (proc / "status").read_text()
                ppid = next(
                    int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid")
                )
                if ppid == launcher.pid:
                    return int(proc.name)
        time.sleep(0.05)
    raise AssertionError(f"no {config_name} server appeared")


@pytest.mark.parametrize("victim", ["ps.toml", "hub-0.toml"])
def test_a_killed_server_is_restarted_and_the_job_finishes(job: Path, victim: str) -> None:
    out = f"restart-{victim}"
    finish(train(job, "--checkpoint-dir", "ref", "--output", "ref.json"))
    reference = report(job / "ref.json")
    launcher = train(job, "--launcher", "local", "--checkpoint-dir", out, "--output", f"{out}.json")
    deadline = time.monotonic() + 120
    while not (job / out / "latest").is_file():
        assert launcher.poll() is None, launcher.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    os.kill(_pid_of(job, victim, launcher), signal.SIGKILL)
    done = finish(launcher)
    result = report(job / f"{out}.json")
    assert result["restarts"] == 1, done["stderr"]
    assert "restarting every process (restart 1 of 3)" in done["stderr"]  # type: ignore[operator]
    for key in ("steps", "examples", "eval_data_examples"):
        assert result[key] == reference[key], key
    assert abs(result["eval_data_auc"] - reference["eval_data_auc"]) < 0.01  # type: ignore[operator]


def test_sniper_eval_scores_the_checkpoints_model_like_the_run_did(job: Path) -> None:
    finish(train(job, "--checkpoint-dir", "scored", "--output", "scored.json"))
    expected = report(job / "scored.json")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "sniper", "eval", "--checkpoint", str(job / "scored")),
            *("--data", f"criteo:{job / 'eval.tsv'}", "--config", str(job / "job.toml")),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = done.stdout.strip().splitlines()[-1].split()
    assert row[0] == f"{expected['eval_data_examples']:,}"
    assert row[1] == f"{expected['eval_data_auc']:.4f}"


@pytest.fixture
def sigterm_kept() -> Iterator[None]:
    """``_run_training`` installs the launcher's SIGTERM handler; put pytest's back."""
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


async def _lost_connection() -> TrainReport:
    raise TrainingError("PushGrad of batch 13 failed: StreamTerminatedError: Connection lost")


@pytest.mark.usefixtures("sigterm_kept")
def test_a_failure_heard_before_the_dead_server_is_collected_still_restarts() -> None:
    """The trainer may hear of a lost connection before the killed server's exit can be
    collected (its sockets close first): the launcher waits for the exit, up to
    ``EXIT_GRACE``, instead of failing the job (CI saw that race)."""
    first: list[float] = []

    def died() -> str | None:
        first.append(time.monotonic())
        return "ps 1" if first[-1] - first[0] > 0.2 else None

    with pytest.raises(_RoleDied) as info:
        _run_training(_lost_connection, died)
    assert info.value.role == "ps 1"


@pytest.mark.usefixtures("sigterm_kept")
def test_a_failure_with_every_server_alive_is_the_jobs_own() -> None:
    start = time.monotonic()
    with pytest.raises(TrainingError, match="Connection lost"):
        _run_training(_lost_connection, lambda: None)
    assert time.monotonic() - start >= EXIT_GRACE
