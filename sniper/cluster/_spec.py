"""The model spec: how each variable's embedding table is built, from ``[variables]`` in TOML.

A training config names its tables in a ``[variables]`` table: ``[variables.default]`` for
every variable, ``[variables.NAME]`` for one. Each is a :class:`TableSpec`. The variables
themselves come from the data (a Parquet file's schema, Criteo's ``C1..C26``, the synthetic
workload); the spec only says how to build them, so naming a variable the data lacks is an
error, raised before any process starts.

A variable's entry overrides the default's keys one by one, with one exception: an entry that
names another ``optimizer`` (or ``initializer``) than the default's does not inherit the
default's ``params`` (or ``init``), which belong to the other one. The same holds between
``[variables.default]`` and the built-in default, Adagrad with ``lr = 0.05``.

Pooling: ``pooling = "sum"`` (the default), ``"mean"``, ``"sqrtn"`` or ``"none"`` says how
the ps combines an example's rows (:data:`sniper.store.BAG_POOLINGS`); a ``none`` variable is a
sequence, handed to the model unpooled (:attr:`sniper.models.ModelInputs.sequences`), which
the numpy MLP refuses and a torch model takes as a jagged pair.

Sizing: ``capacity = 0`` and ``shards = 0`` size a table by ``sniper.placement``'s one policy
(:func:`~sniper.placement.auto_capacity`, :func:`~sniper.placement.auto_shards`); initializers
are the store's (:func:`~sniper.store.make_initializer`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sniper._config import from_mapping
from sniper.models import ModelInputs
from sniper.placement import auto_capacity, auto_shards, counted_capacity
from sniper.roles import MAX_DIM
from sniper.store import (
    BAG_POOLINGS,
    EVICTION_POLICIES,
    MAX_TABLE_SHARDS,
    Optimizer,
    make_initializer,
    make_optimizer,
)

__all__ = ["DEFAULT", "DataShape", "ModelSpec", "PooledTable", "TableSpec", "model_inputs"]

DEFAULT = "default"
"""The ``[variables]`` key whose entry applies to every variable."""


@dataclass(frozen=True)
class TableSpec:
    """One variable's table; every field is a key of ``[variables.NAME]``."""

    dim: int = 16
    capacity: int = 0
    """Rows the table holds (LRU eviction past it); 0 sizes it from the data. A written one
    must hold the distinct ids of the batches in flight (``sniper train`` names the least)."""
    shards: int = 0
    """Shards the ps splits the table into; 0: one per 32k signs per batch."""
    optimizer: str = "adagrad"
    params: dict[str, float] = field(default_factory=lambda: {"lr": 0.05})
    """The optimizer's parameters (``lr`` for sgd/adagrad/adam, ``alpha``... for ftrl)."""
    initializer: str = "normal"
    init: dict[str, float] = field(default_factory=dict)
    """The initializer's parameters: normal ``mean``, ``std``; uniform ``low``, ``high``;
    constant ``value`` (defaults in :data:`sniper.store.INITIALIZERS`)."""
    min_count: int = 0
    """Admission: a sign gets a row once seen this many times (0 or 1: at once)."""
    eviction: str = "lru"
    pooling: str = "sum"
    """How an example's rows are combined: ``sum``, ``mean``, ``sqrtn``, or ``none`` (a
    sequence feature: every value's row reaches the model, unpooled)."""

    def __post_init__(self) -> None:
        if not 1 <= self.dim <= MAX_DIM:
            raise ValueError(f"dim must be in [1, {MAX_DIM}], got {self.dim}")
        if not 0 <= self.shards <= MAX_TABLE_SHARDS:
            raise ValueError(
                f"shards must be in [0, {MAX_TABLE_SHARDS}] (0: automatic), got {self.shards}"
            )
        if self.capacity < 0 or 0 < self.capacity < self.shards or self.capacity >= 2**30:
            raise ValueError(
                f"capacity must be 0 (automatic) or in [shards, 2**30), got {self.capacity}"
            )
        if self.min_count < 0:
            raise ValueError(f"min_count must be 0 or more, got {self.min_count}")
        if self.eviction not in EVICTION_POLICIES:
            raise ValueError(
                f"eviction must be one of {', '.join(EVICTION_POLICIES)}, got {self.eviction!r}"
            )
        if self.pooling not in BAG_POOLINGS:
            raise ValueError(
                f"pooling must be one of {', '.join(BAG_POOLINGS)}, got {self.pooling!r}"
            )
        self.make_optimizer()
        self.initializer_args()

    def make_optimizer(self) -> Optimizer:
        """The optimizer this spec names; ``ValueError`` names the key that is wrong."""
        return make_optimizer(self.optimizer, self.params, value_prefix="params: ")

    def initializer_args(self) -> tuple[str, float, float]:
        """``(kind, a, b)`` as CreateVariable's ``InitializerConfig`` takes them."""
        initializer = make_initializer(self.initializer, self.init, value_prefix="init: ")
        return initializer.args()


