"""Pooling per variable over real loopback gRPC: weighted FeedSample, mean/sqrtn/none
lookups and pushes against the numpy reference, moves and checkpoints that keep both."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from grpclib.const import Status

from sniper.roles import PsRoleConfig
from sniper.rpc import LookupTarget, VariableConfig
from sniper.store import BAG_POOLINGS
from sniper.testing import running_ps
from tests.rpc.test_ps_service import expect
from tests.store.test_bag_pooling import batch, reference, reference_update

pytestmark = pytest.mark.anyio

DIM = 5


def config(name: str, pooling: str, shards: int = 2) -> VariableConfig:
    return VariableConfig(
        name,
        DIM,
        1024,
        optimizer="sgd",
        optimizer_params={"lr": 0.5},
        initializer=("normal", 0.0, 1.0),
        shards=shards,
        pooling=pooling,
    )


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pooling", BAG_POOLINGS)
async def test_lookup_and_push_match_numpy(pooling: str, weighted: bool) -> None:
    signs, offsets, weights = batch()
    used = weights if weighted else np.ones_like(weights)
    async with running_ps() as (_service, client):
        await client.create_variable(config("emb", pooling))
        rows = await client.pull("emb", signs)
        await client.feed_sample(
            1, {"emb": (signs, offsets)}, weights={"emb": weights} if weighted else None
        )
        answer = (await client.embedding_lookup(1, ["emb"]))["emb"]
        expected = reference(pooling, rows, offsets, used)
        np.testing.assert_allclose(answer.pooled, expected, rtol=1e-5, atol=1e-6)
        if pooling == "none":
            assert answer.offsets is not None
            np.testing.assert_array_equal(answer.offsets, offsets)
        else:
            assert answer.offsets is None
        grads = np.random.default_rng(1).normal(size=expected.shape).astype(np.float32)
        assert await client.push_grad(1, {"emb": grads}) == 0
        np.testing.assert_allclose(
            await client.pull("emb", signs),
            reference_update(pooling, signs, offsets, used, rows, grads),
            rtol=1e-5,
            atol=1e-5,
        )


async def test_an_unpooled_variable_is_answered_beside_the_lookup_target() -> None:
    signs, offsets, _ = batch()
    async with running_ps() as (_service, client):
        await client.create_variable(config("pooled", "mean"))
        await client.create_variable(config("seq", "none"))
        await client.feed_sample(2, {"pooled": (signs, offsets), "seq": (signs, offsets)})
        matrix = np.full((len(offsets) - 1, DIM + 3), 7.0, dtype=np.float32)
        answers = await client.embedding_lookup(
            2, ["pooled", "seq"], into=LookupTarget(matrix, {"pooled": 0})
        )
        np.testing.assert_array_equal(matrix[:, :DIM], answers["pooled"].pooled)
        assert (matrix[:, DIM:] == 7.0).all()  # nothing else was written
        assert answers["seq"].pooled.shape == (len(signs), DIM)
        np.testing.assert_array_equal(answers["seq"].offsets, offsets)
        with pytest.raises(Exception, match="float32 of shape \\(10, 5\\)"):
            await client.push_grad(2, {"seq": np.zeros((5, DIM), dtype=np.float32)})


async def test_bad_pooling_and_weights_are_one_line_invalid_argument() -> None:
    signs, offsets, weights = batch()
    async with running_ps() as (_service, client):
        await expect(
            Status.INVALID_ARGUMENT,
            "pooling must be one of sum, mean, sqrtn, none, got 'max'",
            client.create_variable(config("emb", "max")),
        )
        await client.create_variable(config("emb", "mean"))
        await expect(
            Status.INVALID_ARGUMENT,
            "weights must be float32 of shape (10,), one per sign, got float32 of shape (9,)",
            client.feed_sample(1, {"emb": (signs, offsets)}, weights={"emb": weights[:-1]}),
        )


async def test_a_move_keeps_pooling_and_the_weights_of_pending_batches() -> None:
    signs, offsets, weights = batch()
    async with running_ps() as (_a, source), running_ps() as (_b, target):
        await source.create_variable(config("emb", "sqrtn", shards=3))
        await source.feed_sample(4, {"emb": (signs, offsets)}, weights={"emb": weights})
        expected = (await source.embedding_lookup(4, ["emb"], release=True))["emb"].pooled
        await source.feed_sample(5, {"emb": (signs, offsets)}, weights={"emb": weights})
        moved = await source.export_variable("emb")
        assert moved.config.pooling == "sqrtn"
        assert [feed.batch_id for feed in moved.pending] == [5]
        assert moved.pending[0].weights is not None
        await target.import_variable(moved)
        got = (await target.embedding_lookup(5, ["emb"]))["emb"].pooled
        np.testing.assert_allclose(got, expected, rtol=1e-6)


async def test_a_checkpoint_keeps_pooling_and_an_old_one_restores_as_sum(
    tmp_path: Path,
) -> None:
    settings = PsRoleConfig(checkpoint_root=str(tmp_path))
    async with running_ps(config=settings) as (service, client):
        await client.create_variable(config("seq", "none"))
        await client.create_variable(config("bag", "sum"))
        await client.save("ck")
        manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
        configs = {entry["config"]["name"]: entry["config"] for entry in manifest["variables"]}
        assert configs["seq"]["pooling"] == "none"
        assert "pooling" not in configs["bag"]  # sum is written as manifests always were
    async with running_ps(config=settings) as (service, client):
        await client.restore("ck")
        assert service._configs["seq"].pooling == "none"
        assert service.engine.table("seq").bag_pooling == "none"
        assert service._configs["bag"].pooling == "sum"


def test_variable_config_round_trips_pooling_and_reads_old_dicts_as_sum() -> None:
    for pooling in BAG_POOLINGS:
        cfg = config("v", pooling)
        assert VariableConfig.from_dict(cfg.to_dict()) == cfg
    old = config("v", "sum").to_dict()
    assert "pooling" not in old
    assert VariableConfig.from_dict(old).pooling == "sum"
