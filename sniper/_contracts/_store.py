"""An embedding store checked against a naive reference table, on hypothesis-generated batches.

:class:`ReferenceTable` models the documented semantics of ``EmbeddingTable`` in the plainest
way: a dict of rows, CLOCK eviction per shard, admission by exact sighting counts, per-sign
initial values, and each optimizer written out in float32 numpy, one row at a time.
:func:`check_store_matches_reference` drives a store and the reference with the same generated
batches and compares lookups, rows and counters after every step. It takes a factory, called
with ``EmbeddingTable``'s constructor arguments, so that another store (or the table in another
lock mode) is checked the same way::

    check_store_matches_reference(functools.partial(EmbeddingTable, lock="none"))

The checks are plain functions; hypothesis (a development dependency) is imported when one
runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from sniper.hashing import shard_of_sign
from sniper.store import (
    SGD,
    Adagrad,
    Adam,
    Admission,
    EmbeddingStore,
    EmbeddingTable,
    Ftrl,
    Initializer,
    Optimizer,
    uniform,
)

from ._common import ContractViolation, require, run_property

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "REGIMES",
    "Batch",
    "OpenStore",
    "ReferenceTable",
    "check_export_import_round_trip",
    "check_store_matches_reference",
    "ragged_batches",
]

T = TypeVar("T")

Batch = tuple[NDArray[np.uint64], NDArray[np.int64]]
"""A ragged batch: signs, and offsets where example ``b`` is ``signs[offsets[b]:offsets[b+1]]``."""

DIM: Final = 4
"""Row width of every table the checks build: enough to catch a mixed-up column."""

EXAMPLES: Final = 60
"""Generated cases per regime, by default."""

REGIMES: Final = ("lookup", "train", "eviction", "admission")
"""What :func:`check_store_matches_reference` exercises; see its docstring."""


class OpenStore(Protocol):
    """Builds the store under test from ``EmbeddingTable``'s constructor arguments."""

    def __call__(
        self,
        dim: int,
        *,
        capacity: int,
        optimizer: Optimizer,
        initializer: Initializer | None = None,
        num_shards: int = 1,
        admission: Admission | None = None,
        seed: int = 0,
    ) -> EmbeddingStore: ...


# -- the reference -----------------------------------------------------------------------------


@dataclass
class _Shard:
    capacity: int
    order: list[int] = field(default_factory=list)  # row slot -> sign (allocation order)
    referenced: dict[int, bool] = field(default_factory=dict)
    hand: int = 0

    def evict(self, pinned: set[int]) -> int | None:
        """Return the slot freed by one CLOCK sweep, or None when every row is pinned."""
        for _ in range(2 * self.capacity + 1):
            sign = self.order[self.hand]
            position = self.hand
            self.hand = (self.hand + 1) % self.capacity
            if sign in pinned:
                continue
            if self.referenced[sign]:
                self.referenced[sign] = False
                continue
            del self.referenced[sign]
            return position
        return None


