"""Durable training through real processes: `sniper train --checkpoint-dir` killed with -9
after a checkpoint, then `--resume`d (also on another number of ps), ends where an
uninterrupted run ends: the same batches and examples, and every AUC of the report within
0.005. Checkpoints verify themselves: a damaged step is refused in one line naming the file,
and `--resume DIR` falls back to the step before; a resume whose config changes what the
checkpoint fixed is refused before anything starts."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sniper.cluster import TrainConfig
from sniper.cluster._checkpoint import load_job, step_name
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


HUBS = "hubs.toml"
"""Two hubs and three reads in flight: the batches still reach training in one order."""

SPANNED = (
    "steps",
    "examples",
    "eval_batches",
    "eval_data_examples",
    "train_auc",
    "eval_auc",
    "eval_auc_whole_run",
    "eval_data_auc",
)
"""What a resumed run's report gives for the whole job."""


@pytest.fixture(scope="module")
def full(job: Path) -> dict[str, object]:
    """The report of an uninterrupted run of hubs.toml, checkpointed in ``full``."""
    (job / HUBS).write_text(
        "num_hubs = 2\n" + (job / "job.toml").read_text().replace("prefetch = 1", "prefetch = 3")
    )
    finish(train(job, "--checkpoint-dir", "full", "--output", "full.json", config=HUBS))
    return report(job / "full.json")


def same_run(resumed: dict[str, object], full: dict[str, object]) -> None:
    for key in SPANNED:
        if isinstance(full[key], float):
            assert abs(resumed[key] - full[key]) < 0.005, key  # type: ignore[operator]
        else:
            assert resumed[key] == full[key], key


def test_kill_9_after_a_checkpoint_then_resume_ends_like_an_uninterrupted_run(
    job: Path, full: dict[str, object]
) -> None:
    config = HUBS
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
    # The AUCs too span the whole job: the checkpoint kept the streaming figures.
    same_run(resumed, full)
    # keep_checkpoints = 3: the newest three complete steps stay, latest names the newest.
    steps = sorted(p.name for p in (job / "full").iterdir() if p.name.startswith("step-"))
    assert len(steps) == 3 and (job / "full" / "latest").read_text().strip() == steps[-1]


def test_a_resume_of_a_finished_run_has_nothing_to_train_and_gives_its_report(
    job: Path, full: dict[str, object]
) -> None:
    done = finish(train(job, "--resume", "full", "--output", "again.json", config=HUBS))
    last = load_job(job / "full")
    assert done["stdout"].startswith(  # type: ignore[attr-defined]
        f"nothing left to train: the checkpoint of step {full['steps']} ({last.directory}) "
        "ended the job; its report follows\n"
    )
    again = report(job / "again.json")
    for key in SPANNED:
        assert again[key] == full[key], key
    assert again["resumed_from_step"] == full["steps"]
    assert load_job(job / "full").directory == last.directory  # nothing was saved


@pytest.fixture(scope="module")
def steps(job: Path) -> Path:
    """A run of 30 steps checkpointed three times, the last at 30 (copy it before damaging
    it: :func:`damaged`)."""
    finish(train(job, "--checkpoint-dir", "steps", "--max-steps", "30", "--output", "30.json"))
    assert len(step_directories(job / "steps")) == 3
    assert step_directories(job / "steps")[0].name == step_name(30)
    return job / "steps"


def step_directories(root: Path) -> list[Path]:
    """The newest first."""
    return sorted(root.glob("step-*"), reverse=True)


def damaged(steps: Path, name: str) -> Path:
    copy = steps.parent / name
    shutil.copytree(steps, copy)
    return copy


