"""How many processes and threads a job may ask of the machine it starts them on.

``num_ps = 100000`` once made the local launcher spawn ``sniper serve`` processes until the
machine choked (38 processes and 10 GB of RSS in 30 s). A job is now refused, as a config error
naming the numbers and before any process starts, when it asks for more than the machine has:

- **cores**: the ps and hub processes the job starts on this machine (``launcher = "local"``;
  servers named by ``--ps``/``--hub`` run elsewhere and do not count) number at most
  :func:`most_tasks`, ``max(8, 4 * os.cpu_count())``; so do the ``workers`` of one ps (each a
  thread that runs the ps' kernels). Beyond a few per core they only take turns.
- **memory**: each such process costs :data:`PROCESS_MB` (the measured resident size of an
  idle ``sniper serve``, numba's compiled kernels included) before its tables hold a row, and
  together they fit in the machine's physical memory.

The defaults (2 ps, hubs as configured) and every config under ``experiments/`` pass on a
machine of one core and 2 GB.
"""

from __future__ import annotations

import os

from sniper.cluster._config import TrainConfig

__all__ = ["PROCESS_MB", "check_machine", "machine_memory_mb", "most_tasks"]

PROCESS_MB = 256
"""Resident MiB of one idle ``sniper serve`` process (10 GB over 38 processes measured)."""


def most_tasks(cores: int | None = None) -> int:
    """The most processes (or threads of one ps) a job may start on ``cores`` cores."""
    return max(8, 4 * (cores if cores is not None else os.cpu_count() or 1))


def machine_memory_mb() -> int:
    """This machine's physical memory in MiB."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20


def check_machine(
    config: TrainConfig,
    *,
    ps_named: bool,
    hubs_named: bool,
    cores: int | None = None,
    memory_mb: int | None = None,
) -> None:
    """``ValueError`` naming the numbers when ``config`` asks more of this machine than it has
    (see the module doc); ``cores`` and ``memory_mb`` default to the machine's."""
    limit = most_tasks(cores)
    cores = cores if cores is not None else os.cpu_count() or 1
    if config.launcher in ("local", "inprocess") and config.workers > limit:
        raise ValueError(
            f"workers = {config.workers} threads per ps is more than this machine's "
            f"{cores} core(s) can run: at most {limit} (4 per core, at least 8)"
        )
    if config.launcher != "local":
        return
    ps = 0 if ps_named else config.num_ps
    hubs = 0 if hubs_named else config.num_hubs
    processes = ps + hubs
    if processes > limit:
        raise ValueError(
            f"num_ps = {config.num_ps} and num_hubs = {config.num_hubs} would start {processes} "
            f"processes on this machine of {cores} core(s): at most {limit} (4 per core, at "
            "least 8); name servers started elsewhere (--ps, --hub, --cluster-spec) or use ray"
        )
    memory = memory_mb if memory_mb is not None else machine_memory_mb()
    if processes * PROCESS_MB > memory:
        raise ValueError(
            f"num_ps = {config.num_ps} and num_hubs = {config.num_hubs} would start {processes} "
            f"processes of about {PROCESS_MB} MiB each ({processes * PROCESS_MB} MiB) on this "
            f"machine of {memory} MiB"
        )
