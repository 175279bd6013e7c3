"""What a job will build, resolved from its config and its data before any process starts.

:func:`plan_training` reads the data's shape (variables, dense features, the first batch),
resolves the ``[variables]`` model spec against it and builds the dense model of ``[model]``
for it, so that a config that does not fit the data (or names a model that does not open)
fails before any process starts, with the key named.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from sniper.cluster._config import TrainConfig
from sniper.cluster._data import check_same_schema, probe_data, resolved_features
from sniper.cluster._spec import DataShape, TableSpec, model_inputs
from sniper.data import FeatureSpec, Reader, Workload
from sniper.models import DenseModel, ModelConfig, ModelInputs
from sniper.rpc import Placement

__all__ = ["TrainPlan", "oracle_auc", "plan_training"]


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


def plan_training(config: TrainConfig, workload: Workload) -> TrainPlan:
    """Read the data's shape and resolve the model spec against it; errors name the key."""
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
    tables = config.model_spec(workload.embedding_dim).resolve(shape)
    spec = getattr(reader, "features", None)
    if isinstance(spec, FeatureSpec):
        tables = _pooled_as_features_say(tables, spec)
    eval_reader = None
    if config.eval_data:
        # Held-out data is read as training reads: the same columns, the training statistics.
        eval_shape, eval_reader = probe(config.eval_data, features=spec)
        check_same_schema(eval_shape, shape)
    model_config = config.model_config()
    inputs = model_inputs(tables, shape.dense_features, shape.labels, shape.regression)
    model = model_config.open(inputs, seed=config.seed, threads=config.blas_threads)
    return TrainPlan(
        shape,
        tables,
        eval_reader,
        model_config,
        inputs,
        [model],
        config.seed,
        config.blas_threads,
        features,
    )


def _pooled_as_features_say(
    tables: dict[str, TableSpec], spec: FeatureSpec
) -> dict[str, TableSpec]:
    """Each variable pooled as its ``[features]`` column says (``pooling``), where the model
    spec (``[variables]``) leaves it at the default; a model spec that says otherwise for the
    same variable is refused, naming both keys."""
    pooled = {}
    for name, table in tables.items():
        wanted = spec.pooling_of(name)
        if table.pooling not in ("sum", wanted) and wanted != "sum":
            raise ValueError(
                f"variables.{name}.pooling is {table.pooling!r} but the [features] column of "
                f"{name} says pooling = {wanted!r}: say it in one place"
            )
        pooled[name] = dataclasses.replace(table, pooling=wanted) if wanted != "sum" else table
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