@dataclass(frozen=True)
class DataShape:
    """What the launcher learns of the data before it creates any table."""

    source: str
    """The data as the config names it (``criteo:day.tsv``), for error messages."""
    variables: tuple[str, ...]
    dense_features: int
    signs_per_batch: dict[str, int]
    """Signs of each variable in one batch (measured on the first batch for files)."""
    vocabulary: dict[str, int] | None = None
    """Distinct signs of each variable, when the data knows it: the synthetic generator's
    (a file's are counted, :attr:`counted`)."""
    labels: tuple[str, ...] = ("label",)
    """The data's label names: the model is built to predict each."""
    regression: tuple[str, ...] = ()
    """The labels that are regression targets (the rest are binary)."""
    counted: dict[str, int] | None = None
    """Distinct signs of each variable counted in the data (an estimate) where it does not
    know them: for the tables sniper sizes (``capacity = 0``)."""


@dataclass(frozen=True)
class ModelSpec:
    """``[variables]``: a default :class:`TableSpec` and the variables that override it."""

    default: TableSpec = field(default_factory=TableSpec)
    overrides: Mapping[str, TableSpec] = field(default_factory=dict)
    pooling_given: frozenset[str] = frozenset()
    """The entries (``default`` among them) whose TOML says ``pooling``: a variable's ``sum``
    may be the built-in, which a user's ``[features]`` column overrides, or written under its
    own name, which must agree with it."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, default_dim: int = 16) -> ModelSpec:
        """The spec of a ``[variables]`` TOML table; errors name ``variables.NAME.KEY``.

        ``default_dim`` is the width when ``[variables.default]`` does not say (the synthetic
        workload's own).
        """
        entries: dict[str, Mapping[str, Any]] = {}
        for name, entry in raw.items():
            if not isinstance(entry, Mapping):
                raise ValueError(
                    f"variables.{name} must be a table of keys such as dim and optimizer, "
                    f"got {entry!r}"
                )
            entries[name] = entry
        builtin = {"dim": default_dim, "optimizer": "adagrad", "params": {"lr": 0.05}}
        base = _merge(builtin, entries.pop(DEFAULT, {}))
        default = _table(DEFAULT, base)
        overrides = {name: _table(name, _merge(base, entry)) for name, entry in entries.items()}
        given = frozenset(name for name, entry in raw.items() if "pooling" in entry)
        return cls(default, overrides, given)

    def table(self, name: str) -> TableSpec:
        """Variable ``name``'s table as configured (its override, else the default), unsized."""
        return self.overrides.get(name, self.default)

    def resolve(self, data: DataShape) -> dict[str, TableSpec]:
        """Every variable of ``data`` with its table, sized; an override the data lacks raises."""
        missing = sorted(set(self.overrides) - set(data.variables))
        if missing:
            raise ValueError(
                f"variables.{missing[0]}: the data ({data.source}) has no variable "
                f"{missing[0]!r}; its variables are {_names(data.variables)}"
            )
        return {name: _sized(self.table(name), name, data) for name in data.variables}


class PooledTable(Protocol):
    """What :func:`model_inputs` needs of a variable: a planned :class:`TableSpec` or the
    ``VariableConfig`` a checkpoint's manifest records."""

    @property
    def dim(self) -> int: ...
    @property
    def pooling(self) -> str: ...


def model_inputs(
    tables: Mapping[str, PooledTable],
    dense_features: int,
    labels: tuple[str, ...] = ("label",),
    regression: tuple[str, ...] = (),
) -> ModelInputs:
    """What a model for ``tables`` takes: the pooled variables' widths in the input matrix,
    and the unpooled ones (pooling ``none``) as sequences beside it; one output per label
    (``regression``: those that are regression targets). Training plans it from the tables,
    ``sniper eval`` from a checkpoint's variables: one layout for both."""
    return ModelInputs(
        {name: table.dim for name, table in tables.items() if table.pooling != "none"},
        dense_features,
        labels,
        regression=regression,
        sequences={name: table.dim for name, table in tables.items() if table.pooling == "none"},
    )


def _merge(base: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base) | dict(entry)
    for kind, params in (("optimizer", "params"), ("initializer", "init")):
        if kind in entry and entry[kind] != base.get(kind) and params not in entry:
            merged[params] = {}
    return merged


def _table(name: str, values: Mapping[str, Any]) -> TableSpec:
    prefix = f"variables.{name}."
    try:
        return from_mapping(TableSpec, values, f"variables.{name}", prefix)
    except ValueError as exc:
        message = str(exc)
        raise ValueError(
            message if message.startswith("variables.") else prefix + message
        ) from None


def _sized(spec: TableSpec, name: str, data: DataShape) -> TableSpec:
    shards = spec.shards or auto_shards(data.signs_per_batch.get(name, 0))
    known = (data.vocabulary or {}).get(name)
    counted = (data.counted or {}).get(name)
    capacity = spec.capacity or (
        counted_capacity(counted) if counted is not None and not known else auto_capacity(known)
    )
    if capacity < shards:
        raise ValueError(
            f"variables.{name}.capacity ({capacity}) must be at least its shards ({shards})"
        )
    return dataclasses.replace(spec, capacity=capacity, shards=shards)


def _names(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:8])
    return shown + (f" ... ({len(names)} in all)" if len(names) > 8 else "")
