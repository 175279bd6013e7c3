"""PsEngine on every scheduler backend: same numbers as the table, clear errors, no leaks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from sniper.roles import (
    AlreadyPushedError,
    PsEngine,
    ReopenedBatchError,
    UnknownBatchError,
    UnknownVariableError,
    _engine,
)
from sniper.rpc import LookupTarget
from sniper.scheduler import SCHEDULER_NAMES, KeyLike, TaskHandle, TaskKey, open_scheduler
from sniper.scheduler._adaptive import AdaptiveScheduler
from sniper.store import SGD, Adagrad, CapacityError, EmbeddingTable, zeros
from tests.roles._roles import Clock, hand_clock

DIM = 4
SIGNS = np.array([1, 2, 3, 2, 9, 1, 5], dtype=np.uint64)
OFFSETS = np.array([0, 3, 3, 7])
GRADS = np.arange(3 * DIM, dtype=np.float32).reshape(3, DIM) / 10


def table(shards: int) -> EmbeddingTable:
    return EmbeddingTable(DIM, capacity=64, optimizer=Adagrad(0.1), num_shards=shards)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return hand_clock(monkeypatch, _engine)


@pytest.fixture(params=SCHEDULER_NAMES)
def engine(request: pytest.FixtureRequest) -> Iterator[PsEngine]:
    with open_scheduler(request.param, workers=2) as scheduler:
        engine = PsEngine(scheduler)
        engine.create_variable("a", table(3))
        engine.create_variable("b", table(1))
        yield engine


def test_lookup_and_push_match_the_table(engine: PsEngine) -> None:
    reference = table(1)
    engine.feed(7, "a", SIGNS, OFFSETS)
    result = engine.lookup(7, ["a"])["a"]
    np.testing.assert_allclose(result.pooled, reference.lookup_pool(SIGNS, OFFSETS), rtol=1e-6)
    assert result.kernel_seconds > 0
    engine.push_grad(7, {"a": GRADS})
    reference.push_grad(SIGNS, OFFSETS, GRADS)
    np.testing.assert_allclose(engine.table("a").get(SIGNS), reference.get(SIGNS), rtol=1e-6)
    assert engine.pending_batches() == 0


@pytest.mark.anyio
async def test_async_lookup_and_push(engine: PsEngine) -> None:
    for name in ("a", "b"):
        engine.feed(1, name, SIGNS, OFFSETS)
    results = await engine.lookup_async(1, ["a", "b"])
    np.testing.assert_allclose(results["a"].pooled, results["b"].pooled, rtol=1e-6)
    await engine.push_grad_async(1, {"a": GRADS, "b": GRADS})
    np.testing.assert_allclose(
        engine.table("a").get(SIGNS), engine.table("b").get(SIGNS), rtol=1e-6
    )


def test_unknown_variable_and_batch_are_named(engine: PsEngine) -> None:
    with pytest.raises(UnknownVariableError, match=r"^unknown variable 'nope'$"):
        engine.feed(1, "nope", SIGNS, OFFSETS)
    with pytest.raises(UnknownBatchError, match=r"^batch 5 of variable 'a' was not fed"):
        engine.lookup(5, ["a"])
    engine.feed(2, "a", SIGNS, OFFSETS)
    engine.push_grad(2, {"a": GRADS})
    with pytest.raises(UnknownBatchError, match="batch 2 of variable 'a'"):
        engine.push_grad(2, {"a": GRADS})


def test_bad_gradient_changes_no_shard(engine: PsEngine) -> None:
    engine.feed(3, "a", SIGNS, OFFSETS)
    before = engine.table("a").get(SIGNS)
    with pytest.raises(
        ValueError,
        match=r"gradient of 'a' must be float32 of shape \(3, 4\), "
        r"got float32 of shape \(3, 5\)",
    ):
        engine.push_grad(3, {"a": np.zeros((3, 5), np.float32)})
    np.testing.assert_array_equal(engine.table("a").get(SIGNS), before)
    assert engine.pending_batches() == 1


def test_duplicate_variable_is_refused(engine: PsEngine) -> None:
    with pytest.raises(ValueError, match="variable 'a' already exists on this ps"):
        engine.create_variable("a", table(1))
    # One table under two names would put one shard twice in a request's grouped calls.
    held = engine.table("a")
    for put, name in ((engine.create_variable, "c"), (engine.put_variable, "b")):
        with pytest.raises(ValueError, match="this table is variable 'a' on this ps already"):
            put(name, held)
    assert engine.variables == ("a", "b") and engine.table("b") is not held
    engine.put_variable("a", held)  # a restore may put a variable's own table back


def test_abandoned_batches_expire(clock: Clock) -> None:
    with open_scheduler("inline", workers=1) as scheduler:
        engine = PsEngine(scheduler, batch_ttl=0.05)
        engine.create_variable("a", table(1))
        engine.feed(1, "a", SIGNS, OFFSETS)
        clock.now += 0.05
        assert engine.pending_batches() == 1  # not before its batch_ttl has passed
        clock.now += 0.01
        assert engine.pending_batches() == 0


def test_release_frees_a_lookup_only_batch(engine: PsEngine) -> None:
    for batch_id in (1, 2):
        for name in ("a", "b"):
            engine.feed(batch_id, name, SIGNS, OFFSETS)
    engine.lookup(1, ["a", "b"])
    engine.release(1, ["a"])
    assert engine.pending_batches() == 3
    engine.release(2)
    assert engine.pending_batches() == 1
    engine.release(99)
    assert engine.pending_batches() == 1


def test_a_lookup_into_a_matrix_fills_each_variables_columns(engine: PsEngine) -> None:
    """``a`` has three shards (summed into its block when collected), ``b`` one (pooled
    straight into its block); the columns nobody names keep what they held."""
    for name in ("a", "b"):
        engine.feed(3, name, SIGNS, OFFSETS)
    want = {name: table(1).lookup_pool(SIGNS, OFFSETS) for name in ("a", "b")}
    matrix = np.full((3, 2 * DIM + 3), 7.0, dtype=np.float32)
    target = LookupTarget(matrix, {"b": 0, "a": DIM + 1})
    got = engine.lookup(3, ["a", "b"], into=target)
    np.testing.assert_allclose(matrix[:, DIM + 1 : 2 * DIM + 1], want["a"], rtol=1e-6)
    np.testing.assert_allclose(matrix[:, :DIM], want["b"], rtol=1e-6)
    np.testing.assert_array_equal(matrix[:, DIM], 7.0)
    np.testing.assert_array_equal(matrix[:, 2 * DIM + 1 :], 7.0)
    for name in ("a", "b"):
        assert np.shares_memory(got[name].pooled, matrix)
        assert got[name].kernel_seconds > 0
    engine.push_grad(3, {"a": GRADS, "b": GRADS})


def test_a_lookup_target_without_room_is_refused_before_any_task(engine: PsEngine) -> None:
    engine.feed(5, "b", SIGNS, OFFSETS)
    narrow = np.zeros((3, DIM - 1), dtype=np.float32)
    with pytest.raises(ValueError, match=r"variable 'b' needs columns \[0, 4\)"):
        engine.lookup(5, ["b"], into=LookupTarget(narrow, {"b": 0}))
    with pytest.raises(ValueError, match="no columns for variable 'b'"):
        engine.lookup(5, ["b"], into=LookupTarget(np.zeros((3, DIM), np.float32), {}))
    with pytest.raises(ValueError, match="matrix has 4 rows but the batch has 3 examples"):
        engine.lookup(5, ["b"], into=LookupTarget(np.zeros((4, DIM), np.float32), {"b": 0}))
    # The batch is still there, unchanged: a plain lookup and the push go through.
    np.testing.assert_allclose(
        engine.lookup(5, ["b"])["b"].pooled, table(1).lookup_pool(SIGNS, OFFSETS), rtol=1e-6
    )
    engine.push_grad(5, {"b": GRADS})


@pytest.mark.parametrize("backend", ["per_variable", "work_stealing"])
def test_packing_small_shards_into_tasks_changes_no_number(backend: str) -> None:
    """One task per shard, or every shard packed into one task: the same pools and updates."""
    results = []
    for min_task_signs in (1, 10_000):
        with open_scheduler(backend, workers=2) as scheduler:
            engine = PsEngine(scheduler, min_task_signs=min_task_signs)
            for name, shards in (("a", 3), ("b", 1), ("c", 2)):
                engine.create_variable(name, table(shards))
                engine.feed(4, name, SIGNS, OFFSETS)
            pooled = engine.lookup(4, ["a", "b", "c"])
            engine.push_grad(4, {"a": GRADS, "c": GRADS})
            assert all(r.kernel_seconds > 0 for r in pooled.values())
            results.append(
                ([pooled[n].pooled for n in "abc"], [engine.table(n).get(SIGNS) for n in "abc"])
            )
    for first, second in zip(*results, strict=True):
        for x, y in zip(first, second, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6)


class KeysSeen(AdaptiveScheduler):
    """``adaptive``, noting the key of every task submitted to it."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.keys: list[TaskKey] = []

    def _admit(self, key: KeyLike, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        handle: TaskHandle[Any] = super()._admit(key, *args, **kwargs)
        self.keys.append(handle.key)
        return handle


@pytest.mark.anyio
@pytest.mark.parametrize(("threshold", "small"), [(len(SIGNS) + 1, True), (len(SIGNS), False)])
async def test_a_request_under_small_request_signs_is_keyed_small(
    threshold: int, small: bool
) -> None:
    """Feed, pins, lookup and push of a 7-sign batch: small below 8 signs, not at 7."""
    with KeysSeen(2) as scheduler:
        engine = PsEngine(scheduler, small_request_signs=threshold, min_task_signs=1)
        engine.create_variable("a", table(3))
        await engine.feed_async(1, [("a", SIGNS, OFFSETS)])
        pins = [key for key in scheduler.keys if key.background]
        await engine.lookup_async(1, ["a"])
        await engine.push_grad_async(1, {"a": GRADS})
        stats = scheduler.statistics()
    assert len(pins) == 3, "one pin per shard"
    assert len(scheduler.keys) == 1 + 3 * 3, "the feed's split, then 3 shards x 3 requests"
    assert {key.small for key in scheduler.keys} == {small}
    # Small tasks ran on this thread: no worker was busy for them.
    assert (sum(stats.busy_seconds) == 0) is small


def test_small_request_signs_is_checked() -> None:
    with (
        open_scheduler("inline") as scheduler,
        pytest.raises(ValueError, match="small_request_signs must be at least 0, got -1"),
    ):
        PsEngine(scheduler, small_request_signs=-1)


class BrokenPush(EmbeddingTable):
    """A table whose update fails half-way through a push (a disk, a bug): what the engine
    must survive without applying the other variables' gradients twice."""

    def _push_rows(self, *args: object, **kwargs: object) -> Any:
        raise RuntimeError("the update failed")


def test_failed_push_releases_the_batch_so_a_retry_cannot_apply_twice() -> None:
    with open_scheduler("thread_pool", workers=2) as scheduler:
        engine = PsEngine(scheduler, min_task_signs=1)
        engine.create_variable(
            "a", EmbeddingTable(2, capacity=64, optimizer=SGD(1.0), initializer=zeros())
        )
        engine.create_variable("b", BrokenPush(2, capacity=64, optimizer=SGD(1.0)))
        signs = np.array([1, 2, 3], dtype=np.uint64)
        offsets = np.array([0, 3])
        for name in ("a", "b"):
            engine.feed(1, name, signs, offsets)
        grads = np.ones((1, 2), dtype=np.float32)
        with pytest.raises(RuntimeError, match="the update failed"):
            engine.push_grad(1, {"a": grads, "b": grads})
        applied_once = engine.table("a").get(signs).copy()
        np.testing.assert_array_equal(applied_once, np.full((3, 2), -1.0, np.float32))
        with pytest.raises(UnknownBatchError):
            engine.push_grad(1, {"a": grads, "b": grads})
        np.testing.assert_array_equal(engine.table("a").get(signs), applied_once)
        assert engine.pending_batches() == 0
        # The failed shard never reached its unpin: the push gave its pins back anyway.
        assert engine.table("b").pinned_rows() == engine.table("a").pinned_rows() == 0


def test_the_same_push_sent_twice_at_once_is_applied_once() -> None:
    """A retry racing its original (two channels, two threads): one applies, one is refused."""
    import threading

    with open_scheduler("thread_pool", workers=2) as scheduler:
        engine = PsEngine(scheduler, min_task_signs=1)
        engine.create_variable(
            "a", EmbeddingTable(2, capacity=4096, optimizer=SGD(1.0), initializer=zeros())
        )
        signs = np.arange(1, 2001, dtype=np.uint64)
        offsets = np.array([0, 1000, 2000])
        grads = np.ones((2, 2), dtype=np.float32)
        refused = 0
        for batch in range(30):
            engine.feed(batch, "a", signs, offsets)
            outcomes: list[BaseException | None] = []
            start = threading.Barrier(2)

            def push(
                batch: int = batch,
                outcomes: list[BaseException | None] = outcomes,
                start: threading.Barrier = start,
            ) -> None:
                start.wait()
                try:
                    engine.push_grad(batch, {"a": grads})
                    outcomes.append(None)
                except UnknownBatchError as exc:
                    outcomes.append(exc)

            threads = [threading.Thread(target=push) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(o is None for o in outcomes) == [False, True]
            assert isinstance(next(o for o in outcomes if o is not None), AlreadyPushedError)
            refused += 1
        # Every sign received exactly one gradient of 1.0 per batch: SGD(1.0) took 30 steps.
        np.testing.assert_array_equal(engine.table("a").get(signs), np.full((2000, 2), -30.0))
        assert refused == 30 and engine.pending_batches() == 0


def test_a_pushed_batch_is_never_fed_again_until_a_restore_forgets_it(engine: PsEngine) -> None:
    engine.feed_many(4, [("a", SIGNS, OFFSETS), ("b", SIGNS, OFFSETS)])
    engine.lookup(4, ["a", "b"])
    engine.push_grad(4, {"a": GRADS, "b": GRADS})
    rows = engine.table("a").get(SIGNS)
    for names in (["a"], ["b", "a"]):
        with pytest.raises(
            ReopenedBatchError,
            match=f"batch 4 of variable {names[0]!r} was already pushed; a batch id is never "
            "fed again once pushed: feed the batch under a new id",
        ):
            engine.feed_many(4, [(name, SIGNS, OFFSETS) for name in names])
    assert engine.pending_batches() == 0  # the refused feed kept nothing, not even of "b"
    with pytest.raises(AlreadyPushedError):
        engine.push_grad(4, {"a": GRADS})
    np.testing.assert_array_equal(engine.table("a").get(SIGNS), rows)
    engine.forget_pushed(["a"])  # a restore of "a" rolled its pushes back
    engine.feed(4, "a", SIGNS, OFFSETS)
    with pytest.raises(ReopenedBatchError, match="variable 'b'"):
        engine.feed(4, "b", SIGNS, OFFSETS)


@pytest.mark.parametrize("backend", ["inline", "work_stealing"])
def test_a_feed_the_pinned_rows_leave_no_room_for_is_refused_until_rows_come_back(
    backend: str,
) -> None:
    with open_scheduler(backend, workers=2) as scheduler:
        engine = PsEngine(scheduler)
        engine.create_variable("a", EmbeddingTable(2, capacity=1000, optimizer=SGD(1.0)))
        fresh = [np.arange(100 * b + 1, 100 * b + 101, dtype=np.uint64) for b in range(14)]
        offsets = np.array([0, 60, 100])
        for batch in range(10):  # abandoned batches: fed, never looked up nor pushed
            engine.feed(batch, "a", fresh[batch], offsets)
        message = (
            "variable 'a' cannot admit this batch's signs in shard 0: 10 fed batches not yet "
            "pushed pin every row there (1000 rows in 1 shards); push or release them (an "
            "abandoned one expires after batch_ttl=300 s), or raise its capacity"
        )
        for batch in (10, 11):  # found by the first one's pins, then before any work
            with pytest.raises(CapacityError, match=re.escape(message)):
                engine.feed(batch, "a", fresh[batch], offsets)
        assert engine.pending_batches() == 10  # a refused feed keeps nothing
        engine.feed(3, "a", fresh[3], offsets)  # a batch re-fed has its rows: admitted
        engine.lookup(4, ["a"])
        engine.push_grad(4, {"a": np.ones((2, 2), np.float32)})  # gives its 100 rows back
        engine.feed(12, "a", fresh[12], offsets)
        with pytest.raises(CapacityError, match="10 fed batches not yet pushed pin every row"):
            engine.feed(13, "a", fresh[13], offsets)
        engine.release(0)  # a release gives rows back too
        engine.feed(13, "a", fresh[13], offsets)
        np.testing.assert_array_equal(engine.lookup(13, ["a"])["a"].pooled.shape, (2, 2))


def test_fed_batches_that_are_never_pushed_are_capped() -> None:
    with open_scheduler("inline", workers=1) as scheduler:
        engine = PsEngine(scheduler, max_pending_mb=1)
        engine.create_variable("a", EmbeddingTable(2, capacity=70_000, optimizer=SGD(1.0)))
        signs = np.arange(1, 60_001, dtype=np.uint64)  # 480 KB of signs per batch
        offsets = np.array([0, 60_000])
        engine.feed(1, "a", signs, offsets)
        engine.feed(1, "a", signs, offsets)  # a re-feed replaces: no growth
        engine.feed(2, "a", signs, offsets)
        with pytest.raises(CapacityError, match=r"max_pending_mb=1\); push or release them"):
            engine.feed(3, "a", signs, offsets)
        assert engine.pending_batches() == 2  # the refused feed kept nothing
        engine.release(1)
        engine.feed(3, "a", signs, offsets)  # room again
        assert engine.pending_batches() == 2


def test_fed_batches_are_capped_in_number_too() -> None:
    with open_scheduler("inline", workers=1) as scheduler:
        engine = PsEngine(scheduler, max_pending_batches=3)
        for name in ("a", "b"):
            engine.create_variable(name, EmbeddingTable(2, capacity=100, optimizer=SGD(1.0)))
        signs, offsets = np.arange(1, 4, dtype=np.uint64), np.array([0, 3])
        for batch in range(3):
            engine.feed(batch, "a", signs, offsets)
        engine.feed(2, "b", signs, offsets)  # another variable of a batch held: not a new one
        with pytest.raises(
            CapacityError,
            match=r"^this ps holds 3 fed batches not yet pushed or released "
            r"\(max_pending_batches=3\); push or release them, or raise max_pending_batches$",
        ):
            engine.feed(3, "a", signs, offsets)
        assert engine.pending_batches() == 4  # (batch, variable) pairs: the refused one kept none
        engine.release(2)  # both of batch 2's variables: room for one batch again
        engine.feed(3, "a", signs, offsets)
        engine.push_grad(0, {"a": np.ones((1, 2), dtype=np.float32)})
        engine.feed(4, "a", signs, offsets)
        assert engine.pending_batches() == 3


def test_rows_are_pinned_from_feed_until_push_release_or_expiry(clock: Clock) -> None:
    with open_scheduler("work_stealing", workers=2) as scheduler:
        engine = PsEngine(scheduler, batch_ttl=0.2)
        engine.create_variable("a", table(2))
        for batch_id in (1, 2, 3):
            engine.feed(batch_id, "a", SIGNS, OFFSETS)
        held = engine.table("a").pinned_rows()
        assert held == len(np.unique(SIGNS))
        assert engine.kernel_seconds["a"] > 0  # mapping at feed is the variable's work too
        engine.lookup(1, ["a"])
        engine.push_grad(1, {"a": np.ones((len(OFFSETS) - 1, 4), dtype=np.float32)})
        engine.release(2)
        assert engine.table("a").pinned_rows() == held  # batch 3 still holds them
        clock.now += 0.3
        assert engine.pending_batches() == 0  # batch 3 expired
        assert engine.table("a").pinned_rows() == 0


def test_map_rows_at_lookup_pins_nothing() -> None:
    with open_scheduler("inline", workers=1) as scheduler:
        engine = PsEngine(scheduler, map_at_feed=False)
        engine.create_variable("a", table(2))
        engine.feed(1, "a", SIGNS, OFFSETS)
        assert engine.table("a").pinned_rows() == 0
        assert len(engine.table("a")) == 0  # nothing mapped before the lookup
        engine.lookup(1, ["a"])
        assert len(engine.table("a")) == len(np.unique(SIGNS))


def test_a_batch_fed_before_its_table_is_replaced_is_served_by_the_new_table() -> None:
    """A restore or a move replaces a variable's table while batches are held: their lookup
    and push must go to the table the engine holds now, not the one they were split by."""
    with open_scheduler("inline", workers=1) as scheduler:
        engine = PsEngine(scheduler)
        old = EmbeddingTable(DIM, capacity=64, optimizer=Adagrad(0.1), num_shards=2, seed=1)
        engine.create_variable("a", old)
        engine.feed(7, "a", SIGNS, OFFSETS)
        new = EmbeddingTable(DIM, capacity=64, optimizer=Adagrad(0.1), num_shards=2, seed=2)
        reference = EmbeddingTable(DIM, capacity=64, optimizer=Adagrad(0.1), num_shards=2, seed=2)
        engine.put_variable("a", new)
        pooled = engine.lookup(7, ["a"])["a"].pooled
        np.testing.assert_array_equal(pooled, reference.lookup_pool(SIGNS, OFFSETS))
        engine.push_grad(7, {"a": GRADS})
        reference.push_grad(SIGNS, OFFSETS, GRADS)
        np.testing.assert_array_equal(new.get(SIGNS), reference.get(SIGNS))
        assert len(old) == len(np.unique(SIGNS))  # pinned at feed, then left alone
        np.testing.assert_array_equal(
            old.get(SIGNS),
            EmbeddingTable(DIM, capacity=64, optimizer=Adagrad(0.1), num_shards=2, seed=1).get(
                SIGNS
            ),
        )


@pytest.mark.parametrize("map_at_feed", [True, False])
def test_hits_count_every_occurrence_a_lookup_and_its_push_find(map_at_feed: bool) -> None:
    """The statistics count a sign occurrence as a hit each time a call finds its row: a push
    that reuses the lookup's (or the feed's) mapping counts its occurrences as hits too."""
    with open_scheduler("inline", workers=1) as scheduler:
        engine = PsEngine(scheduler, map_at_feed=map_at_feed)
        engine.create_variable("a", table(2))
        for batch_id in (1, 2):
            engine.feed(batch_id, "a", SIGNS, OFFSETS)
            engine.lookup(batch_id, ["a"])
            engine.push_grad(batch_id, {"a": GRADS})
        stats = engine.table("a").statistics()
        distinct = len(np.unique(SIGNS))
        assert stats.misses == distinct
        # Batch 1: its repeats hit at mapping, then the push hits all 7; batch 2 hits twice.
        assert stats.hits == (len(SIGNS) - distinct) + len(SIGNS) + 2 * len(SIGNS)


def test_a_feed_that_races_a_drop_keeps_nothing_for_the_dropped_variable() -> None:
    """A DropVariable between a feed's split (a scheduler task) and its hold forgets the batch
    as it forgets every fed batch: a variable created again under the name never serves or
    takes gradients for it through the dropped table."""
    with open_scheduler("inline", workers=1) as scheduler:
        engine = PsEngine(scheduler)
        dropped = table(2)
        engine.create_variable("a", dropped)
        split = dropped.split

        def split_then_drop(signs: Any, offsets: Any, weights: Any = None) -> Any:
            batch = split(signs, offsets, weights)
            engine.drop_variable("a")  # what a DropVariable on the event loop may do here
            return batch

        dropped.split = split_then_drop  # type: ignore[method-assign]
        engine.feed(7, "a", SIGNS, OFFSETS)
        assert engine.pending_batches() == 0
        engine.create_variable("a", table(2))
        with pytest.raises(UnknownBatchError):
            engine.lookup(7, ["a"])
        assert len(dropped) == 0
