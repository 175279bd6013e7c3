"""``PsEngine``: what a ps does between receiving bytes and sending them back.

The engine owns a ps process's embedding tables and the batches fed to it, and turns every
request into scheduler tasks: a huge variable's shards are tasks of their own, spread over all
workers, while the shards of small variables are packed together into tasks of at least
``min_task_signs`` signs. A packed task is keyed by its largest part, so ``per_variable``'s
one-at-a-time order holds per task, not per packed shard; every table keeps its own lock mode,
which is what protects its rows (set ``min_task_signs=1`` for one task per shard). Every task
of a request of fewer than ``small_request_signs`` signs is keyed ``small``: the ``adaptive``
scheduler runs it on the thread that made the request, where a worker thread would only take
turns at the GIL with it (the other backends ignore the hint).

Every call a ps answers goes the same way: transport → :class:`~sniper.roles.PsRole` → engine →
scheduler → store. The ``*_async`` methods are what the role awaits; the blocking ones are for
benchmarks and embedders on plain threads, and both submit the same scheduler tasks, so what a
benchmark measures is what the server runs.

Batch lifecycle, as in the seed system: ``feed`` (FeedSample) splits a variable's signs by
shard once, keeps them under the batch id and maps them to rows, pinned so that no eviction
moves them; ``lookup`` (EmbeddingLookup) gathers and pools those rows; ``push_grad``
(PushGrad) applies gradients to them and frees the batch. Mapping at feed time moves the hash
index probes off the trainer's critical path: a hub feeds batches while the trainer is still
busy with earlier ones (``map_at_feed=False`` maps at lookup instead, as before). A batch that
is never pushed is dropped after ``batch_ttl`` seconds, so an abandoned trainer cannot leak
memory or pins.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, TypeVarTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sniper._config import Validated, check_at_least, check_positive
from sniper.roles._errors import (
    AlreadyPushedError,
    ReopenedBatchError,
    UnknownBatchError,
    UnknownVariableError,
)
from sniper.rpc import LookupTarget, PendingFeed, Pooled
from sniper.scheduler import Scheduler, TaskHandle, TaskKey, wait_all
from sniper.store import (
    CapacityError,
    EmbeddingTable,
    PoolPart,
    ShardedBatch,
    TableExport,
    pin_shards,
    pool_shards,
    push_shards,
)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

__all__ = ["EngineConfig", "PendingLookup", "PsEngine"]


@dataclass(frozen=True)
class EngineConfig(Validated):
    """A ps engine's batch limits and small-request threshold, declared and checked once:
    :class:`PsEngine` takes them as keywords (with these defaults), and the configs of
    ``sniper serve`` and ``sniper train`` as keys (:class:`~sniper.roles.PsSettings` is one)."""

    batch_ttl: float = 300.0
    """Seconds a fed batch waits for its PushGrad before it is dropped."""
    max_pending_mb: float = 2048.0
    """Fed batches not yet pushed or released this ps may hold; past it FeedSample answers
    RESOURCE_EXHAUSTED."""
    max_pending_batches: int = 4096
    """The same cap in batches (a job's hubs and trainer hold a few dozen at a time)."""
    small_request_signs: int = 65_536
    """A FeedSample, EmbeddingLookup or PushGrad of fewer signs than this on this ps has its
    tasks keyed ``small``, which ``adaptive`` runs on the thread that received the request
    (0: none is small). Measured on two cores with 2 ps in one process
    (``experiments/small_requests.toml``, two runs a point): seed_ctr at scale 0.02 (requests
    of about 52k and 31k signs) ran 31.2k examples/s at this default against 20.3k with every
    request on the workers; at 1.0 (400k and 300k) 7.1k with every request inline against
    9.8k; at 0.1 (78k and 46k), 23.0k all inline against 20.4k at this default, so the
    crossover may lie higher on this machine. More cores make the workers worth it sooner."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "batch_ttl", "max_pending_mb")
        check_at_least(self, 1, "max_pending_batches")
        check_at_least(self, 0, "small_request_signs")


class PsEngine:
    """Embedding tables of one ps, with per-batch state, run on a :class:`Scheduler`."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        batch_ttl: float = EngineConfig.batch_ttl,
        min_task_signs: int = 32_768,
        small_request_signs: int = EngineConfig.small_request_signs,
        max_pending_mb: float = EngineConfig.max_pending_mb,
        max_pending_batches: int = EngineConfig.max_pending_batches,
        map_at_feed: bool = True,
    ) -> None:
        EngineConfig(  # checks them, and names the one that is wrong
            batch_ttl=batch_ttl,
            max_pending_mb=max_pending_mb,
            max_pending_batches=max_pending_batches,
            small_request_signs=small_request_signs,
        )
        self.min_task_signs = min_task_signs
        self.small_request_signs = small_request_signs
        self.map_at_feed = map_at_feed
        self.scheduler = scheduler
        self.batch_ttl = batch_ttl
        self.max_pending_mb = max_pending_mb
        self.max_pending_batches = max_pending_batches
        check_at_least(self, 1, "min_task_signs")
        self._tables: dict[str, EmbeddingTable] = {}
        self._batches: dict[tuple[int, str], _Held] = {}
        self._pending_bytes = 0
        self._variables_of: Counter[int] = Counter()  # batch id -> its variables held
        self._pushed: OrderedDict[tuple[int, str], None] = OrderedDict()
        """The (batch, variable) pairs pushed most recently, so a duplicate push is told it
        was applied (ALREADY_EXISTS) rather than that the batch is unknown, and a FeedSample
        of one is refused (:class:`ReopenedBatchError`): a batch once pushed is never
        reopened, so no gradient reaches its rows twice."""
        self.kernel_seconds: dict[str, float] = {}
        """Store seconds of each variable's pins, lookups and pushes so far: the load it puts
        on this ps (auto_shard compares them across ps). A lookup or push task pools or
        updates all its variables in one kernel call, whose time is shared among them by
        their signs."""
        self._lock = threading.Lock()

    # -- variables -------------------------------------------------------------------------------

    def create_variable(self, name: str, table: EmbeddingTable) -> None:
        """Hold ``table`` as variable ``name``; creating an existing name is an error."""
        if not name:
            raise ValueError("variable name must not be empty")
        with self._lock:
            if name in self._tables:
                raise ValueError(f"variable {name!r} already exists on this ps")
            self._check_not_held(name, table)
            self._tables[name] = table

    def put_variable(self, name: str, table: EmbeddingTable) -> None:
        """Hold ``table`` as variable ``name``, replacing the table it had (a restore).

        Batches fed before keep their split: the new table has the same configuration, so the
        same shards. Tasks already running finish on the old table.
        """
        if not name:
            raise ValueError("variable name must not be empty")
        with self._lock:
            self._check_not_held(name, table)
            self._tables[name] = table
            for key, held in self._batches.items():
                if key[1] == name:
                    self._batches[key] = held._replace(parts=_shards(name, table, held.batch))

    def _check_not_held(self, name: str, table: EmbeddingTable) -> None:
        """Refuse a table this ps holds under another name: a request's shards of one table
        must be one variable's (a grouped call refuses one shard twice)."""
        for other, held in self._tables.items():
            if held is table and other != name:
                raise ValueError(
                    f"this table is variable {other!r} on this ps already; "
                    f"give {name!r} a table of its own"
                )

    def drop_variable(self, name: str) -> bool:
        """Forget variable ``name`` and its fed batches (it moved to another ps); False if it
        was not held."""
        with self._lock:
            if self._tables.pop(name, None) is None:
                return False
            for key in [key for key in self._batches if key[1] == name]:
                self._drop(key)
            self.kernel_seconds.pop(name, None)
            return True

    def table(self, name: str) -> EmbeddingTable:
        """The table of variable ``name``."""
        try:
            return self._tables[name]
        except KeyError:
            raise UnknownVariableError(f"unknown variable {name!r}") from None

    @property
    def variables(self) -> tuple[str, ...]:
        """Names of the variables held, in creation order."""
        return tuple(self._tables)

    # -- batches ---------------------------------------------------------------------------------

    def feed(
        self,
        batch_id: int,
        name: str,
        signs: ArrayLike,
        offsets: ArrayLike,
        weights: ArrayLike | None = None,
    ) -> None:
        """Keep a variable's signs of one batch (weighted by ``weights``, if given), split by
        shard, until it is pushed."""
        self.feed_many(
            batch_id, [(name, signs, offsets)], {} if weights is None else {name: weights}
        )

    def feed_many(
        self,
        batch_id: int,
        variables: Iterable[tuple[str, ArrayLike, ArrayLike]],
        weights: Mapping[str, ArrayLike] | None = None,
    ) -> None:
        """Feed several variables of one batch: all are validated before any is kept. A
        variable named in ``weights`` has weighted bags (one weight per sign)."""
        parts = self._keep(batch_id, variables, weights)
        handles = self._submit_pins(parts)
        self._count(pair for handle in handles for pair in handle.result())
        self._check_pinned(batch_id, parts)

    def _keep(
        self,
        batch_id: int,
        variables: Iterable[tuple[str, ArrayLike, ArrayLike]],
        weights: Mapping[str, ArrayLike] | None = None,
    ) -> list[_Part]:
        """Validate, split and hold a batch's variables; the parts of the batches held."""
        weights = weights or {}
        split = [
            (name, self.table(name).split(signs, offsets, weights.get(name)))
            for name, signs, offsets in variables
        ]
        parts: list[_Part] = []
        with self._lock:
            now = time.monotonic()  # read under the lock: the dict stays in feed-time order
            self._expire(now)
            self._check_not_pushed(batch_id, [name for name, _ in split])
            self._check_room(batch_id, split)
            for name, batch in split:
                if (batch_id, name) not in self._batches:  # a re-feed has its rows already
                    self._check_admits(batch_id, name, batch)
            for name, batch in split:
                # Re-feeding moves the key to the end, keeping the dict ordered by feed time.
                self._drop((batch_id, name))
                parts += self._hold(batch_id, name, batch, now)
        return parts

    def _submit_pins(self, parts: list[_Part]) -> list[TaskHandle[list[tuple[str, float]]]]:
        """Map and pin the rows of batches just fed, as tasks planned like a lookup's."""
        if not self.map_at_feed:
            return []
        # Background: a lookup or push the trainer waits for goes first (work_stealing); a
        # lookup that comes before its batch's pins maps the rows itself, and the pins skip.
        return self._submit(parts, _pin_parts, background=True)

    def _check_admits(self, batch_id: int, name: str, batch: ShardedBatch) -> None:
        """Refuse a batch with signs in a shard whose rows fed batches pin, all of them
        (:meth:`~sniper.store.EmbeddingTable.pins_full`): its new signs could only take rows
        from batches still to be looked up, and finding none costs a scan of the shard. Told
        at once, a hub waits or its operator acts, where each FeedSample used to take seconds
        and be accepted until ``batch_ttl`` freed the abandoned batches' rows."""
        table = self._tables.get(name)
        if table is None:
            return
        for shard in range(batch.num_shards):
            if batch.shard_size(shard) and table.pins_full(shard):
                held = sum(1 for key in self._batches if key[1] == name and key[0] != batch_id)
                raise CapacityError(
                    f"variable {name!r} cannot admit this batch's signs in shard {shard}: {held} "
                    f"fed batches not yet pushed pin every row there ({table.capacity} rows in "
                    f"{table.num_shards} shards); push or release them (an abandoned one "
                    f"expires after batch_ttl={self.batch_ttl:g} s), or raise its capacity"
                )

    def _check_pinned(self, batch_id: int, parts: list[_Part]) -> None:
        """After a feed's pins: refuse it, keeping nothing, if a shard it needs rows in ran
        out of them (:meth:`_check_admits`, found by this feed's own pins)."""
        if not self.map_at_feed:
            return
        with self._lock:
            try:
                for name, batch in {part.name: part.batch for part in parts}.items():
                    if self._batches.get((batch_id, name)) is not None:
                        self._check_admits(batch_id, name, batch)
            except CapacityError:
                for name in {part.name for part in parts}:
                    self._drop((batch_id, name))
                raise

    def _check_not_pushed(self, batch_id: int, names: list[str]) -> None:
        """Refuse to feed a batch already pushed (under the lock): see :attr:`_pushed`."""
        pushed = [name for name in names if (batch_id, name) in self._pushed]
        if pushed:
            raise ReopenedBatchError(
                f"batch {batch_id} of variable {pushed[0]!r} was already pushed; a batch id "
                "is never fed again once pushed: feed the batch under a new id"
            )

    def forget_pushed(self, names: Iterable[str]) -> None:
        """Forget the pushes of variables ``names`` (a Restore rolled their rows back to before
        them): their batches may be fed and pushed again, as a resumed job does."""
        names = set(names)
        with self._lock:
            for key in [key for key in self._pushed if key[1] in names]:
                del self._pushed[key]

    def _check_room(self, batch_id: int, split: list[tuple[str, ShardedBatch]]) -> None:
        """Refuse a feed that would hold more than ``max_pending_batches`` batches or
        ``max_pending_mb`` of them unpushed: a hub that feeds batches nobody trains must not
        grow a ps without bound (nor make it walk millions of entries to expire them)."""
        held = len(self._variables_of)
        if split and batch_id not in self._variables_of and held >= self.max_pending_batches:
            raise CapacityError(
                f"this ps holds {held} fed batches not yet pushed or released "
                f"(max_pending_batches={self.max_pending_batches}); push or release them, "
                "or raise max_pending_batches"
            )
        replaced = sum(
            entry.nbytes
            for name, _ in split
            if (entry := self._batches.get((batch_id, name))) is not None
        )
        after = self._pending_bytes - replaced + sum(_nbytes(batch) for _, batch in split)
        if after > self.max_pending_mb * 2**20:
            raise CapacityError(
                f"this ps holds {self._pending_bytes / 2**20:.0f} MB of fed batches not yet "
                f"pushed or released (max_pending_mb={self.max_pending_mb:g}); push or release "
                "them, or raise max_pending_mb"
            )

    def _hold(self, batch_id: int, name: str, batch: ShardedBatch, now: float) -> list[_Part]:
        """Keep a variable's split batch as fed at ``now`` (under the lock); its parts, on the
        variable's table now (a restore or a move may have replaced the one that split it: the
        same configuration, so the same shards). A variable dropped since the split keeps
        nothing: the drop forgot its fed batches, this one included."""
        current = self._tables.get(name)
        if current is None:
            return []
        held = _Held(batch, now, _shards(name, current, batch), _nbytes(batch))
        self._batches[(batch_id, name)] = held
        self._variables_of[batch_id] += 1
        self._pending_bytes += held.nbytes
        return held.parts

    def _drop(self, key: tuple[int, str]) -> None:
        """Forget a fed batch and give back its pins (released, expired or fed again)."""
        batch = self._forget(key)
        table = self._tables.get(key[1])
        if batch is not None and table is not None:
            table.unpin(batch)

    def _forget(self, key: tuple[int, str]) -> ShardedBatch | None:
        """Stop holding a fed batch (under the lock); the batch, or None if not held."""
        entry = self._batches.pop(key, None)
        if entry is None:
            return None
        self._pending_bytes -= entry.nbytes
        self._variables_of[key[0]] -= 1
        if not self._variables_of[key[0]]:
            del self._variables_of[key[0]]
        return entry.batch

    async def feed_async(
        self,
        batch_id: int,
        variables: Iterable[tuple[str, ArrayLike, ArrayLike]],
        weights: Mapping[str, ArrayLike] | None = None,
    ) -> None:
        """:meth:`feed_many` as scheduler tasks: splitting by shard is kernel work, kept off
        the event loop and keyed by the first variable; then the pins, planned like a lookup."""
        items = list(variables)
        signs = sum(np.size(signs) for _, signs, _ in items)
        key = TaskKey(items[0][0] if items else "__feed__", small=self._small(signs))
        held = await self.scheduler.run(key, self._keep, batch_id, items, weights)
        self._count(pair for task in await wait_all(self._submit_pins(held)) for pair in task)
        self._check_pinned(batch_id, held)

    def batches_of(self, name: str) -> list[tuple[int, ShardedBatch]]:
        """Variable ``name``'s fed batches not yet pushed, in feed order (to move them)."""
        self.table(name)
        with self._lock:
            self._expire(time.monotonic())
            return [(key[0], entry.batch) for key, entry in self._batches.items() if key[1] == name]

    def adopt(self, name: str, batches: Iterable[PendingFeed]) -> int:
        """Keep batches of ``name`` fed to another ps (a move), except those fed here already:
        a feed here is newer. All are validated before any is kept; returns how many were.
        Their ``batch_ttl`` starts again, and they count against the pending limits without
        being refused by them: they were within the old owner's. They are not pinned: their
        lookups map them, as every lookup did before rows were mapped at feed time."""
        table = self.table(name)
        split = [
            (feed.batch_id, table.split(*feed[1:])) for feed in map(PendingFeed._make, batches)
        ]
        with self._lock:
            now = time.monotonic()
            kept = 0
            for batch_id, batch in split:
                if (batch_id, name) not in self._batches and self._hold(batch_id, name, batch, now):
                    kept += 1
            return kept

    def fed_batch_size(self, batch_id: int, name: str) -> int | None:
        """Examples of variable ``name``'s fed batch ``batch_id`` (None: not held): what its
        lookup answers rows for."""
        with self._lock:
            entry = self._batches.get((batch_id, name))
        return None if entry is None else entry.batch.batch_size

    def pending_batches(self) -> int:
        """(batch, variable) pairs fed and not yet pushed or expired."""
        with self._lock:
            self._expire(time.monotonic())
            return len(self._batches)

    def release(self, batch_id: int, names: Iterable[str] | None = None) -> None:
        """Free a batch without pushing (an evaluation batch is only looked up).

        ``names=None`` frees every variable of the batch. Unknown ids are ignored, so a release
        after expiry is harmless.
        """
        with self._lock:
            keys = (
                [key for key in self._batches if key[0] == batch_id]
                if names is None
                else [(batch_id, name) for name in names]
            )
            for key in keys:
                self._drop(key)

    def _expire(self, now: float) -> None:
        # Batches sit in feed order, so only the stale prefix is visited: O(expired), not O(n).
        while self._batches:
            key, entry = next(iter(self._batches.items()))
            if now - entry.fed <= self.batch_ttl:
                return
            self._drop(key)

    # -- lookup and push -------------------------------------------------------------------------
    #
    # Work is planned as tasks of at least ``min_task_signs`` signs: a shard of a huge variable
    # is a task of its own, while the shards of small variables are packed together. 74 of the
    # 76 seed_ctr variables take 50-200 us each; as separate tasks their handoffs and GIL
    # convoys cost more than the parallelism gives (measured: 1.2x on 2 threads for 84 tasks,
    # 1.7x for the same work in 16 packed tasks). Tasks are submitted biggest first, so the
    # small ones fill the gaps at the end (longest-processing-time-first scheduling).

    def _small(self, signs: int) -> bool:
        """Whether a request of ``signs`` signs is too small to gain from worker threads."""
        return signs < self.small_request_signs

    def _submit(
        self,
        parts: list[_Part],
        body: Callable[[list[_Part], *Ts], T],
        *args: *Ts,
        background: bool = False,
    ) -> list[TaskHandle[T]]:
        """Plan one request's parts into tasks and submit each as ``body(task, *args)``,
        keyed by its largest part and hinted ``small`` when the whole request is."""
        small = self._small(sum(part.signs for part in parts))
        return [
            self.scheduler.submit(
                task[0].key._replace(background=background, small=small), body, task, *args
            )
            for task in self._plan(parts)
        ]

    def _plan(self, parts: list[_Part]) -> list[list[_Part]]:
        tasks: list[list[_Part]] = []
        current: list[_Part] = []
        size = 0
        for part in sorted(parts, key=lambda p: -p.signs):
            current.append(part)
            size += part.signs
            if size >= self.min_task_signs:
                tasks.append(current)
                current, size = [], 0
        if current:
            tasks.append(current)
        return tasks

    def _parts(self, batch_id: int, names: Iterable[str]) -> list[_Part]:
        """Every shard of the fed batch ``batch_id`` of each of ``names``, read under one
        lock (a request names all 76 variables of seed_ctr: one lock and one expiry pass, not
        76 of each)."""
        for name in names:
            self.table(name)  # an unknown variable is named as such, before a missing batch
        with self._lock:
            self._expire(time.monotonic())
            held = [(name, self._batches.get((batch_id, name))) for name in names]
        parts = []
        for name, entry in held:
            if entry is None:
                raise self._missing(batch_id, name)
            parts += entry.parts
        return parts

    def start_lookup(
        self, batch_id: int, names: Iterable[str], into: LookupTarget | None = None
    ) -> PendingLookup:
        """Validate the request and submit its tasks; collect with the returned object.

        Splitting start from wait lets a server time dispatch and waiting as separate stages.
        With ``into``, a variable held in one shard is pooled straight into its block of
        ``into.matrix``; one of several shards is pooled shard by shard, as without, and its
        sum written there when the tasks are collected (two tasks cannot add to one block).
        """
        names = list(names)
        if len(set(names)) != len(names):
            repeated = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"names repeats {', '.join(map(repr, repeated))}; ask once")
        parts = self._parts(batch_id, names)
        if into is not None:
            for part in parts:  # a target that does not fit fails now, before any task
                if part.batch.bags is None:  # an unpooled variable is answered on its own
                    into.check_rows(part.batch.batch_size)
                    into.column(part.name, part.table.dim)
        return PendingLookup(self._submit(parts, _lookup_parts, into), self._count, into)

    def _count(self, seconds: Iterable[tuple[str, float]]) -> None:
        """Add ``(variable, kernel seconds)`` pairs to :attr:`kernel_seconds`."""
        with self._lock:
            for name, elapsed in seconds:
                self.kernel_seconds[name] = self.kernel_seconds.get(name, 0.0) + elapsed

    def lookup(
        self, batch_id: int, names: Iterable[str], into: LookupTarget | None = None
    ) -> dict[str, Pooled]:
        """Pooled embeddings of ``names`` for a fed batch, blocking the calling thread."""
        return self.start_lookup(batch_id, names, into).result()

    async def lookup_async(
        self, batch_id: int, names: Iterable[str], into: LookupTarget | None = None
    ) -> dict[str, Pooled]:
        """Pooled embeddings of ``names``, awaited without blocking the event loop."""
        return await self.start_lookup(batch_id, names, into).wait()

    def _submit_pushes(
        self, batch_id: int, grads: Mapping[str, ArrayLike]
    ) -> tuple[list[TaskHandle[list[tuple[str, float]]]], list[_Part]]:
        """Validate a push, claim its batches and submit its tasks; the tasks and parts."""
        parts = self._parts(batch_id, grads)
        fed = {part.name: part for part in parts}
        # Every gradient is checked before any shard task runs, so a bad one changes no shard
        # (its layout is the table's to take or copy: a block of the trainer's transposed
        # product is read as it is).
        checked = {
            name: fed[name].table._checked_grads(
                grad, fed[name].batch.batch_size, f"gradient of {name!r}"
            )
            for name, grad in grads.items()
        }
        self._claim(batch_id, [part.batch for part in parts], list(grads))
        return self._submit(parts, _push_parts, checked), parts

    @staticmethod
    def _unpin_parts(parts: list[_Part]) -> None:
        """Give back pins a push left: a shard task that failed never reached its unpin."""
        for batch, table in {id(part.batch): (part.batch, part.table) for part in parts}.values():
            table.unpin(batch)

    def _claim(self, batch_id: int, batches: list[ShardedBatch], names: list[str]) -> None:
        """Take the batch's variables out of the pending set, or raise if another push did.

        Two copies of one PushGrad (a client's retry racing its original on another channel)
        both pass validation; only the first to claim applies, the other gets NOT_FOUND, so a
        gradient is never applied twice. Checked and taken under one lock: all or none.
        """
        with self._lock:
            held = {name: self._batches.get((batch_id, name)) for name in names}
            taken = {id(entry.batch) for entry in held.values() if entry is not None}
            if any(entry is None for entry in held.values()) or not taken >= {
                id(b) for b in batches
            }:
                raise self._missing(batch_id, names[0])
            for name in names:
                self._forget((batch_id, name))  # its pins are the push's to give back
                self._pushed[(batch_id, name)] = None
            while len(self._pushed) > _PUSHED_REMEMBERED:
                self._pushed.popitem(last=False)

    def _missing(self, batch_id: int, name: str) -> UnknownBatchError:
        if (batch_id, name) in self._pushed:
            return AlreadyPushedError(
                f"batch {batch_id} of variable {name!r} was already pushed; "
                "a gradient is applied once"
            )
        return UnknownBatchError(
            f"batch {batch_id} of variable {name!r} was not fed "
            "to this ps (or was already pushed or expired)"
        )

    # A push frees its batch whatever happens: once any shard may have applied its gradient,
    # a retry of the same batch must fail with NOT_FOUND rather than apply it a second time.
    # Every task is waited for before an error is raised, so none is still writing when the
    # caller hears about the failure.

    def push_grad(self, batch_id: int, grads: Mapping[str, ArrayLike]) -> None:
        """Apply gradients ``{variable: [batch, dim]}`` and free those variables' batch."""
        handles, parts = self._submit_pushes(batch_id, grads)
        try:
            errors = []
            done = []
            for handle in handles:
                try:
                    done.append(handle.result())
                except Exception as exc:
                    errors.append(exc)
            self._count(pair for task in done for pair in task)
            if errors:
                raise errors[0]
        finally:
            self._unpin_parts(parts)

    async def push_grad_async(self, batch_id: int, grads: Mapping[str, ArrayLike]) -> None:
        """:meth:`push_grad`, awaited without blocking the event loop."""
        handles, parts = self._submit_pushes(batch_id, grads)
        try:
            self._count(pair for task in await wait_all(handles) for pair in task)
        finally:
            self._unpin_parts(parts)

    # -- rows and checkpoints -------------------------------------------------------------------

    async def pull_async(self, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
        """Rows of ``signs`` of variable ``name`` (zeros where absent), inserting none."""
        table = self.table(name)
        rows: NDArray[np.float32] = await self.scheduler.run(name, table.get, signs)
        return rows

    async def import_async(self, name: str, data: TableExport) -> None:
        """Write exported rows (weights, optimizer state, steps) into variable ``name``."""
        table = self.table(name)
        await self.scheduler.run(name, table.import_, data)

    async def run_exclusive(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function(*args)`` as one scheduler task under the checkpoint key: saves and
        restores of one ps are serialized on ``per_variable`` and run off the event loop."""
        return await self.scheduler.run("__checkpoint__", function, *args)


class PendingLookup:
    """Lookup tasks in flight; ``result()`` blocks, ``await wait()`` does not."""

    def __init__(
        self,
        handles: list[TaskHandle[list[_Done]]],
        count: Callable[[Iterable[tuple[str, float]]], None] | None = None,
        into: LookupTarget | None = None,
    ) -> None:
        self.handles = handles
        self._count = count
        self._into = into

    def _collected(self, tasks: list[list[_Done]]) -> dict[str, Pooled]:
        results = _collect(tasks, self._into)
        if self._count is not None:
            self._count((name, pooled.kernel_seconds) for name, pooled in results.items())
        return results

    def result(self) -> dict[str, Pooled]:
        return self._collected([handle.result() for handle in self.handles])

    async def wait(self) -> dict[str, Pooled]:
        return self._collected(await wait_all(self.handles))


class _Part(NamedTuple):
    """One shard of one variable's batch: the unit that tasks are packed from (a tuple:
    three requests a batch make one per shard, and a dataclass cost three times as much)."""

    name: str
    table: EmbeddingTable
    batch: ShardedBatch
    shard: int
    signs: int

    @property
    def key(self) -> TaskKey:
        return TaskKey(self.name, self.shard)


class _Held(NamedTuple):
    """A variable's fed batch as the engine keeps it until it is pushed or released."""

    batch: ShardedBatch
    fed: float
    """``time.monotonic()`` when it was fed: it expires ``batch_ttl`` later."""
    parts: list[_Part]
    """Its shards, found once: a batch is pinned, looked up and pushed."""
    nbytes: int
    """What it counts against ``max_pending_mb``."""


def _shards(name: str, table: EmbeddingTable, batch: ShardedBatch) -> list[_Part]:
    """Every shard of variable ``name``'s batch, as parts."""
    return [_Part(name, table, batch, shard, size) for shard, size in enumerate(batch.shard_sizes)]


_Done = tuple[str, NDArray[np.float32], float, NDArray[np.int64] | None]
"""A part's name, pool, share of kernel seconds, and its batch's bag offsets if unpooled."""


def _lookup_parts(parts: list[_Part], into: LookupTarget | None = None) -> list[_Done]:
    """Task body: pool every part in one grouped call (a variable of one shard straight into
    its block of ``into``); each part's share of the call's time for its variable."""
    start = time.perf_counter()
    pooled = pool_shards([_pool_target(part, into) for part in parts])
    shares = _shares(parts, time.perf_counter() - start)
    done = zip(parts, pooled, shares, strict=True)
    return [(part.name, block, share, part.batch.bags) for part, block, share in done]


def _pool_target(part: _Part, into: LookupTarget | None) -> PoolPart:
    """Where a part pools to: its variable's block of ``into`` if it is the variable's only
    shard, else an array of its own, summed with the other shards' when collected."""
    if into is not None and part.batch.num_shards == 1 and part.batch.bags is None:
        return (part.table, part.batch, part.shard, into.matrix, into.columns[part.name])
    out = np.empty((part.batch.batch_size, part.table.dim), dtype=np.float32)
    return (part.table, part.batch, part.shard, out, 0)


def _shares(parts: list[_Part], seconds: float) -> list[float]:
    """A grouped call's time split among its parts by their signs: what each variable is
    charged in :attr:`PsEngine.kernel_seconds` (its kernels' work grows with its signs)."""
    total = sum(part.signs for part in parts)
    if not total:
        return [seconds / len(parts)] * len(parts)
    return [seconds * part.signs / total for part in parts]


def _pin_parts(parts: list[_Part]) -> list[tuple[str, float]]:
    """Task body: map and pin every part's rows (a batch just fed) in one grouped call."""
    return _shared(parts, lambda: pin_shards([(p.table, p.batch, p.shard) for p in parts]))


def _push_parts(
    parts: list[_Part], grads: Mapping[str, NDArray[np.float32]]
) -> list[tuple[str, float]]:
    """Task body: apply every part's gradient in one grouped call."""
    return _shared(
        parts, lambda: push_shards([(p.table, p.batch, p.shard, grads[p.name]) for p in parts])
    )


def _shared(parts: list[_Part], call: Callable[[], object]) -> list[tuple[str, float]]:
    """Run ``call``, one grouped call for every part; each part's share of its time."""
    start = time.perf_counter()
    call()
    shares = _shares(parts, time.perf_counter() - start)
    return [(part.name, share) for part, share in zip(parts, shares, strict=True)]


def _collect(tasks: list[list[_Done]], into: LookupTarget | None = None) -> dict[str, Pooled]:
    """Sum each variable's partial pools and kernel times over the tasks that held them (into
    its block of ``into``, where given: a variable of one shard is there already; an unpooled
    variable has no block and is answered with its offsets)."""
    partials: dict[str, list[NDArray[np.float32]]] = {}
    seconds: dict[str, float] = {}
    bags: dict[str, NDArray[np.int64] | None] = {}
    for task in tasks:
        for name, part, elapsed, offsets in task:
            partials.setdefault(name, []).append(part)
            seconds[name] = seconds.get(name, 0.0) + elapsed
            bags[name] = offsets
    return {
        name: Pooled(
            _summed(name, parts, None if bags[name] is not None else into),
            seconds[name],
            bags[name],
        )
        for name, parts in partials.items()
    }


def _summed(
    name: str, parts: list[NDArray[np.float32]], into: LookupTarget | None
) -> NDArray[np.float32]:
    """The sum of one variable's shard pools, added into the first (fresh arrays) or into the
    variable's block of ``into``."""
    if len(parts) == 1:
        return parts[0]
    total = parts[0] if into is None else into.block(name, parts[0].shape[1])
    np.add(parts[0], parts[1], out=total)
    for part in parts[2:]:
        total += part
    return total


_PUSHED_REMEMBERED = 1 << 16
"""Pushed (batch, variable) pairs remembered for ALREADY_EXISTS: minutes of training."""


def _nbytes(batch: ShardedBatch) -> int:
    extras = (batch.weights, batch.scales, batch.bags)
    return int(batch.signs.nbytes + batch.shard_offsets.nbytes) + sum(
        int(extra.nbytes) for extra in extras if extra is not None
    )
