"""Job checkpoints: every ps, the trainer and each hub's position, all at one training step.

Layout under the checkpoint directory ``DIR`` (each ps's ``checkpoint_root``):

- ``DIR/step-<N>/ps-<i>/``: ps ``i``'s tables (``sniper.roles._checkpoint``: checksummed, each
  written atomically by the ps itself);
- ``DIR/step-<N>/trainer.npz``: the dense model and its Adam state;
- ``DIR/step-<N>/job.json``, written last: the step, the number of ps and hubs, each hub's
  position, the report's counters and the SHA-256 of every manifest and of ``trainer.npz``;
- ``DIR/latest``: the name of the newest complete step, replaced atomically after its
  ``job.json``.

The trainer calls :func:`save_job` with its pipeline drained (no batch is between ReadSample and
PushGrad), so the tables hold exactly the pushes of ``N`` steps and each hub's position is the
last batch trained. A step directory without ``job.json`` is never loaded; ``latest`` only ever
names a complete one; the oldest complete steps beyond ``keep`` are removed.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import shutil
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
    gather,
    replace_file,
)

__all__ = ["JOB", "LATEST", "JobCheckpoint", "load_job", "save_job", "step_name"]

JOB = "job.json"
LATEST = "latest"
_FORMAT = 1


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
    ps_manifests: list[str]
    """SHA-256 of each ps's manifest, as the ps answered its Save: what its Restore must
    answer, wherever the part lives."""
    """:meth:`Trainer.state`, for :meth:`Trainer.resume_from`."""
    placement: Placement | None = None
    """Where each variable was (auto_shard moves them); None: by name hash."""

    def ps_directory(self, index: int) -> Path:
        return self.directory / f"ps-{index}"

    def start_of(self, hub: int) -> tuple[int, int]:
        """(epoch, index) of the first batch hub ``hub`` has not handed out for training."""
        place = self.positions.get(hub)
        return (0, 0) if place is None else (place.epoch, place.index + 1)


async def save_job(
    root: Path, cluster: PsCluster, trainer: Trainer, report: TrainReport, *, keep: int
) -> Path:
    """Save the job at ``report.steps`` under ``root``; returns the step directory."""
    name = step_name(report.steps)
    directory = root / name
    await anyio.to_thread.run_sync(_clear_incomplete, directory)
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
        "num_hubs": len(trainer.hubs),
        "positions": {str(h): [p.epoch, p.index] for h, p in trainer.positions.items()},
        "counters": {k: v for k, v in state.items() if k != "model"},
        # From the ps' answers, not their files: a ps's part may be on its own disk.
        "sha256": {f"ps-{i}/{MANIFEST}": done.manifest_sha256 for i, done in enumerate(saved)},
        "placement": cluster.placement.to_dict(),
    }
    await anyio.to_thread.run_sync(_write_step, root, directory, job, state["model"], keep)
    return directory


def _clear_incomplete(directory: Path) -> None:
    """A step directory left by a crashed save (no ``job.json``) is removed before reuse."""
    if directory.exists() and not (directory / JOB).is_file():
        shutil.rmtree(directory)


def _write_step(
    root: Path, directory: Path, job: dict[str, Any], model: dict[str, Any], keep: int
) -> None:
    directory.mkdir(parents=True, exist_ok=True)  # the ps' parts may be on their own disks
    buffer = io.BytesIO()
    np.savez(buffer, **model)
    job["sha256"]["trainer.npz"] = replace_file(directory / "trainer.npz", buffer.getvalue())
    replace_file(directory / JOB, json.dumps(job, indent=1).encode())
    replace_file(root / LATEST, f"{directory.name}\n".encode())
    steps = sorted(p for p in root.glob("step-*") if (p / JOB).is_file())
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_job(path: Path) -> JobCheckpoint:
    """The checkpoint at ``path``: a step directory, or a checkpoint directory's ``latest``."""
    if (path / JOB).is_file():
        directory = path
    elif (path / LATEST).is_file():
        directory = path / (path / LATEST).read_text().strip()
    else:
        raise FileNotFoundError(
            f"{path} holds no job checkpoint (no {LATEST} and no {JOB}); "
            "give the --checkpoint-dir of a run, or one of its step-N directories"
        )
    where = f"job checkpoint {directory}"
    try:
        job = json.loads((directory / JOB).read_text())
        sums = job["sha256"]
        for file, digest in sums.items():
            if not (directory / file).exists() and file != "trainer.npz":
                continue  # a ps's part on that ps's own disk: checked when it restores
            if _sha256(directory / file) != digest:
                raise CorruptCheckpointError(f"{where}: {file} does not match its checksum")
        with np.load(directory / "trainer.npz", allow_pickle=False) as arrays:
            model = {key: arrays[key] for key in arrays.files}
        positions = {
            int(hub): BatchId(int(hub), int(epoch), int(index))
            for hub, (epoch, index) in job["positions"].items()
        }
        return JobCheckpoint(
            directory=directory,
            step=int(job["step"]),
            num_ps=int(job["num_ps"]),
            num_hubs=int(job["num_hubs"]),
            positions=positions,
            trainer={**job["counters"], "model": model},
            ps_manifests=[sums[f"ps-{i}/{MANIFEST}"] for i in range(int(job["num_ps"]))],
            placement=Placement.from_dict(job["placement"]) if "placement" in job else None,
        )
    except CorruptCheckpointError:
        raise
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(
            f"{where} is unreadable: {type(exc).__name__}: {exc}"
        ) from None