class ReferenceTable:
    """A naive embedding table with ``EmbeddingTable``'s semantics and constructor arguments.

    Initial values come from a one-row ``EmbeddingTable`` with the same initializer and seed:
    they are a pure function of (seed, sign), checked on their own by the initializer tests.
    """

    def __init__(
        self,
        dim: int,
        *,
        capacity: int,
        optimizer: Optimizer,
        initializer: Initializer | None = None,
        num_shards: int = 1,
        admission: Admission | None = None,
        seed: int = 0,
    ) -> None:
        self.dim = dim
        self.capacity = capacity
        self.optimizer = optimizer
        self.initializer = initializer
        self.seed = seed
        self.rows: dict[int, NDArray[np.float32]] = {}
        """Every held row by sign."""
        self.state: dict[int, NDArray[np.float32]] = {}
        self.steps: dict[int, int] = {}
        self.sightings: dict[int, int] = {}
        caps = [capacity // num_shards] * num_shards
        for i in range(capacity % num_shards):
            caps[i] += 1
        self.shards = [_Shard(c) for c in caps]
        self.min_count = admission.min_count if admission else 0
        self.dropped = 0
        """Gradients discarded because their sign had no row."""

    def _fresh_initial(self, sign: int) -> NDArray[np.float32]:
        fresh = EmbeddingTable(
            self.dim,
            capacity=1,
            optimizer=SGD(1.0),
            initializer=self.initializer,
            seed=self.seed,
        )
        row: NDArray[np.float32] = fresh.get(np.array([sign], dtype=np.uint64))[0]
        return row

    def _row(self, sign: int, count_sighting: bool, pinned: set[int]) -> bool:
        """Make sure ``sign`` has a row if admission allows; return whether it has one."""
        shard = self.shards[shard_of_sign(sign, len(self.shards))]
        if sign in self.rows:
            shard.referenced[sign] = True
            pinned.add(sign)
            return True
        if self.min_count > 1:
            if count_sighting:
                self.sightings[sign] = self.sightings.get(sign, 0) + 1
            if self.sightings.get(sign, 0) < self.min_count:
                return False
        if len(shard.order) < shard.capacity:
            shard.order.append(sign)
        else:
            position = shard.evict(pinned)
            if position is None:
                raise ValueError(
                    "the reference ran out of rows: a batch holds more distinct signs than a "
                    "shard has rows, which the table refuses too; generate smaller batches"
                )
            victim = shard.order[position]
            del self.rows[victim], self.state[victim], self.steps[victim]
            shard.order[position] = sign
        self.rows[sign] = self._fresh_initial(sign).copy()
        self.state[sign] = np.tile(self.optimizer.state_init()[:, None], (1, self.dim))
        self.steps[sign] = 0
        shard.referenced[sign] = True
        pinned.add(sign)
        return True

    def _map_shardwise(self, signs: NDArray[np.uint64], count: bool) -> list[bool]:
        """Whether each position has a row, mapped shard by shard in the table's order.

        Admission is decided per sighting: within one batch, the sighting that reaches
        ``min_count`` gets the row, the ones before it read as zeros.
        """
        has_row = [False] * len(signs)
        by_shard: list[list[int]] = [[] for _ in self.shards]
        for position, s in enumerate(signs.tolist()):
            by_shard[shard_of_sign(s, len(self.shards))].append(position)
        for members in by_shard:
            pinned: set[int] = set()
            for position in members:
                has_row[position] = self._row(int(signs[position]), count, pinned)
        return has_row

    def lookup_pool(
        self, signs: NDArray[np.uint64], offsets: NDArray[np.int64]
    ) -> NDArray[np.float32]:
        """Each example's sum of rows, inserting (or counting a sighting of) absent signs."""
        has_row = self._map_shardwise(signs, True)
        out = np.zeros((len(offsets) - 1, self.dim), dtype=np.float32)
        for b in range(len(offsets) - 1):
            for position in range(offsets[b], offsets[b + 1]):
                if has_row[position]:
                    out[b] += self.rows[int(signs[position])]
        return out

    def push_grad(
        self, signs: NDArray[np.uint64], offsets: NDArray[np.int64], grads: NDArray[np.float32]
    ) -> None:
        """Sum each sign's gradients over the batch, then update its row once."""
        has_row = self._map_shardwise(signs, False)
        summed: dict[int, NDArray[np.float32]] = {}
        for b in range(len(offsets) - 1):
            for position in range(offsets[b], offsets[b + 1]):
                s = int(signs[position])
                if not has_row[position]:
                    self.dropped += 1
                    continue
                summed[s] = summed.get(s, np.zeros(self.dim, np.float32)) + grads[b]
        for s, g in summed.items():
            self._apply(s, g.astype(np.float32))

    def _apply(self, sign: int, g: NDArray[np.float32]) -> None:
        w, st, opt = self.rows[sign], self.state[sign], self.optimizer
        f32 = np.float32
        if isinstance(opt, SGD):
            w -= f32(opt.lr) * g
        elif isinstance(opt, Adagrad):
            st[0] += g * g
            w -= f32(opt.lr) * g / (np.sqrt(st[0]) + f32(opt.eps))
        elif isinstance(opt, Adam):
            self.steps[sign] += 1
            t = self.steps[sign]
            st[0] = f32(opt.beta1) * st[0] + (f32(1) - f32(opt.beta1)) * g
            st[1] = f32(opt.beta2) * st[1] + (f32(1) - f32(opt.beta2)) * g * g
            step_size = f32(opt.lr / (1 - opt.beta1**t))
            denom = np.sqrt(st[1]) / f32(math.sqrt(1 - opt.beta2**t)) + f32(opt.eps)
            w -= step_size * st[0] / denom
        elif isinstance(opt, Ftrl):
            for d in range(self.dim):
                gd, n_old = float(g[d]), float(st[1, d])
                n_new = n_old + gd * gd
                sigma = (math.sqrt(n_new) - math.sqrt(n_old)) / opt.alpha
                z = float(st[0, d]) + gd - sigma * float(w[d])
                st[0, d], st[1, d] = z, n_new
                w[d] = (
                    0.0
                    if abs(z) <= opt.l1
                    else (
                        (math.copysign(1.0, z) * opt.l1 - z)
                        / ((opt.beta + math.sqrt(n_new)) / opt.alpha + opt.l2)
                    )
                )
        else:
            raise TypeError(
                f"the reference table models SGD, Adagrad, Adam and Ftrl, not {opt!r}; "
                "check another optimizer against its own reference"
            )

    def held(self) -> set[int]:
        """The signs that have a row."""
        return set(self.rows)


# -- generated batches -------------------------------------------------------------------------


def ragged_batches(domain: int = 40, max_batch: int = 6, max_per: int = 6) -> SearchStrategy[Batch]:
    """Ragged batches whose signs repeat often (drawn from ``domain`` values), with empty
    examples allowed: up to ``max_batch`` examples of up to ``max_per`` signs each."""
    from hypothesis import strategies as st

    @st.composite
    def batches(draw: st.DrawFn) -> Batch:
        sizes = draw(st.lists(st.integers(0, max_per), min_size=1, max_size=max_batch))
        pool = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=domain, unique=True))
        signs = [draw(st.sampled_from(pool)) for _ in range(sum(sizes))]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return np.array(signs, dtype=np.uint64), offsets

    return batches()


