"""Job checkpoints: every ps, the trainer and each hub's position, all at one training step.

Layout under the checkpoint directory ``DIR`` (each ps's ``checkpoint_root``):

- ``DIR/step-<N>/ps-<i>/``: ps ``i``'s tables (``sniper.roles._checkpoint``: checksummed, each
  written atomically by the ps itself);
- ``DIR/step-<N>/trainer.npz``: the dense model and its Adam state (``model/...``), and the
  report's streaming figures (``metrics/...``: the training AUC, the held-out scores);
- ``DIR/step-<N>/job.json``, written last: the step, the number of ps and hubs, each hub's
  position, the report's counters, the config the job was trained with (what a resume must
  keep, :mod:`sniper.cluster._resume`), the SHA-256 of every manifest and of ``trainer.npz``,
  and its own SHA-256 (``checksum``: of the rest of it, as canonical JSON);
- ``DIR/latest``: the name of the newest complete step, replaced atomically after its
  ``job.json``.

The trainer calls :func:`save_job` with its pipeline drained (no batch is between ReadSample and
PushGrad), so the tables hold exactly the pushes of ``N`` steps and each hub's position is the
last batch trained. A step directory without ``job.json`` is never loaded; ``latest`` only ever
names a complete one; the oldest complete steps beyond ``keep`` are removed, and so is every
step after the one saved (a damaged step a resume skipped, or a run's that an older step was
resumed from: no longer this job's).

**Verified before anything loads it.** :func:`load_job` checks ``job.json`` against its own
checksum, then every file it lists, then each ps's files against that ps's manifest (where the
part is on this machine; a part on a ps's own disk is checked by its ps when it restores), all
before any process starts. Damage is one line naming the file
(:class:`~sniper.roles.CorruptCheckpointError`). Given ``DIR``, it takes the newest step up
to the one ``latest`` names that verifies, with a warning naming each step skipped and why;
given ``DIR/step-N``, it loads that step or fails.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import numpy as np

from sniper.placement import Placement
from sniper.roles import (
    MANIFEST,
    BatchId,
    CorruptCheckpointError,
    PsCluster,
    Trainer,
    TrainReport,
    check_checkpoint_files,
    gather,
    replace_file,
)

__all__ = ["JOB", "LATEST", "JobCheckpoint", "load_job", "save_job", "step_name"]

log = logging.getLogger("sniper.train")

JOB = "job.json"
LATEST = "latest"
TRAINER = "trainer.npz"
_FORMAT = 2
"""2: ``job.json`` checksummed, with the config; ``trainer.npz`` holds the report's figures."""
_STEP = re.compile(r"step-(\d+)")


def step_name(step: int) -> str:
    return f"step-{step:08d}"


@dataclass(frozen=True)
class JobCheckpoint:
    """A loaded job checkpoint (see the module doc)."""

    directory: Path
    """``DIR/step-<N>``."""
    step: int
    num_ps: int
    num_hubs: int
    positions: dict[int, BatchId]
    """The last batch trained of each hub that handed one out."""
    trainer: dict[str, Any]
    """:meth:`Trainer.state`, for :meth:`Trainer.resume_from`."""
    ps_manifests: list[str]
    """SHA-256 of each ps's manifest, as the ps answered its Save: what its Restore must
    answer, wherever the part lives."""
    config: dict[str, Any]
    """The config the job was trained with, as :func:`sniper.cluster._resume.job_config`
    recorded it: what a resume must keep."""
    placement: Placement | None = None
    """Where each variable was (auto_shard moves them); None: by name hash."""

    def ps_directory(self, index: int) -> Path:
        return self.directory / f"ps-{index}"

    def start_of(self, hub: int) -> tuple[int, int]:
        """(epoch, index) of the first batch hub ``hub`` has not handed out for training."""
        place = self.positions.get(hub)
        return (0, 0) if place is None else (place.epoch, place.index + 1)


