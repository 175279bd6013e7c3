"""HubRole as an actor on asyncio and trio: batches fed concurrently are handed out in reading
order, the end of data is heard by every reader, and a stopped hub says so."""

from __future__ import annotations

import random
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from sniper.data import ParquetReader, SyntheticCtr, load_workload, write_parquet
from sniper.hashing import ps_for_variable
from sniper.placement import Placement
from sniper.roles import (
    BatchId,
    HubConfig,
    HubRole,
    PsCluster,
    PsEngine,
    PsRole,
    Unavailable,
    _handout,
)
from sniper.rpc import Sample, Signs, Weights
from sniper.scheduler import open_scheduler
from sniper.transport import InProcessTransport
from tests.roles._roles import created, hand_clock

pytestmark = pytest.mark.anyio


class SlowFeeds(PsRole):
    """A real ps whose FeedSample takes a random 0-20 ms, so feeds finish out of order."""

    async def feed_sample(
        self, batch_id: int, variables: Mapping[str, Signs], *, weights: Weights | None = None
    ) -> None:
        await anyio.sleep(random.random() * 0.02)
        await super().feed_sample(batch_id, variables, weights=weights)


async def read(hub: HubRole) -> Sample | None:
    """ReadSample and AckSample, as a reader that got its batch does."""
    sample = await hub.read_sample()
    if sample is not None:
        assert await hub.acknowledge([sample.batch_id]) == 1
    return sample


# A hub of its own process reads on a worker thread; the one-process job's hubs read on the loop.
on_loop = pytest.mark.parametrize("read_on_loop", [False, True], ids=["thread", "loop"])


@on_loop
async def test_batches_are_handed_out_in_reading_order_and_the_end_reaches_all(
    read_on_loop: bool,
) -> None:
    workload = load_workload("seed_ctr")
    reader = SyntheticCtr(workload, num_batches=30, scale=0.01, seed=1, batch_size=64)
    async with open_scheduler("thread_pool", workers=2) as scheduler:
        ps = await created(SlowFeeds(PsEngine(scheduler)), reader)
        config = HubConfig(epochs=2, max_in_flight=8, read_on_loop=read_on_loop)
        hub = HubRole(reader, PsCluster([ps]), config)
        got: list[BatchId] = []
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            while (sample := await read(hub)) is not None:
                got.append(BatchId.unpack(sample.batch_id))
                assert sample.labels.shape == (64,)
        assert got == [BatchId(0, epoch, index) for epoch in (0, 1) for index in range(30)]
        assert await read(hub) is None  # every later reader hears the end too
        assert hub.healthy and hub.batches_fed == 60
        # Fed, never pushed: every (batch, variable) pair is still held, nothing lost.
        assert ps.engine.pending_batches() == 60 * len(reader.variables)
        hub.close()


async def test_drop_last_drops_each_epochs_short_last_batch(tmp_path: Path) -> None:
    """A model with BatchNorm cannot train on a last batch of one example: ``drop_last``
    drops it in every epoch, and keeps every full batch's number."""
    data = SyntheticCtr(load_workload("seed_ctr"), num_batches=3, scale=0.01, seed=1)
    write_parquet(data, tmp_path / "d.parquet")
    full = data.batch_size + 1
    reader = ParquetReader(tmp_path / "d.parquet", batch_size=full)  # 3 batches less 2 rows
    short = 3 * data.batch_size - 2 * full
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = await created(PsRole(PsEngine(scheduler)), data)
        for drop_last, sizes in ((False, [full, full, short]), (True, [full, full])):
            hub = HubRole(reader, PsCluster([ps]), HubConfig(epochs=2, drop_last=drop_last))
            got = []
            async with anyio.create_task_group() as group:
                group.start_soon(hub.run)
                while (sample := await read(hub)) is not None:
                    got.append((BatchId.unpack(sample.batch_id).index, len(sample.labels)))
            assert got == list(enumerate(sizes)) * 2
            hub.close()