def _optimizers() -> SearchStrategy[Optimizer]:
    from hypothesis import strategies as st

    return st.sampled_from(
        [
            SGD(lr=0.5),
            Adagrad(lr=0.3, initial_accumulator_value=0.1),
            Adam(lr=0.05),
            Ftrl(alpha=0.5, beta=1.0, l1=0.01, l2=0.1),
        ]
    )


def _grads_for(batch: Batch, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(len(batch[1]) - 1, DIM)).astype(np.float32)


# -- comparing a store with the reference ------------------------------------------------------


@contextmanager
def _explained(what: str) -> Iterator[None]:
    """Turn numpy's bare comparison failure into a violation that says what was compared."""
    try:
        yield
    except ContractViolation:
        raise
    except AssertionError as exc:
        raise ContractViolation(f"{what}:{exc}") from exc


def _assert_rows_match(store: EmbeddingStore, ref: ReferenceTable, step: int) -> None:
    held = sorted(ref.held())
    exported = sorted(store.export().signs.tolist())
    require(
        exported == held,
        f"after step {step}, the store holds rows for {exported} but the reference for {held}",
    )
    if held:
        got = store.get(np.array(held, dtype=np.uint64))
        want = np.stack([ref.rows[s] for s in held])
        with _explained(f"after step {step}, the store's rows differ from the reference's"):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def _step_both(
    store: EmbeddingStore,
    ref: ReferenceTable,
    batch: Batch,
    step: int,
    *,
    rtol: float,
    atol: float,
) -> None:
    """One training step on the store and the reference: equal lookups, then equal rows."""
    signs, offsets = batch
    with _explained(f"lookup_pool of step {step} differs from the reference"):
        np.testing.assert_allclose(
            store.lookup_pool(signs, offsets),
            ref.lookup_pool(signs, offsets),
            rtol=rtol,
            atol=atol,
        )
    grads = _grads_for(batch, step)
    store.push_grad(signs, offsets, grads)
    ref.push_grad(signs, offsets, grads)
    _assert_rows_match(store, ref, step)


