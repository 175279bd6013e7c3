"""A sequence variable (pooling "none") end to end: the ps answers its unpooled rows with
their offsets, a torch model attends over them as a jagged pair, and the per-value gradients
it pushes train the variable's rows. The numpy MLP refuses such a variable before training."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from sniper.cluster import TrainConfig, create_variables, plan_training
from sniper.data import load_workload
from sniper.models import ModelInputs
from sniper.roles import PsCluster
from sniper.testing import local_cluster, running_ps
from sniper.torch import TorchModel

SEQUENCE = "C3"
JOB: dict[str, Any] = {
    "workload": "criteo",
    "scale": 0.01,
    "num_batches": 12,
    "batch_size": 128,
    "progress": False,
    "blas_threads": 1,
}
SEEN: list[tuple[tuple[int, ...], int, int]] = []
"""(values shape, offsets length, batch) of every sequence the model was given."""


class Attention(nn.Module):
    """Pooled embeddings, a learned-query attention over the sequence, the dense features."""

    def __init__(self, inputs: ModelInputs) -> None:
        super().__init__()
        self.inputs = inputs
        self.query = nn.Parameter(torch.ones(inputs.sequences[SEQUENCE]))
        width = inputs.embedding_width + inputs.sequences[SEQUENCE] + inputs.dense_features
        self.out = nn.Linear(width, 1)

    def forward(self, embeddings: dict[str, Any], dense: torch.Tensor) -> torch.Tensor:
        values, offsets = embeddings[SEQUENCE]
        batch = dense.shape[0]
        SEEN.append((tuple(values.shape), int(offsets.shape[0]), batch))
        example = torch.repeat_interleave(torch.arange(batch), offsets.diff())
        scores = torch.exp(values @ self.query)
        total = torch.zeros(batch).index_add(0, example, scores)
        attention = scores / total[example]
        attended = torch.zeros(batch, values.shape[1]).index_add(
            0, example, values * attention[:, None]
        )
        pooled = [embeddings[name] for name in self.inputs.dims]
        return self.out(torch.cat([*pooled, attended, dense], dim=1))  # type: ignore[no-any-return]


def build(inputs: ModelInputs) -> nn.Module:
    return Attention(inputs)


def config(factory: str, dim: int = 6) -> TrainConfig:
    return TrainConfig(
        **JOB,
        variables={"default": {"dim": 4}, SEQUENCE: {"dim": dim, "pooling": "none"}},
        model={"factory": factory, "lr": 0.01},
    )


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("transport", ["inprocess", "grpc"])
async def test_a_torch_model_trains_on_an_unpooled_sequence(transport: str) -> None:
    job = config("tests.torch.test_sequences:build")
    plan = plan_training(job, load_workload(job.workload))
    assert plan.model_inputs.sequences == {SEQUENCE: 6}
    assert SEQUENCE not in plan.model_inputs.dims
    model = plan.model()
    assert isinstance(model, TorchModel)
    SEEN.clear()
    async with local_cluster(
        job.open(), plan.tables, plan.data.dense_features, num_ps=2, transport=transport
    ) as cluster:
        report = await cluster.train(job.trainer(), model=model)
        signs, trained = await _rows(cluster.cluster)
    assert report.steps > 0 and report.train_logloss is not None
    batches = [seen for seen in SEEN if seen[2] > 2]  # past the module's shape check
    assert batches and all(n > 0 and length == batch + 1 for (n, _), length, batch in batches)
    async with running_ps() as (_, fresh):  # the same variable, untrained: initial rows
        await create_variables(PsCluster([fresh]), {SEQUENCE: plan.tables[SEQUENCE]}, 0)
        initial = await fresh.pull(SEQUENCE, signs)
    assert not np.allclose(trained, initial)  # the per-value pushes trained its rows


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_zoo_model_trains_on_a_sequence_through_the_trainer() -> None:
    """DLRM's dot interaction takes the sequence's mean as one more field of the same dim."""
    job = config("dlrm", dim=4)
    plan = plan_training(job, load_workload(job.workload))
    async with local_cluster(job.open(), plan.tables, plan.data.dense_features) as cluster:
        report = await cluster.train(job.trainer(), model=plan.model())
        signs, trained = await _rows(cluster.cluster)
    assert report.steps > 0 and report.train_logloss is not None
    async with running_ps() as (_, fresh):
        await create_variables(PsCluster([fresh]), {SEQUENCE: plan.tables[SEQUENCE]}, 0)
        initial = await fresh.pull(SEQUENCE, signs)
    assert not np.allclose(trained, initial)


async def _rows(cluster: PsCluster) -> tuple[np.ndarray, np.ndarray]:
    """Signs the sequence variable holds now, and their rows."""
    for member in cluster.members:
        if SEQUENCE in {v.name for v in (await member.stats()).variables}:
            moved = await member.export_variable(SEQUENCE)
            return moved.signs, moved.weights
    raise AssertionError(f"no ps holds {SEQUENCE}")


def test_the_numpy_mlp_refuses_a_sequence_before_training() -> None:
    job = config("mlp")
    with pytest.raises(ValueError, match=f"variable '{SEQUENCE}' has pooling 'none'"):
        plan_training(job, load_workload(job.workload))
