"""Resharding: the ps checkpoints of P ps regrouped for Q ps.

A job's ps each save the variables they own (by the job's placement). To restore on
another number of ps, every variable goes to ``ps_for_variable(name, Q)``; inside a variable,
rows reach their shard by the sign hash when they are imported, as in any restore. Nothing is
split or merged: each variable's file moves whole, verified on the way (checksums, arrays) by
the same loader a restore uses, so every row and its optimizer state arrive exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sniper.hashing import ps_for_variable
from sniper.roles import CorruptCheckpointError, load_checkpoint, write_checkpoint
from sniper.rpc import VariableConfig
from sniper.store import TableExport

__all__ = ["reshard"]


def reshard(sources: Sequence[Path], targets: Sequence[Path]) -> list[int]:
    """Write ``len(targets)`` ps checkpoints holding the variables of ``sources``; the rows
    written to each target. A variable found in two sources is refused (DATA_LOSS)."""
    if not sources or not targets:
        raise ValueError("resharding needs at least one source and one target checkpoint")
    groups: list[list[tuple[VariableConfig, TableExport]]] = [[] for _ in targets]
    seen: dict[str, Path] = {}
    for source in sources:
        for config, data in load_checkpoint(source):
            if config.name in seen:
                raise CorruptCheckpointError(
                    f"variable {config.name!r} is in both {seen[config.name]} and {source}; "
                    "each ps checkpoint of one job holds its own variables"
                )
            seen[config.name] = source
            groups[ps_for_variable(config.name, len(targets))].append((config, data))
    return [
        write_checkpoint(target, [(config, _constant(data)) for config, data in group])
        for target, group in zip(targets, groups, strict=True)
    ]


def _constant(data: TableExport) -> Callable[[], TableExport]:
    return lambda: data