@dataclass(frozen=True)
class _Case:
    """One generated case: the tables' arguments and the batches to run through both."""

    steps: Sequence[Batch]
    capacity: int = 1000
    optimizer: Optimizer = field(default_factory=lambda: SGD(0.1))
    num_shards: int = 1
    initializer: Initializer | None = None
    admission: Admission | None = None
    seed: int = 0

    def open(self, open_store: OpenStore) -> tuple[EmbeddingStore, ReferenceTable]:
        """The store under test and the reference, built from the same arguments."""
        return self._build(open_store), self._build(ReferenceTable)

    def _build(self, factory: Callable[..., T]) -> T:
        return factory(
            DIM,
            capacity=self.capacity,
            optimizer=self.optimizer,
            num_shards=self.num_shards,
            initializer=self.initializer,
            admission=self.admission,
            seed=self.seed,
        )


def _lookup_cases() -> SearchStrategy[_Case]:
    from hypothesis import strategies as st

    return st.builds(
        _Case,
        steps=st.lists(ragged_batches(), min_size=1, max_size=4),
        num_shards=st.integers(1, 4),
        seed=st.integers(0, 2**64 - 1),
        initializer=st.just(uniform(-1, 1)),
    )


def _run_lookups(open_store: OpenStore, case: _Case) -> None:
    store, ref = case.open(open_store)
    for step, (signs, offsets) in enumerate(case.steps):
        with _explained(f"lookup_pool of step {step} differs from the reference"):
            np.testing.assert_allclose(
                store.lookup_pool(signs, offsets),
                ref.lookup_pool(signs, offsets),
                rtol=1e-5,
                atol=1e-6,
            )
    require(
        len(store) == len(ref.held()),
        f"the store holds {len(store)} rows, the reference {len(ref.held())}",
    )


def _train_cases() -> SearchStrategy[_Case]:
    from hypothesis import strategies as st

    return st.builds(
        _Case,
        steps=st.lists(ragged_batches(), min_size=1, max_size=4),
        optimizer=_optimizers(),
        num_shards=st.integers(1, 3),
    )


def _run_training(open_store: OpenStore, case: _Case) -> None:
    store, ref = case.open(open_store)
    for step, batch in enumerate(case.steps):
        _step_both(store, ref, batch, step, rtol=2e-5, atol=2e-6)


def _eviction_cases() -> SearchStrategy[_Case]:
    from hypothesis import strategies as st

    return st.builds(
        _Case,
        steps=st.lists(ragged_batches(domain=30, max_batch=3, max_per=4), min_size=1, max_size=12),
        num_shards=st.integers(1, 2),
        capacity=st.integers(8, 14),
        optimizer=st.just(Adagrad(0.1)),
    )


def _run_eviction(open_store: OpenStore, case: _Case) -> None:
    store, ref = case.open(open_store)
    for step, batch in enumerate(case.steps):
        if len(np.unique(batch[0])) > case.capacity // case.num_shards:
            continue  # more distinct signs than a shard holds: refused, not evicted
        _step_both(store, ref, batch, step, rtol=2e-5, atol=2e-6)
        require(
            len(store) <= case.capacity,
            f"after step {step} the store holds {len(store)} rows, over its capacity "
            f"{case.capacity}",
        )


def _admission_cases() -> SearchStrategy[_Case]:
    from hypothesis import strategies as st

    return st.builds(
        _Case,
        steps=st.lists(ragged_batches(domain=10), min_size=1, max_size=6),
        optimizer=st.just(SGD(0.5)),
        # A wide sketch, so that its counts are exact for the few signs drawn here, like the
        # reference's.
        admission=st.builds(Admission, st.integers(2, 4), width=st.just(1 << 16)),
    )


def _run_admission(open_store: OpenStore, case: _Case) -> None:
    store, ref = case.open(open_store)
    for step, batch in enumerate(case.steps):
        _step_both(store, ref, batch, step, rtol=1e-5, atol=1e-6)
    dropped = store.statistics().dropped_gradients
    require(
        dropped == ref.dropped,
        f"the store dropped {dropped} gradients of signs without a row, the reference "
        f"{ref.dropped}",
    )


