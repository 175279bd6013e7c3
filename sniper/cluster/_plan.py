"""What a job will build, resolved from its config and its data before any process starts.

:func:`plan_training` reads the data's shape (variables, dense features, the first batch),
resolves the ``[variables]`` model spec against it and builds the dense model of ``[model]``
for it, so that a config that does not fit the data (or names a model that does not open)
fails before any process starts, with the key named.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sniper.cluster._config import TrainConfig
from sniper.cluster._data import check_same_schema, probe_data, resolved_features
from sniper.cluster._inflight import check_capacities
from sniper.cluster._spec import DataShape, ModelSpec, TableSpec, model_inputs
from sniper.data import FeatureSpec, Reader, Workload, count_distinct_signs
from sniper.models import DenseModel, ModelConfig, ModelInputs
from sniper.rpc import Placement

__all__ = ["TrainPlan", "oracle_auc", "plan_training"]

log = logging.getLogger("sniper.train")


@dataclass(frozen=True)
class TrainPlan:
    """What a run will build, resolved before any process starts."""

    data: DataShape
    tables: dict[str, TableSpec]
    """Every variable of the data with its sized table, in the data's order."""
    eval_reader: Reader | None
    model_config: ModelConfig
    """The dense model (``[model]``): the trainer's checkpoints record it."""
    model_inputs: ModelInputs
    """What the dense model is built for: the tables' widths, the data's dense features and
    labels."""
    _models: list[DenseModel] = dataclasses.field(repr=False, compare=False)
    """The model built while planning (to refuse a bad ``[model]`` before any process
    starts), until an attempt takes it."""
    model_seed: int = 0
    model_threads: int = 0
    features: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The ``[features]`` table the data is read through, with the statistics measured on it
    (``standardize``): what the hubs, the checkpoints and evaluation take. Empty without one."""
    _sizing: tuple[ModelSpec, Reader] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    """The model spec and the data's reader, for :meth:`counted`."""
    model_lr: float = 0.0
    """The dense optimizer's learning rate as the model trains with it: the model's own
    default where ``[model]`` gives none (:meth:`~sniper.models.DenseModel.learning_rate`),
    else the config's. What a checkpoint records as ``lr``."""

    def counted(self, kept: Mapping[str, Mapping[str, Any]] | None = None) -> TrainPlan:
        """This plan with the tables sniper sizes (``capacity = 0``) sized from the distinct
        ids counted in the data (see :func:`plan_training`), ``kept`` a resumed checkpoint's
        tables. :func:`plan_training` counts last, after every check that reads no more
        than the data's first batch; a resume counts after its checkpoint's checks too, so
        that a refused resume reads nothing more."""
        if self._sizing is None:
            return self
        model_spec, reader = self._sizing
        shape = _counted(self.data, reader, model_spec)
        if shape is self.data:
            return self
        spec = getattr(reader, "features", None)
        tables = _tables(model_spec, shape, spec, kept or {})
        _warn_evicting(tables, shape)
        return dataclasses.replace(self, data=shape, tables=tables)

    def model(self) -> DenseModel:
        """The dense model of an attempt: the one built while planning for the first, a new
        one for each restart (which may start afresh, where the first has trained)."""
        if self._models:
            return self._models.pop()
        return self.model_config.open(
            self.model_inputs, seed=self.model_seed, threads=self.model_threads
        )

    def placement(self, num_ps: int) -> Placement:
        """The balanced placement of these tables on ``num_ps`` ps: by the data's signs per
        batch, then the tables' rows (``placement = "balanced"``)."""
        costs = {
            name: (self.data.signs_per_batch.get(name, 0), table.capacity)
            for name, table in self.tables.items()
        }
        return Placement.balanced(costs, num_ps)


def plan_training(
    config: TrainConfig,
    workload: Workload,
    *,
    kept: Mapping[str, Mapping[str, Any]] | None = None,
    size_tables: bool = True,
) -> TrainPlan:
    """Read the data's shape and resolve the model spec against it; errors name the key.

    A ``capacity`` written in ``[variables]`` below the rows the job's batches in flight hold
    is refused (:func:`~sniper.cluster._inflight.check_capacities`).

    A table sniper sizes (``capacity = 0``) on data that does not know its variable's
    vocabulary (any file: only the synthetic generator knows it) is sized from its distinct
    signs, counted in one pass over the data (:func:`~sniper.data.count_distinct_signs`).
    ``kept``: the tables a resumed checkpoint
    recorded (its ``variables``), whose sizes a table sniper sizes keeps, growing its rows
    where the data's ids need more (the checkpoint's rows go into it by sign). ``size_tables
    = False`` leaves the count to :meth:`TrainPlan.counted`: a resume counts once its
    checkpoint's checks passed, and a trainer rank past the first never, as it makes no table
    (its plan's capacities are then not the job's: rank 0 sizes and creates the tables)."""
    probe = functools.partial(
        probe_data,
        workload=workload,
        scale=config.scale,
        batch_size=config.batch_size,
        seed=config.seed,
        nonfinite_dense=config.nonfinite_dense,
    )
    shape, reader = probe(config.data, features=config.feature_spec())
    features = resolved_features(reader)
    model_spec = config.model_spec(workload.embedding_dim)
    spec = getattr(reader, "features", None)
    tables = _tables(model_spec, shape, spec, kept or {})
    eval_reader = None
    if config.eval_data:
        # Held-out data is read as training reads: the same columns, the training statistics.
        eval_shape, eval_reader = probe(config.eval_data, features=spec)
        check_same_schema(eval_shape, shape)
    model_config = config.model_config()
    inputs = model_inputs(tables, shape.dense_features, shape.labels, shape.regression)
    model = model_config.open(inputs, seed=config.seed, threads=config.blas_threads)
    check_capacities(config, model_spec, tables, shape, reader)
    plan = TrainPlan(
        shape,
        tables,
        eval_reader,
        model_config,
        inputs,
        [model],
        config.seed,
        config.blas_threads,
        features,
        _sizing=(model_spec, reader),
        model_lr=_learning_rate(model, model_config, config),
    )
    # Last: a config that does not fit fails before the pass over the data.
    return plan.counted(kept) if size_tables else plan