def flip_a_byte(file: Path) -> None:
    content = bytearray(file.read_bytes())
    content[len(content) // 2] ^= 0x01
    file.write_bytes(bytes(content))


def var_file(step: Path, ps: int) -> Path:
    return sorted((step / f"ps-{ps}").glob("var-*.npz"))[0]


def variable_of(file: Path) -> str:
    manifest = json.loads((file.parent / "manifest.json").read_text())
    return str(next(v["name"] for v in manifest["variables"] if v["file"] == file.name))


def test_a_resume_of_an_older_step_that_trains_nothing_keeps_the_newer_steps(
    job: Path, full: dict[str, object]
) -> None:
    """Data of no full batch trains none with drop_last: the run fails in one line, and the
    steps after the one it resumed from, which its first checkpoint would have removed, are
    all still there (it once saved its step again at the end, removing them)."""
    shutil.copytree(job / "full", job / "forked")
    steps = sorted(p.name for p in (job / "forked").iterdir() if p.name.startswith("step-"))
    write_criteo(job / "short.tsv", BATCH - 1, seed=5)
    failed = train(
        job,
        *("--resume", f"forked/{steps[0]}", "--data", f"criteo:{job / 'short.tsv'}"),
        *("--drop-last", "--allow-change", "data", "--output", "short.json"),
        config=HUBS,
    )
    _, err = failed.communicate(timeout=240)
    assert failed.returncode == 1, err[-3000:]
    assert "sniper: error: trained 0 batches" in err
    kept = sorted(p.name for p in (job / "forked").iterdir() if p.name.startswith("step-"))
    assert kept == steps
    assert (job / "forked" / "latest").read_text().strip() == steps[-1]


@pytest.mark.parametrize(
    "damage",
    ["edit job.json", "truncate job.json", "flip", "truncate", "delete", "delete manifest.json"],
)
def test_a_damaged_step_is_refused_in_one_line_naming_the_file(
    job: Path, steps: Path, damage: str
) -> None:
    root = damaged(steps, f"damaged-{damage.replace(' ', '-')}")
    step = root / step_name(30)
    file = var_file(step, 1)
    where = f"checkpoint {step}/ps-1: {file.name} (variable {variable_of(file)!r}): the file"
    if damage == "edit job.json":
        # The hub's position moved back ten batches, as JSON of the same layout: it resumed
        # with exit 0 and trained those batches again.
        edited = json.loads((step / "job.json").read_text())
        edited["positions"]["0"][1] -= 10
        (step / "job.json").write_text(json.dumps(edited, indent=1))
        expected = f"job checkpoint {step}: job.json does not match its checksum (edited?)"
    elif damage == "truncate job.json":
        text = (step / "job.json").read_text()
        (step / "job.json").write_text(text[: len(text) // 2])
        expected = f"job checkpoint {step}: job.json is not JSON, truncated or damaged ("
    elif damage == "flip":
        flip_a_byte(file)
        expected = f"{where} does not match its checksum"
    elif damage == "truncate":
        file.write_bytes(file.read_bytes()[:100])
        expected = f"{where} does not match its checksum"
    elif damage == "delete":
        file.unlink()
        expected = f"{where} is missing"
    else:
        (step / "ps-1" / "manifest.json").unlink()
        expected = f"job checkpoint {step}: ps-1/manifest.json is missing"
    # A step named: that step or nothing; exit 1, the data's failure, not a usage error.
    err = finish_error(train(job, "--resume", str(step), "--max-steps", "31"), status=1)
    assert err.startswith(f"sniper: error: {expected}") and err.count("\n") == 1, err


def test_resume_of_a_directory_falls_back_past_damaged_steps_with_a_warning(
    job: Path, steps: Path
) -> None:
    """The newest step's job.json edited (num_ps 2 -> 1: it resumed with exit 0 and dropped
    a ps's tables), the one before's ps part damaged (a DATA_LOSS traceback): the resume
    skips both, saying why, and goes on from the oldest."""
    root = damaged(steps, "fallback")
    newest, middle, oldest = step_directories(root)
    text = (newest / "job.json").read_text()
    (newest / "job.json").write_text(text.replace('"num_ps": 2', '"num_ps": 1'))
    file = var_file(middle, 0)
    flip_a_byte(file)
    done = finish(train(job, "--resume", str(root), "--max-steps", "25", "--output", "fb.json"))
    stderr: str = done["stderr"]  # type: ignore[assignment]
    warnings = [
        line.split(" sniper.train: ")[1]
        for line in stderr.splitlines()
        if " WARNING sniper.train: " in line
    ]
    assert warnings == [
        f"skipped the checkpoint {newest.name}: job checkpoint {newest}: "
        "job.json does not match its checksum (edited?)",
        f"skipped the checkpoint {middle.name}: checkpoint {middle}/ps-0: "
        f"{file.name} (variable {variable_of(file)!r}): the file does not match its checksum",
        f"resuming from {oldest.name}, the newest step of {root} that verifies",
    ]
    resumed = report(job / "fb.json")
    assert (resumed["resumed_from_step"], resumed["steps"]) == (load_job(oldest).step, 25)
    # The damaged steps were saved again or, past this run's end, removed: every step left
    # verifies, and latest names this run's last.
    left = step_directories(root)
    assert [p.name for p in left] == [step_name(25), middle.name, oldest.name]
    assert [load_job(p).directory for p in left] == left
    assert load_job(root).step == 25


@pytest.mark.parametrize(
    ("flags", "toml", "change"),
    [
        (("--batch-size", "128"), "", "batch_size 256 -> 128 (the checkpoint fixed these"),
        ((), "dim = 4\n", "variables.*.dim 8 -> 4 (the checkpoint fixed these"),
        (
            (),
            'dim = 8\noptimizer = "adam"\nparams = { lr = 0.01 }\n',
            "variables.*.optimizer 'adagrad' -> 'adam', variables.*.params {\"lr\": 0.05} -> "
            '{"lr": 0.01} (the checkpoint fixed these',
        ),
        (
            (),
            'dim = 8\ninitializer = "uniform"\n',
            "variables.*.initializer 'normal' -> 'uniform' (",
        ),
        (("--hidden", "32"), "", "model.params.hidden [64] -> [32] (the checkpoint fixed these"),
        (("--seed", "7"), "", "seed 0 -> 7 (the checkpoint fixed these"),
        (("--num-hubs", "2"), "", "num_hubs 1 -> 2 (the checkpoint fixed these"),
        (("--lr", "0.02"), "", "lr 0.01 -> 0.02 (to go on with the new values: --allow-change lr)"),
        (
            ("--lr", "0.02", "--batch-size", "128"),
            "",
            "batch_size 256 -> 128 (the checkpoint fixed these: keep its values); "
            "lr 0.01 -> 0.02 (to go on with the new values: --allow-change lr)",
        ),
    ],
)
def test_a_resume_that_changes_what_the_checkpoint_fixed_is_refused_before_anything_starts(
    job: Path, steps: Path, flags: tuple[str, ...], toml: str, change: str
) -> None:
    config = "job.toml"
    if toml:  # [variables.default] changed
        config = f"changed-{hashlib.sha256(toml.encode()).hexdigest()[:8]}.toml"
        (job / config).write_text((job / "job.toml").read_text().replace("dim = 8\n", toml))
    before = sorted(p.name for p in steps.iterdir())
    err = finish_error(train(job, "--resume", str(steps), *flags, config=config))
    assert err.startswith(
        f"sniper: error: resume: this config changes what the checkpoint "
        f"{steps / step_name(30)} was trained with: {change}"
    ), err
    assert err.count("\n") == 1 and "started" not in err, err
    assert sorted(p.name for p in steps.iterdir()) == before


def test_a_change_allow_change_names_goes_on_and_an_unsafe_one_cannot_be_named(
    job: Path, steps: Path
) -> None:
    root = damaged(steps, "allowed")
    done = finish(
        train(
            job,
            "--resume",
            str(root),
            "--lr",
            "0.02",
            "--allow-change",
            "lr",
            "--max-steps",
            "35",
            "--output",
            "lr.json",
        )
    )
    assert "WARNING sniper.train: resume: lr 0.01 -> 0.02 (allow_change)" in done["stderr"]  # type: ignore[operator]
    assert report(job / "lr.json")["steps"] == 35
    assert json.loads((root / step_name(35) / "job.json").read_text())["config"]["lr"] == 0.02
    err = finish_error(train(job, "--resume", str(root), "--allow-change", "dim,batch_size"))
    assert err.startswith("sniper: error: allow_change: dim cannot change on resume (the")


def test_a_resume_on_three_ps_reshards_the_checkpoint_of_two(job: Path) -> None:
    finish(train(job, "--checkpoint-dir", "two", "--max-steps", "15", "--output", "two.json"))
    done = finish(train(job, "--resume", "two", "--num-ps", "3", "--output", "three.json"))
    assert "resharded the checkpoint of 2 ps for 3 ps" in done["stderr"]  # type: ignore[operator]
    three = report(job / "three.json")
    full_steps = -(-12_000 // BATCH) - -(-12_000 // BATCH) // 10  # batches less the held-out
    assert three["steps"] == full_steps
    assert [p.name for p in (job / "two").iterdir() if p.name.startswith(".")] == []


def test_resume_refuses_a_missing_checkpoint(job: Path) -> None:
    missing = finish_error(train(job, "--resume", "nowhere"))
    assert missing.startswith("sniper: error: ") and "holds no job checkpoint" in missing


def finish_error(process: subprocess.Popen[str], status: int = 2) -> str:
    _, err = process.communicate(timeout=120)
    assert process.returncode == status, err[-3000:]
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


def test_a_config_that_checkpoints_into_a_directory_resumes_from_it() -> None:
    """The README's ``sniper train --config job.toml --resume ck`` where job.toml says
    ``checkpoint_dir = "ck"``: the same job, not a conflict; another directory is refused."""
    for resume in ("ck", "ck/step-00000010", str(Path("ck").resolve())):
        config = TrainConfig(checkpoint_dir="ck", resume=resume, checkpoint_every=5)
        assert config.job_directory() == Path("ck").resolve()
    with pytest.raises(
        ValueError,
        match=re.escape(
            "resume other/step-00000010 is not in checkpoint_dir ck: a resumed job checkpoints "
            "where it resumed from, so give one of them, or the same directory to both"
        ),
    ):
        TrainConfig(checkpoint_dir="ck", resume="other/step-00000010")
