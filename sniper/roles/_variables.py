"""From a variable's configuration to an ``EmbeddingTable``, with errors that name the field
as CreateVariable's message does (``optimizer.name``...), whatever transport carried it."""

from __future__ import annotations

from sniper.rpc import VariableConfig
from sniper.store import (
    BAG_POOLINGS,
    DEFAULT_INITIALIZER,
    Admission,
    EmbeddingTable,
    Initializer,
    LockMode,
    Optimizer,
    Pooling,
    make_optimizer,
)

__all__ = [
    "MAX_DIM",
    "MemoryBudgetError",
    "estimate_bytes",
    "table_from_config",
]

MAX_DIM = 4096
"""Widest row a ps accepts: beyond this a request is far more likely a bug than a model."""


class MemoryBudgetError(ValueError):
    """A variable would not fit in the memory this ps may give its tables."""


def estimate_bytes(dim: int, capacity: int, optimizer: Optimizer) -> int:
    """Preallocated bytes of a table: rows and state, plus at most 33 bytes of index per row."""
    per_row = 4 * dim * (1 + optimizer.slots) + (4 if optimizer.uses_steps else 0) + 33
    return capacity * per_row


def _optimizer(config: VariableConfig) -> Optimizer:
    return make_optimizer(
        config.optimizer,
        config.optimizer_params,
        name_field="optimizer.name",
        params_field="optimizer.params",
    )


def _initializer(config: VariableConfig) -> Initializer:
    if config.initializer is None:
        return DEFAULT_INITIALIZER
    return Initializer.from_args(*config.initializer)


MAX_SKETCH_WIDTH = 1 << 26
MAX_SKETCH_DEPTH = 16


def _admission(config: VariableConfig) -> Admission | None:
    if config.admission_min_count <= 1:
        return None
    width, depth = config.admission_sketch_width or 1 << 20, config.admission_sketch_depth or 4
    if width > MAX_SKETCH_WIDTH:
        raise ValueError(f"admission.sketch_width must be at most {MAX_SKETCH_WIDTH}, got {width}")
    if depth > MAX_SKETCH_DEPTH:
        raise ValueError(f"admission.sketch_depth must be at most {MAX_SKETCH_DEPTH}, got {depth}")
    return Admission(config.admission_min_count, width=width, depth=depth)


def table_from_config(
    config: VariableConfig,
    budget_bytes: int,
    *,
    lock: LockMode = "shard",
    pooling: Pooling = "fused",
) -> EmbeddingTable:
    """Build the table ``config`` describes; ``ValueError`` names a bad field.

    ``budget_bytes`` is what this table may preallocate (the ps's memory limit minus what its
    other tables hold); past it, :class:`MemoryBudgetError` says how much was asked. ``lock``
    and ``pooling`` are the ps's, not the variable's (see :class:`~sniper.roles.PsRoleConfig`).
    """
    if not config.name:
        raise ValueError("name must not be empty")
    if not 1 <= config.dim <= MAX_DIM:
        raise ValueError(f"dim must be in [1, {MAX_DIM}], got {config.dim}")
    if config.capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {config.capacity}")
    if config.pooling not in BAG_POOLINGS:
        raise ValueError(
            f"pooling must be one of {', '.join(BAG_POOLINGS)}, got {config.pooling!r}"
        )
    optimizer = _optimizer(config)
    admission = _admission(config)
    shards = config.shards or 1
    needed = estimate_bytes(config.dim, config.capacity, optimizer)
    if admission is not None:
        needed += 4 * shards * admission.width * admission.depth
    if needed > budget_bytes:
        raise MemoryBudgetError(
            f"variable {config.name!r} needs about {needed / 2**30:.2f} GiB (capacity "
            f"{config.capacity:,} x dim {config.dim}), but this ps has "
            f"{budget_bytes / 2**30:.2f} GiB left for tables (--max-table-gb)"
        )
    return EmbeddingTable(
        config.dim,
        capacity=config.capacity,
        optimizer=optimizer,
        initializer=_initializer(config),
        num_shards=shards,
        eviction=config.eviction or "lru",
        admission=admission,
        seed=config.seed,
        lock=lock,
        pooling=pooling,
        bag_pooling=config.pooling,
    )