async def save_job(
    root: Path,
    cluster: PsCluster,
    trainer: Trainer,
    report: TrainReport,
    *,
    keep: int,
    config: Mapping[str, Any],
) -> Path:
    """Save the job at ``report.steps`` under ``root``; returns the step directory. ``config``
    (JSON): the config the job is trained with, recorded for the resume to check."""
    name = step_name(report.steps)
    directory = root / name
    await anyio.to_thread.run_sync(_clear_stale, directory)
    # Every ps at once, each relative to its checkpoint_root: the pause is the slowest save.
    saved = await gather(
        [
            functools.partial(member.save, f"{name}/ps-{index}")
            for index, member in enumerate(cluster.members)
        ]
    )
    state = trainer.state(report)
    job = {
        "format": _FORMAT,
        "step": report.steps,
        "num_ps": len(cluster.members),
        "num_hubs": trainer.num_hubs,
        "positions": {str(h): [p.epoch, p.index] for h, p in trainer.positions.items()},
        "counters": {k: v for k, v in state.items() if k not in ("model", "metrics")},
        # From the ps' answers, not their files: a ps's part may be on its own disk.
        "sha256": {f"ps-{i}/{MANIFEST}": done.manifest_sha256 for i, done in enumerate(saved)},
        "placement": cluster.placement.to_dict(),
        "config": dict(config),
    }
    arrays = {f"model/{k}": v for k, v in state["model"].items()}
    arrays |= {f"metrics/{k}": v for k, v in state["metrics"].items()}
    await anyio.to_thread.run_sync(_write_step, root, directory, job, arrays, keep)
    return directory


def _clear_stale(directory: Path) -> None:
    """A step directory that exists before its save is removed: it was left by a crashed
    save (no ``job.json``), or it is a damaged step a resume skipped, a step of a run an older
    step was resumed from, or this run's own checkpoint of its last step, taken again at the
    end (:meth:`~sniper.roles._pauses.Pauses.finish`)."""
    if directory.exists():
        shutil.rmtree(directory)