_REGIME_CHECKS: Final[
    dict[str, tuple[Callable[[], SearchStrategy[_Case]], Callable[[OpenStore, _Case], None]]]
] = {
    "lookup": (_lookup_cases, _run_lookups),
    "train": (_train_cases, _run_training),
    "eviction": (_eviction_cases, _run_eviction),
    "admission": (_admission_cases, _run_admission),
}


def check_store_matches_reference(
    open_store: OpenStore = EmbeddingTable,
    *,
    regimes: Sequence[str] = REGIMES,
    examples: int = EXAMPLES,
) -> None:
    """Drive the store from ``open_store`` and a :class:`ReferenceTable` alike; compare.

    Each regime is its own hypothesis run of ``examples`` generated cases, every case on a
    fresh store and reference built from the same arguments:

    ``lookup``
        Lookups only, 1 to 4 shards, any seed, ``uniform(-1, 1)`` initial values: equal pooled
        sums, and as many rows held.
    ``train``
        Lookup then push of every batch with SGD, Adagrad, Adam or FTRL on 1 to 3 shards: equal
        lookups, then the same rows holding the same values.
    ``eviction``
        Up to 12 steps into a table of 8 to 14 rows on 1 or 2 shards: CLOCK evicts the same
        rows as the reference's, and the table never holds more than its capacity.
    ``admission``
        Signs get a row on their 2nd to 4th sighting: the same rows, and as many dropped
        gradients.

    Raises :class:`ContractViolation` (after hypothesis has shrunk the case) on a difference.
    """
    unknown = [regime for regime in regimes if regime not in _REGIME_CHECKS]
    if unknown:
        raise ValueError(f"unknown regimes {unknown}; choose from {', '.join(REGIMES)}")
    for regime in regimes:
        cases, run = _REGIME_CHECKS[regime]
        run_property(cases(), examples, functools.partial(run, open_store))


def check_export_import_round_trip(
    open_store: OpenStore = EmbeddingTable, *, examples: int = EXAMPLES
) -> None:
    """``import_(export())`` into a store with another shard count gives back the same rows.

    Signs, weights, optimizer state and step counts survive the round trip exactly, and both
    stores then pool the same values (to float32 rounding: sums run shard by shard).
    """
    from hypothesis import strategies as st

    cases = st.tuples(
        st.lists(ragged_batches(), min_size=1, max_size=3),
        _optimizers(),
        st.integers(1, 3),
        st.integers(1, 3),
    )
    run_property(cases, examples, lambda case: _round_trip(open_store, *case))


def _round_trip(
    open_store: OpenStore,
    steps: Sequence[Batch],
    optimizer: Optimizer,
    shards_a: int,
    shards_b: int,
) -> None:
    a = open_store(DIM, capacity=500, optimizer=optimizer, num_shards=shards_a)
    for step, (signs, offsets) in enumerate(steps):
        a.lookup_pool(signs, offsets)
        a.push_grad(signs, offsets, _grads_for((signs, offsets), step))
    exported = a.export()
    b = open_store(DIM, capacity=500, optimizer=optimizer, num_shards=shards_b)
    b.import_(exported)
    again = b.export()
    order_a, order_b = np.argsort(exported.signs), np.argsort(again.signs)
    for name in ("signs", "weights", "state", "steps"):
        with _explained(f"{name} changed in an export/import round trip"):
            np.testing.assert_array_equal(
                getattr(exported, name)[order_a], getattr(again, name)[order_b]
            )
    signs, offsets = steps[-1]
    # Pooling sums shard by shard, so other shard counts round differently: a few float32 ulps
    # of the summands (magnitude up to ~10 here), not of a result that may cancel to ~0.
    with _explained("an imported store pools differently from the one it was exported from"):
        np.testing.assert_allclose(
            a.lookup_pool(signs, offsets), b.lookup_pool(signs, offsets), rtol=1e-5, atol=1e-5
        )
