"""The loop-owning form (:class:`sniper.torch.TrainCtx`): a user's own loop over the same
model gives the same loss per batch as the trainer, for the same batches, with ``prefetch =
1`` and ``max_staleness = 0`` (each lookup sees every earlier push in both), with a sequence
variable (pooling ``none``) as well: its values are handed out as a jagged pair and their
per-value gradients pushed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.nn import functional

from sniper.cluster import ModelSpec, TrainConfig, plan_training, probe_data
from sniper.data import FeatureSpec, load_workload
from sniper.models import TrainStep
from sniper.testing import local_cluster
from sniper.torch import TorchModel, TrainCtx
from tests.data._tables import readme_table, write_parquet_table

JOB: dict[str, Any] = {
    "workload": "criteo",
    "scale": 0.01,
    "num_batches": 25,
    "batch_size": 256,
    "progress": False,
    "blas_threads": 1,
    "prefetch": 1,
    "max_staleness": 0,
    "eval_every": 0,
}
MODEL = {"factory": "torch_mlp", "params": {"hidden": [16]}, "optimizer": "adam", "lr": 0.003}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SEQUENCE = {"default": {"dim": 8}, "C3": {"dim": 8, "pooling": "none"}}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "variables", [{"default": {"dim": 8}}, SEQUENCE], ids=["pooled", "sequence"]
)
async def test_the_loop_owning_form_gives_the_trainer_s_losses(
    variables: dict[str, Any],
) -> None:
    config = TrainConfig(**JOB, variables=variables, model=MODEL)
    plan = plan_training(config, load_workload(config.workload))

    through_trainer = plan.model()
    assert isinstance(through_trainer, TorchModel)
    trainer_losses: list[float] = []
    train_step = through_trainer.train_step

    def recorded(inputs: Any, labels: Any, **sequences: Any) -> TrainStep:
        step = train_step(inputs, labels, **sequences)
        trainer_losses.append(step.loss)
        return step

    through_trainer.train_step = recorded  # type: ignore[method-assign]
    tables, dense = plan.tables, plan.data.dense_features
    async with local_cluster(config.open(), tables, dense, seed=config.seed) as cluster:
        report = await cluster.train(config.trainer(), model=through_trainer)
    assert report.steps == 25 == len(trainer_losses)

    own = plan.model()  # the same module and optimizer, built afresh for the same seed
    assert isinstance(own, TorchModel)
    module, optimizer = own.module, own.optimizer
    order = [*own.inputs.dims, *own.inputs.sequences]  # the trainer's input order
    losses = []
    async with local_cluster(config.open(), tables, dense, seed=config.seed) as cluster:
        hubs = [hub for _, hub in cluster.hub_clients]
        async with TrainCtx(cluster.cluster, hubs, order) as ctx:
            async for batch in ctx:
                assert all(
                    isinstance(batch.embeddings[n], tuple) == (n in own.inputs.sequences)
                    for n in order
                )
                logits = module(batch.embeddings, batch.dense)
                loss = functional.binary_cross_entropy_with_logits(logits, batch.labels)
                optimizer.zero_grad()
                await ctx.backward(loss)
                optimizer.step()
                losses.append(float(loss.detach()))
        assert ctx.steps == 25
    np.testing.assert_allclose(losses, trainer_losses, rtol=0, atol=1e-5)
    assert losses[-1] < losses[0]


@pytest.mark.anyio
async def test_a_batch_must_be_backwarded_before_the_next() -> None:
    config = TrainConfig(**JOB, variables={"default": {"dim": 8}})
    plan = plan_training(config, load_workload(config.workload))
    async with local_cluster(config.open(), plan.tables, plan.data.dense_features) as cluster:
        ctx = TrainCtx(cluster.cluster, [hub for _, hub in cluster.hub_clients], list(plan.tables))
        with pytest.raises(RuntimeError, match="call next_batch"):
            await ctx.backward(torch.zeros(()))
        batch = await ctx.next_batch()
        assert batch is not None
        pooled = [t for t in batch.embeddings.values() if isinstance(t, torch.Tensor)]
        assert len(pooled) == len(plan.tables)  # no sequence here: each a [batch, dim] leaf
        assert all(t.is_leaf and t.requires_grad for t in pooled)
        assert batch.labels.shape == (256, 1) and batch.dense.shape[0] == 256
        with pytest.raises(RuntimeError, match="not backwarded"):
            await ctx.next_batch()
        with pytest.raises(ValueError, match="does not depend on the embeddings"):
            await ctx.backward(pooled[0].sum())


@pytest.mark.anyio
async def test_the_loop_owning_form_trains_on_a_table_of_one_s_own(tmp_path: Path) -> None:
    """A user's Parquet table (string ids, a list column, a float): ``probe_data`` with its
    ``[features]`` as a dict and no workload (a synthetic generator's), then the README's
    loop; every row is read once. Synthetic data without a workload is one clear error."""
    path = write_parquet_table(tmp_path / "events.parquet", readme_table(1_000, 0), 256)
    features = FeatureSpec.from_table(
        {"label": "click", "sparse": ["user_id", "item_id", "genres"], "dense": ["price"]}
    )
    shape, reader = probe_data(f"parquet:{path}", batch_size=128, features=features)
    tables = ModelSpec.parse({}, default_dim=4).resolve(shape)
    assert sorted(tables) == ["genres", "item_id", "user_id"]
    model = torch.nn.Linear(4 * len(tables) + shape.dense_features, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    examples = 0
    async with local_cluster(reader, tables, shape.dense_features) as job:
        hubs = [hub for _, hub in job.hub_clients]
        async with TrainCtx(job.cluster, hubs, list(tables)) as ctx:
            async for batch in ctx:
                pooled = [t for t in batch.embeddings.values() if isinstance(t, torch.Tensor)]
                logits = model(torch.cat([*pooled, batch.dense], dim=1))
                loss = functional.binary_cross_entropy_with_logits(logits, batch.labels)
                optimizer.zero_grad()
                await ctx.backward(loss)
                optimizer.step()
                examples += len(batch.labels)
    assert examples == 1_000
    with pytest.raises(ValueError, match=r"synthetic data needs a workload"):
        probe_data("synthetic", batch_size=128)
