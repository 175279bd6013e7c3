"""HubRole as an actor on asyncio and trio: batches fed concurrently are handed out in reading
order, the end of data is heard by every reader, and a stopped hub says so."""

from __future__ import annotations

import random
from collections.abc import Mapping

import anyio
import numpy as np
import pytest

from sniper.data import SyntheticCtr, load_workload
from sniper.roles import BatchId, HubConfig, HubRole, PsCluster, PsEngine, PsRole, Unavailable
from sniper.rpc import Signs, variable_request
from sniper.scheduler import open_scheduler

pytestmark = pytest.mark.anyio


class SlowFeeds(PsRole):
    """A real ps whose FeedSample takes a random 0-20 ms, so feeds finish out of order."""

    async def feed_sample(self, batch_id: int, variables: Mapping[str, Signs]) -> None:
        await anyio.sleep(random.random() * 0.02)
        await super().feed_sample(batch_id, variables)


async def created(role: PsRole, reader: SyntheticCtr) -> PsRole:
    """``role`` with a small table for every variable of ``reader``."""
    for name in reader.variables:
        await role.create_variable(variable_request(name, 4, 10_000))
    return role


async def test_batches_are_handed_out_in_reading_order_and_the_end_reaches_all() -> None:
    workload = load_workload("seed_ctr")
    reader = SyntheticCtr(workload, num_batches=30, scale=0.01, seed=1, batch_size=64)
    async with open_scheduler("thread_pool", workers=2) as scheduler:
        ps = await created(SlowFeeds(PsEngine(scheduler)), reader)
        hub = HubRole(reader, PsCluster([ps]), HubConfig(epochs=2, max_in_flight=8))
        read: list[BatchId] = []
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            while (sample := await hub.read_sample()) is not None:
                read.append(BatchId.unpack(sample.batch_id))
                assert sample.labels.shape == (64,)
        assert read == [BatchId(0, epoch, index) for epoch in (0, 1) for index in range(30)]
        assert await hub.read_sample() is None  # every later reader hears the end too
        assert hub.healthy and hub.batches_fed == 60
        # Fed, never pushed: every (batch, variable) pair is still held, nothing lost.
        assert ps.engine.pending_batches() == 60 * len(reader.variables)
        hub.close()


async def test_a_cancelled_hub_tells_its_readers_it_shut_down() -> None:
    workload = load_workload("seed_ctr")
    reader = SyntheticCtr(workload, num_batches=1000, scale=0.01, seed=1, batch_size=64)
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = await created(PsRole(PsEngine(scheduler)), reader)
        hub = HubRole(reader, PsCluster([ps]), HubConfig(queue_size=2))
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            assert await hub.read_sample() is not None
            await anyio.sleep(0.2)  # the queue fills; the producer waits
            group.cancel_scope.cancel()
        assert not hub.healthy
        for _ in range(2):  # the batches fed before the stop are still handed out
            assert await hub.read_sample() is not None
        with pytest.raises(Unavailable, match=r"^hub 0 is shutting down$"):
            await hub.read_sample()
        hub.close()


def test_batch_ids_pack_and_unpack() -> None:
    for place in (BatchId(0, 0, 0), BatchId(3, 70_000, 2**32 - 1), BatchId(65_535, 1, 5)):
        back = BatchId.unpack(place.pack())
        assert back == BatchId(place.hub, place.epoch % 2**16, place.index)
    with pytest.raises(ValueError, match=r"a batch index must be in \[0, 2\*\*32\), got -1"):
        BatchId(0, 0, -1).pack()
    assert np.uint64(BatchId(1, 2, 3).pack()) == np.uint64(1 << 48 | 2 << 32 | 3)


class FailsFromBatch(PsRole):
    """A real ps whose FeedSample of batch ``first_bad`` and later fails, after a delay for
    the batch before it, so the earlier batch is still being fed when the later one fails."""

    first_bad = 3

    async def feed_sample(self, batch_id: int, variables: Mapping[str, Signs]) -> None:
        index = BatchId.unpack(batch_id).index
        if index == self.first_bad - 1:
            await anyio.sleep(0.2)
        if index >= self.first_bad:
            raise ValueError(f"cannot take batch {index}")
        await super().feed_sample(batch_id, variables)


async def test_batches_read_before_a_failed_feed_are_still_handed_out() -> None:
    workload = load_workload("seed_ctr")
    reader = SyntheticCtr(workload, num_batches=20, scale=0.01, seed=1, batch_size=32)
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = await created(FailsFromBatch(PsEngine(scheduler)), reader)
        hub = HubRole(reader, PsCluster([ps]), HubConfig(max_in_flight=8))
        await hub.run()
        read = []
        with pytest.raises(Unavailable, match="hub 0 could not feed the ps: ValueError"):
            while (sample := await hub.read_sample()) is not None:
                read.append(BatchId.unpack(sample.batch_id).index)
        assert read == [0, 1, 2]
        hub.close()