def _write_step(
    root: Path, directory: Path, job: dict[str, Any], arrays: dict[str, Any], keep: int
) -> None:
    directory.mkdir(parents=True, exist_ok=True)  # the ps' parts may be on their own disks
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    job["sha256"][TRAINER] = replace_file(directory / TRAINER, buffer.getvalue())
    job["checksum"] = _checksum(job)
    replace_file(directory / JOB, json.dumps(job, indent=1).encode())
    replace_file(root / LATEST, f"{directory.name}\n".encode())
    # A job's steps only grow: one after this is a run's that an older step was resumed
    # from (or a damaged step a resume skipped), no longer reachable from ``latest``.
    saved = int(job["step"])
    steps = sorted(
        (int(match[1]), child)
        for child in root.iterdir()
        if (match := _STEP.fullmatch(child.name)) and child.is_dir()
    )
    after = [child for step, child in steps if step > saved]
    complete = [child for step, child in steps if step <= saved and (child / JOB).is_file()]
    for old in after + complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _checksum(job: Mapping[str, Any]) -> str:
    """SHA-256 of ``job.json``'s content but its ``checksum``, as canonical JSON: any edit of
    a value shows, a change of layout does not."""
    body = {k: v for k, v in job.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def load_job(path: Path) -> JobCheckpoint:
    """The checkpoint at ``path``, verified (see the module doc): a step directory, or a
    checkpoint directory's newest step that verifies (each one skipped is a warning)."""
    steps = _steps(path)
    if (path / JOB).is_file() or (_STEP.fullmatch(path.name) and path.is_dir() and not steps):
        return _load_step(path)
    if not steps:
        raise FileNotFoundError(
            f"{path} holds no job checkpoint (no {LATEST} and no {JOB}); "
            "give the --checkpoint-dir of a run, or one of its step-N directories"
        )
    skipped = []
    for directory in steps:
        try:
            job = _load_step(directory)
        except CorruptCheckpointError as exc:
            log.warning("skipped the checkpoint %s: %s", directory.name, exc)
            skipped.append(f"{directory.name}: {exc}")
            continue
        if skipped:
            log.warning(
                "resuming from %s, the newest step of %s that verifies", directory.name, path
            )
        return job
    raise CorruptCheckpointError(
        f"{path} holds no complete checkpoint that verifies ({'; '.join(skipped)})"
    )


def _steps(root: Path) -> list[Path]:
    """The step directories under ``root`` up to the one ``latest`` names, the newest first.

    A step after ``latest``'s is not this run's: a save that did not finish, or one of a run
    that an older step was resumed from (``--resume DIR/step-N``) and that went on apart."""
    if not root.is_dir():
        return []
    found = [
        (int(match[1]), child)
        for child in root.iterdir()
        if (match := _STEP.fullmatch(child.name)) and child.is_dir()
    ]
    named = _named_by_latest(root)
    if named is not None and (root / named[0]).is_dir():
        found = [(step, child) for step, child in found if step <= int(named[1])]
    return [child for _, child in sorted(found, reverse=True)]


def _named_by_latest(root: Path) -> re.Match[str] | None:
    """The step ``root``'s ``latest`` names; None, with a warning naming the file when it
    cannot be read or names no step (every step then counts, the newest first)."""
    path = root / LATEST
    try:
        text = path.read_bytes().decode().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("ignored %s: unreadable (%s); trying every step, the newest first", path, exc)
        return None
    named = _STEP.fullmatch(text)
    if named is None:
        log.warning("ignored %s: it names no step-N (%r); trying every step", path, text[:40])
    return named


def _load_step(directory: Path) -> JobCheckpoint:
    """One step directory, every file verified before anything is read from it."""
    where = f"job checkpoint {directory}"
    job = _verified_job(directory, where)
    try:
        sums = job["sha256"]
        num_ps = int(job["num_ps"])
        for file, digest in sums.items():
            if file.startswith("ps-") and not (directory / file).parent.is_dir():
                continue  # a ps's part on that ps's own disk: checked when it restores
            if not (directory / file).is_file():
                raise CorruptCheckpointError(f"{where}: {file} is missing")
            if _sha256(directory / file) != digest:
                raise CorruptCheckpointError(f"{where}: {file} does not match its checksum")
        for index in range(num_ps):
            if (part := directory / f"ps-{index}").is_dir():
                check_checkpoint_files(part)
        stored = _trainer_arrays(directory / TRAINER, where)
        positions = {
            int(hub): BatchId(int(hub), int(epoch), int(index))
            for hub, (epoch, index) in job["positions"].items()
        }
        return JobCheckpoint(
            directory=directory,
            step=int(job["step"]),
            num_ps=num_ps,
            num_hubs=int(job["num_hubs"]),
            positions=positions,
            trainer={
                **job["counters"],
                "model": _part(stored, "model/"),
                "metrics": _part(stored, "metrics/"),
            },
            ps_manifests=[sums[f"ps-{i}/{MANIFEST}"] for i in range(num_ps)],
            config=dict(job["config"]),
            placement=Placement.from_dict(job["placement"]) if "placement" in job else None,
        )
    except CorruptCheckpointError:
        raise
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(
            f"{where} is unreadable: {type(exc).__name__}: {exc}"
        ) from None


def _trainer_arrays(path: Path, where: str) -> dict[str, Any]:
    """Every array of ``trainer.npz``; damage is one line naming it."""
    content = path.read_bytes()  # np.load of a path leaves it open when the zip is bad
    try:
        with np.load(io.BytesIO(content), allow_pickle=False) as arrays:
            return {key: arrays[key] for key in arrays.files}
    except Exception as exc:  # a damaged zip raises many kinds; all mean the same here
        raise CorruptCheckpointError(
            f"{where}: {TRAINER} is unreadable ({type(exc).__name__}: {exc})"
        ) from None


def _verified_job(directory: Path, where: str) -> dict[str, Any]:
    """``job.json``, parsed and checked against its own checksum."""
    try:
        job = json.loads((directory / JOB).read_bytes())
    except FileNotFoundError:
        raise CorruptCheckpointError(
            f"{where}: {JOB} is missing (a save that did not finish)"
        ) from None
    except (OSError, ValueError) as exc:
        raise CorruptCheckpointError(
            f"{where}: {JOB} is not JSON, truncated or damaged ({exc})"
        ) from None
    if not isinstance(job, dict):
        raise CorruptCheckpointError(f"{where}: {JOB} is not a job checkpoint")
    if "checksum" not in job and job.get("format") != _FORMAT:
        raise CorruptCheckpointError(
            f"{where}: {JOB} is format {job.get('format')!r}, without a checksum; this sniper "
            f"reads format {_FORMAT} (resume it with the sniper that wrote it)"
        )
    if job.get("checksum") != _checksum(job):
        raise CorruptCheckpointError(f"{where}: {JOB} does not match its checksum (edited?)")
    if job.get("format") != _FORMAT:
        raise CorruptCheckpointError(
            f"{where}: {JOB} is format {job.get('format')!r}; this sniper reads format {_FORMAT}"
        )
    return job


def _part(arrays: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}
