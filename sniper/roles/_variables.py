"""From a CreateVariable request to an ``EmbeddingTable``, with errors that name the field."""

from __future__ import annotations

from sniper.rpc.v1 import CreateVariableRequest
from sniper.store import (
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
    "same_config",
    "table_from_request",
]

MAX_DIM = 4096
"""Widest row a ps accepts: beyond this a request is far more likely a bug than a model."""


class MemoryBudgetError(ValueError):
    """A variable would not fit in the memory this ps may give its tables."""


def estimate_bytes(dim: int, capacity: int, optimizer: Optimizer) -> int:
    """Preallocated bytes of a table: rows and state, plus at most 33 bytes of index per row."""
    per_row = 4 * dim * (1 + optimizer.slots) + (4 if optimizer.uses_steps else 0) + 33
    return capacity * per_row


def _optimizer(request: CreateVariableRequest) -> Optimizer:
    config = request.optimizer
    name = config.name if config is not None else ""
    params = dict(config.params) if config is not None else {}
    return make_optimizer(
        name, params, name_field="optimizer.name", params_field="optimizer.params"
    )


def _initializer(request: CreateVariableRequest) -> Initializer:
    config = request.initializer
    if config is None:
        return DEFAULT_INITIALIZER
    return Initializer.from_args(config.kind, config.a, config.b)


MAX_SKETCH_WIDTH = 1 << 26
MAX_SKETCH_DEPTH = 16


def _admission(request: CreateVariableRequest) -> Admission | None:
    config = request.admission
    if config is None or config.min_count <= 1:
        return None
    width, depth = config.sketch_width or 1 << 20, config.sketch_depth or 4
    if width > MAX_SKETCH_WIDTH:
        raise ValueError(f"admission.sketch_width must be at most {MAX_SKETCH_WIDTH}, got {width}")
    if depth > MAX_SKETCH_DEPTH:
        raise ValueError(f"admission.sketch_depth must be at most {MAX_SKETCH_DEPTH}, got {depth}")
    return Admission(config.min_count, width=width, depth=depth)


def table_from_request(
    request: CreateVariableRequest,
    budget_bytes: int,
    *,
    lock: LockMode = "shard",
    pooling: Pooling = "fused",
) -> EmbeddingTable:
    """Build the table a CreateVariable request describes; ``ValueError`` names a bad field.

    ``budget_bytes`` is what this table may preallocate (the ps's memory limit minus what its
    other tables hold); past it, :class:`MemoryBudgetError` says how much was asked. ``lock``
    and ``pooling`` are the ps's, not the variable's (see :class:`~sniper.roles.PsRoleConfig`).
    """
    if not request.name:
        raise ValueError("name must not be empty")
    if not 1 <= request.dim <= MAX_DIM:
        raise ValueError(f"dim must be in [1, {MAX_DIM}], got {request.dim}")
    if request.capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {request.capacity}")
    optimizer = _optimizer(request)
    admission = _admission(request)
    shards = request.shards or 1
    needed = estimate_bytes(request.dim, request.capacity, optimizer)
    if admission is not None:
        needed += 4 * shards * admission.width * admission.depth
    if needed > budget_bytes:
        raise MemoryBudgetError(
            f"variable {request.name!r} needs about {needed / 2**30:.2f} GiB (capacity "
            f"{request.capacity:,} x dim {request.dim}), but this ps has "
            f"{budget_bytes / 2**30:.2f} GiB left for tables (--max-table-gb)"
        )
    return EmbeddingTable(
        request.dim,
        capacity=request.capacity,
        optimizer=optimizer,
        initializer=_initializer(request),
        num_shards=shards,
        eviction=request.eviction or "lru",
        admission=admission,
        seed=request.seed,
        lock=lock,
        pooling=pooling,
    )


def same_config(a: CreateVariableRequest, b: CreateVariableRequest) -> bool:
    """Whether two CreateVariable requests describe the same variable.

    Compares decoded values, not bytes: protobuf may order a map's entries either way.
    """
    return a.to_dict() == b.to_dict()