@asynccontextmanager
async def cancelled_hub(
    reader: Any, data: SyntheticCtr, read_on_loop: bool, queued: int = 0
) -> AsyncIterator[HubRole]:
    """A hub over ``reader`` that handed out one batch and, once ``queued`` more waited in its
    queue, was cancelled; its ps still serves."""
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = await created(PsRole(PsEngine(scheduler)), data)
        hub = HubRole(reader, PsCluster([ps]), HubConfig(queue_size=2, read_on_loop=read_on_loop))
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            assert await read(hub) is not None
            with anyio.fail_after(60):
                while hub.handout.waiting < queued:
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()
        yield hub
        hub.close()


@on_loop
async def test_a_cancelled_hub_tells_its_readers_it_shut_down(read_on_loop: bool) -> None:
    workload = load_workload("seed_ctr")
    reader = SyntheticCtr(workload, num_batches=1000, scale=0.01, seed=1, batch_size=64)
    async with cancelled_hub(reader, reader, read_on_loop, queued=2) as hub:  # queue filled
        assert not hub.healthy
        for _ in range(2):  # the batches fed before the stop are still handed out
            assert await read(hub) is not None
        with pytest.raises(Unavailable, match=r"^hub 0 is shutting down$"):
            await read(hub)


@on_loop
async def test_a_cancelled_hub_ends_its_readers_decoding_thread(
    read_on_loop: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub closes its stream as it stops: a Parquet reader's thread, decoding the next
    batch ahead, ends then rather than whenever the stream is collected."""
    monkeypatch.setattr("sniper.data._parquet.WINDOW_BYTES", 1)  # a window a batch
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=40, scale=0.01, seed=1, batch_size=64)
    write_parquet(data, tmp_path / "d")
    before = set(threading.enumerate())
    async with cancelled_hub(ParquetReader(tmp_path / "d"), data, read_on_loop):
        decoding = [t for t in threading.enumerate() if t.name.startswith("sniper-parquet")]
        assert not set(decoding) - before


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

    async def feed_sample(
        self, batch_id: int, variables: Mapping[str, Signs], *, weights: Weights | None = None
    ) -> None:
        index = BatchId.unpack(batch_id).index
        if index == self.first_bad - 1:
            await anyio.sleep(0.2)
        if index >= self.first_bad:
            raise ValueError(f"cannot take batch {index}")
        await super().feed_sample(batch_id, variables)


@asynccontextmanager
async def fed_hub(
    batches: int, config: HubConfig, ps_class: type[PsRole] = PsRole
) -> AsyncIterator[HubRole]:
    """A hub over one ps (of ``ps_class``) that has fed its ``batches`` (or failed)."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=batches, scale=0.01, seed=1, batch_size=32
    )
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = await created(ps_class(PsEngine(scheduler)), reader)
        hub = HubRole(reader, PsCluster([ps]), config)
        await hub.run()
        yield hub


async def test_batches_read_before_a_failed_feed_are_still_handed_out() -> None:
    async with fed_hub(20, HubConfig(max_in_flight=8), FailsFromBatch) as hub:
        got = []
        with pytest.raises(Unavailable, match="hub 0 could not feed the ps: ValueError"):
            while (sample := await read(hub)) is not None:
                got.append(BatchId.unpack(sample.batch_id).index)
        assert got == [0, 1, 2]
        hub.close()


async def test_a_batch_not_acknowledged_is_handed_out_again_first_and_the_end_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = hand_clock(monkeypatch, _handout)
    async with fed_hub(4, HubConfig(read_lease_seconds=0.3)) as hub:
        lost = await hub.read_sample()  # its reader gives up: never acknowledged
        assert lost is not None and BatchId.unpack(lost.batch_id).index == 0
        indices = [
            BatchId.unpack(s.batch_id).index
            for s in [await read(hub) for _ in range(3)]
            if s is not None
        ]
        assert indices == [1, 2, 3]
        with anyio.move_on_after(0.2):  # not "end of data" while batch 0 may still be lost
            await read(hub)
            pytest.fail("a read ended before batch 0's lease expired")
        clock.now += 0.3
        with anyio.fail_after(30):
            again = await read(hub)
        assert again is not None and again.batch_id == lost.batch_id
        np.testing.assert_array_equal(again.labels, lost.labels)
        assert hub.handout.redelivered == 1
        assert await read(hub) is None
        # Settling is idempotent: a repeated or unknown id is not an error, and counts 0.
        assert await hub.acknowledge([lost.batch_id, 12345]) == 0


