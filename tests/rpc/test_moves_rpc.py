"""ExportVariable, ImportVariable, DropVariable and SetPlacement over real loopback gRPC, and
the ps keys ``lock`` and ``pooling``: what a move carries, and bad input refused with nothing
changed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper.data import SyntheticCtr, load_workload
from sniper.placement import Placement
from sniper.roles import HubConfig, HubRole, PsCluster, PsRoleConfig
from sniper.rpc import PendingFeed
from sniper.store import LOCK_MODES
from sniper.testing import running_ps
from sniper.transport import GrpcTransport
from tests.rpc.test_ps_service import GRADS, OFFSETS, SIGNS, create, expect

pytestmark = pytest.mark.anyio


async def test_a_variable_moves_with_its_rows_state_and_fed_batches() -> None:
    async with running_ps() as (_, source), running_ps() as (target_role, target):
        await create(source)
        await source.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        await source.embedding_lookup(1, ["emb"])
        await source.push_grad(1, {"emb": GRADS})
        await source.feed_sample(2, {"emb": (SIGNS[::-1].copy(), OFFSETS)})  # not yet pushed
        expected = await source.embedding_lookup(2, ["emb"])

        moved = await source.export_variable("emb")
        assert len(moved.signs) == 5 and moved.state.shape == (5, 1, 4)
        assert [feed.batch_id for feed in moved.pending] == [2]
        await create(target)  # empty, as auto_shard makes it before the hubs switch
        assert await target.import_variable(moved) == 5
        assert await source.drop_variable("emb") is True
        assert await source.drop_variable("emb") is False  # a retried drop

        answer = await target.embedding_lookup(2, ["emb"])
        assert np.array_equal(answer["emb"].pooled, expected["emb"].pooled)
        again = await target.export_variable("emb")
        for field in ("signs", "weights", "state", "steps"):
            assert np.array_equal(getattr(again, field), getattr(moved, field)), field
        assert target_role.engine.kernel_seconds["emb"] > 0
        await expect(
            Status.NOT_FOUND, "unknown variable 'emb'", source.embedding_lookup(2, ["emb"])
        )


async def test_a_bad_import_is_refused_and_changes_nothing() -> None:
    async with running_ps() as (_, source), running_ps() as (_, target):
        await create(source)
        await source.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        await source.embedding_lookup(1, ["emb"])
        moved = await source.export_variable("emb")
        await create(target)
        await target.feed_sample(7, {"emb": (SIGNS, OFFSETS)})
        before = await target.export_variable("emb")

        short = dataclasses.replace(moved, weights=moved.weights[:2])
        with pytest.raises(GRPCError) as info:
            await target.import_variable(short)
        assert info.value.status == Status.INVALID_ARGUMENT
        bad_batch = dataclasses.replace(
            moved, pending=(PendingFeed(3, SIGNS, np.array([0, 9, 3, 6], dtype=np.int64)),)
        )
        with pytest.raises(GRPCError) as info:
            await target.import_variable(bad_batch)
        assert info.value.status == Status.INVALID_ARGUMENT
        other = dataclasses.replace(moved.config, dim=8)
        with pytest.raises(GRPCError) as info:
            await target.import_variable(dataclasses.replace(moved, config=other))
        assert "another configuration than in the move" in str(info.value.message)

        after = await target.export_variable("emb")
        assert np.array_equal(after.signs, before.signs)  # the rows batch 7's feed mapped
        assert np.array_equal(after.weights, before.weights)
        assert [feed.batch_id for feed in after.pending] == [7]
        await expect(Status.NOT_FOUND, "unknown variable 'nope'", target.export_variable("nope"))


async def test_set_placement_switches_a_hubs_feeds(tmp_path: Path) -> None:
    reader = SyntheticCtr(load_workload("seed_ctr"), num_batches=2, scale=0.001)
    async with running_ps() as (_, ps0), running_ps() as (_, ps1):
        hub = HubRole(reader, PsCluster([ps0, ps1]), HubConfig())
        transport = GrpcTransport()
        async with transport.serve(hub, "127.0.0.1:0") as address:
            client = transport.hub_client(address)
            try:
                moved = Placement(2).moved("embedding_11", 1).moved("embedding_0", 0)
                assert await client.set_placement(moved) == 2
                assert hub.cluster.placement == moved
                assert await client.set_placement(Placement(2)) == 2  # older: nothing changes
                with pytest.raises(GRPCError) as info:
                    await client.set_placement(Placement(3, {}, 5))
                assert info.value.status == Status.INVALID_ARGUMENT
                assert "placement is for 3 ps, the cluster has 2" in str(info.value.message)
                assert hub.cluster.placement == moved
            finally:
                client.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("lock", LOCK_MODES)
async def test_every_lock_mode_and_both_poolings_answer_the_same(lock: str) -> None:
    answers = []
    for pooling in ("fused", "separate"):
        config = PsRoleConfig(lock=lock, pooling=pooling)  # type: ignore[arg-type]
        async with running_ps(config=config) as (role, client):
            await create(client)
            await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
            answers.append((await client.embedding_lookup(1, ["emb"]))["emb"].pooled)
            table = role.engine.table("emb")
            assert (table.lock_mode, table.pooling) == (lock, pooling)
    assert np.array_equal(answers[0], answers[1])


def test_lock_and_pooling_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="lock must be one of global, table, shard, none"):
        PsRoleConfig(lock="row")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pooling must be one of fused, separate"):
        PsRoleConfig(pooling="later")  # type: ignore[arg-type]
