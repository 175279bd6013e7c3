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

from sniper.cluster._config import TrainConfig
from sniper.cluster._data import check_same_schema, probe_data
from sniper.cluster._spec import DataShape, TableSpec
from sniper.data import Reader, Workload
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
    """What the dense model is built for: the tables' widths, the data's dense features."""
    _models: list[DenseModel] = dataclasses.field(repr=False, compare=False)
    """The model built while planning (to refuse a bad ``[model]`` before any process
    starts), until an attempt takes it."""
    model_seed: int = 0
    model_threads: int = 0

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
    shape, _ = probe(config.data)
    tables = config.model_spec(workload.embedding_dim).resolve(shape)
    eval_reader = None
    if config.eval_data:
        eval_shape, eval_reader = probe(config.eval_data)
        check_same_schema(eval_shape, shape)
    model_config = config.model_config()
    inputs = ModelInputs({name: table.dim for name, table in tables.items()}, shape.dense_features)
    model = model_config.open(inputs, seed=config.seed, threads=config.blas_threads)
    return TrainPlan(
        shape, tables, eval_reader, model_config, inputs, [model], config.seed, config.blas_threads
    )


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