async def test_an_acknowledgement_cannot_settle_a_batch_nobody_was_given() -> None:
    async with fed_hub(3, HubConfig()) as hub:
        queued = [BatchId(0, 0, index).pack() for index in range(3)]
        assert await hub.acknowledge(queued) == 0
        got = [s.batch_id for s in [await read(hub) for _ in range(3)] if s is not None]
        assert got == queued and await read(hub) is None


async def test_a_late_acknowledgement_settles_a_batch_queued_again() -> None:
    async with fed_hub(2, HubConfig(read_lease_seconds=0.05)) as hub:
        first = await hub.read_sample()
        assert first is not None
        await anyio.sleep(0.1)  # the lease expires ...
        second = await read(hub)  # ... so batch 0 is queued again, ahead of batch 1
        assert second is not None and second.batch_id == first.batch_id
        third = await hub.read_sample()
        assert third is not None and BatchId.unpack(third.batch_id).index == 1
        await anyio.sleep(0.1)  # batch 1 expires and is queued again; then its ack arrives
        assert await hub.acknowledge([third.batch_id]) == 1
        assert await read(hub) is None


async def test_a_feed_answered_not_found_is_tried_again_as_soon_as_the_placement_comes() -> None:
    """A hub feeds by hashing until the job's placement reaches it: a variable placed away
    from its hashed ps is answered NOT_FOUND there, and the hub tries again when the placement
    comes, not a pause later (in a job, each such pause is inside the trainer's clock)."""
    reader = SyntheticCtr(load_workload("seed_ctr"), num_batches=3, scale=0.01, seed=1)
    away = {name: 1 for name in reader.variables if ps_for_variable(name, 2) == 0}
    placement = Placement(2, away, 1)  # every variable on ps 1
    transport = InProcessTransport()
    async with open_scheduler("inline", workers=1) as scheduler, AsyncExitStack() as stack:
        roles = [PsRole(PsEngine(scheduler)), await created(PsRole(PsEngine(scheduler)), reader)]
        members = [
            transport.ps_client(await stack.enter_async_context(transport.serve(role, "")))
            for role in roles
        ]
        hub = HubRole(reader, PsCluster(members), HubConfig())
        hub.retry_pause = 3600.0  # a hub that waited out its pause would wait an hour
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            with anyio.fail_after(30):
                while "FeedSample" not in roles[0].histograms:  # answered NOT_FOUND
                    await anyio.sleep(0.01)
                assert await hub.set_placement(placement) == 1
                got = [await read(hub) for _ in range(4)]
        assert [BatchId.unpack(s.batch_id).index for s in got if s] == [0, 1, 2] and not got[3]
        assert roles[1].engine.pending_batches() == 3 * len(reader.variables)
        # Each batch tried there at most once, by hashing (several may have been in flight).
        assert 1 <= roles[0].histograms["FeedSample"].count <= 3
        hub.close()


def test_a_hub_config_carries_the_placement_it_starts_with() -> None:
    config = HubConfig(placement_owners={"a": 1}, placement_version=3)
    assert config.start_placement(2) == Placement(2, {"a": 1}, 3)
    assert HubConfig().start_placement(4) == Placement(4)
    with pytest.raises(ValueError, match="placement_owners needs a placement_version of at least"):
        HubConfig(placement_owners={"a": 1})
    with pytest.raises(ValueError, match="placement_version must be at least 0, got -1"):
        HubConfig(placement_version=-1)
    beyond = HubConfig(placement_owners={"a": 2}, placement_version=1)
    with pytest.raises(ValueError, match="placement puts variable 'a' on ps 2, but there are 2"):
        beyond.start_placement(2)