def _learning_rate(model: DenseModel, model_config: ModelConfig, config: TrainConfig) -> float:
    """The learning rate ``model`` trains with: its own word, else the one the config gave
    it, else the top-level ``lr`` (a model that says nothing of its default)."""
    lr = model.learning_rate()
    return lr if lr is not None else model_config.lr or config.lr


def _tables(
    model_spec: ModelSpec, shape: DataShape, spec: object, kept: Mapping[str, Any]
) -> dict[str, TableSpec]:
    """Every variable's table: sized from ``shape``, or as ``kept`` recorded it, and pooled
    as a user's table's ``[features]`` (``spec``) says."""
    tables = _kept(model_spec.resolve(shape), model_spec, kept, shape)
    return (
        _pooled_as_features_say(tables, model_spec, spec)
        if isinstance(spec, FeatureSpec)
        else tables
    )


def _counted(shape: DataShape, reader: Reader, spec: ModelSpec) -> DataShape:
    """``shape`` with the distinct signs counted of each variable whose table sniper sizes,
    where the data does not know them (a resumed one too: other data may need it larger)."""
    known = shape.vocabulary or {}
    names = [
        name for name in shape.variables if spec.table(name).capacity == 0 and name not in known
    ]
    if not names:
        return shape
    log.info(
        "sizing %d tables (capacity = 0) from the data: counting their distinct ids in %s",
        len(names),
        shape.source,
    )
    started = time.perf_counter()
    counted = count_distinct_signs(reader, names)
    log.info(
        "counted in %.1f s: %s",
        time.perf_counter() - started,
        ", ".join(f"{name} ~{count:,}" for name, count in list(counted.items())[:8])
        + (f" ... ({len(counted)} in all)" if len(counted) > 8 else ""),
    )
    return dataclasses.replace(shape, counted=counted)


def _kept(
    tables: dict[str, TableSpec],
    spec: ModelSpec,
    kept: Mapping[str, Mapping[str, Any]],
    shape: DataShape,
) -> dict[str, TableSpec]:
    """Each table sniper sizes (``capacity = 0``, ``shards = 0``) at the size ``kept``
    recorded for it, where it recorded one: its shards as they were, its rows as many or,
    where the data's counted ids need more, more (a resume grows a table, never shrinks it)."""
    sized = {}
    for name, table in tables.items():
        recorded, configured = kept.get(name, {}), spec.table(name)
        changes = {}
        if configured.shards == 0 and isinstance(recorded.get("shards"), int):
            changes["shards"] = recorded["shards"]
        capacity = recorded_capacity(kept, name)
        if configured.capacity == 0 and capacity is not None:
            counted = name in (shape.counted or {})
            changes["capacity"] = max(capacity, table.capacity) if counted else capacity
        sized[name] = dataclasses.replace(table, **changes) if changes else table
    return sized


def recorded_capacity(kept: Mapping[str, Any], name: str) -> int | None:
    """The capacity a checkpoint recorded for ``name``'s table (``kept``: its ``variables``),
    if it recorded one: what a resume keeps, or grows (:func:`sniper.cluster._job.grow_tables`)."""
    capacity = kept.get(name, {}).get("capacity")
    return capacity if isinstance(capacity, int) else None


def _warn_evicting(tables: Mapping[str, TableSpec], shape: DataShape) -> None:
    """Warn of each table sized below its counted distinct signs: past its rows the least
    recently used are taken back, and their signs start again from their initial values."""
    for name, count in (shape.counted or {}).items():
        capacity = tables[name].capacity
        if count > capacity:
            log.warning(
                "variables.%s: the data holds about %s distinct ids, more than the %s rows "
                "capacity = 0 gives a table; the least recently used rows will be evicted "
                "(their ids start again from their initial values): set variables.%s.capacity "
                "to hold them all",
                name,
                f"{count:,}",
                f"{capacity:,}",
                name,
            )


def _pooled_as_features_say(
    tables: dict[str, TableSpec], model_spec: ModelSpec, spec: FeatureSpec
) -> dict[str, TableSpec]:
    """Each variable pooled as its ``[features]`` column says (``pooling``), over the built-in
    sum and over ``variables.default.pooling`` (the column names this variable: it is the more
    specific); a ``variables.NAME.pooling`` that says otherwise for the same variable is
    refused, naming both keys. A column that says nothing leaves the ``[variables]`` entry's."""
    pooled = {}
    for name, table in tables.items():
        wanted = spec.pooling_said(name)
        if not wanted:
            pooled[name] = table
            continue
        if name in model_spec.pooling_given and table.pooling != wanted:
            raise ValueError(
                f"variables.{name}.pooling is {table.pooling!r} but the [features] column of "
                f"{name} says pooling = {wanted!r}: say it in one place"
            )
        pooled[name] = dataclasses.replace(table, pooling=wanted)
    return pooled


def oracle_auc(config: TrainConfig, workload: Workload) -> float | None:
    """The AUC of the synthetic data's planted model (None for other data): what the report
    measures the trained model's lift against."""
    if config.data != "synthetic":
        return None
    from sniper.data import SyntheticCtr

    data = SyntheticCtr(
        workload,
        num_batches=config.num_batches,
        scale=config.scale,
        seed=config.seed,
        batch_size=config.batch_size,
    )
    return float(data.oracle_auc(min(config.num_batches, 100)))
