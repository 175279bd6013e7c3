"""``sniper bench store``: the embedding store against torch and against a Python dict.

Shape: the ``seed_ctr`` workload (dim 16, zipf signs, batch 1024); the table is pre-filled with
2M rows. Three cases: a small variable (about 4k signs per batch), the huge one (270k) and the
whole 76-variable batch (719k signs, pooled per example and variable). sniper splits each batch
over 2 shards run on 2 threads (the kernels release the GIL), except the small variable, which
has one shard as on a ps; torch gets the same thread count.

Peers, each run on the same batches in the same process:

- torch ``EmbeddingBag(mode="sum")`` on rows already mapped to dense ids: it does no hashing,
  so it bounds what a gather-and-sum can reach. Target: sniper lookup >= 0.5x of it.
- the same peer against sniper's lookup of a batch already fed: its rows were mapped and
  pinned when it arrived (a ps's FeedSample), so what the trainer waits for is a gather and
  pool over mapped rows, the work the peer does. Target >= 0.8x (issue 15). And the whole
  store work of such a batch (map and pin at feed, lookup, push) against the peer's training
  step, beside lookup + push mapped at lookup: what mapping at feed costs in total.
- torch ``EmbeddingBag(sparse=True)`` forward + backward + ``torch.optim.Adagrad`` step,
  against sniper ``lookup`` + ``push_grad`` with Adagrad. Target >= 5x.
- a dict-based store (:mod:`sniper._bench._dict_store`). Target >= 20x.

``--peer torchrec`` replaces the two torch rows with TorchRec's ``FusedEmbeddingBagCollection``
(:mod:`sniper._bench._store_torchrec`, run in TorchRec's own environment on the same batches):
its forward against sniper's lookup (target >= 0.5x: like the EmbeddingBag it is given ready
row ids, ``sign % rows``, and does no hashing), and its forward + backward with Adagrad fused
into the backward against sniper's lookup + ``push_grad`` (target >= 1.5x, issue 15's end to
end target against TorchRec: the dense model costs both the same, so the embeddings must be at
least as far ahead as the whole step).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from sniper._bench._dict_store import DictAdagradTable
from sniper._bench._init import print_initial_values
from sniper._bench._report import Comparison, PeerMissing, median_seconds, print_comparisons
from sniper._bench._store_torchrec import torchrec_seconds
from sniper._bench._torch_peer import TorchBag
from sniper._bench._torchrec_peer import torchrec_python
from sniper.data import VariableSpec, Workload, ZipfSampler, signs_of_ranks
from sniper.store import Adagrad, EmbeddingTable, ShardedBatch, TableExport

_T = TypeVar("_T")
VOCABULARY = 4_000_000
LR = 0.01
SMALL_SIGNS = 4096
WARMUP_SIGNS = 1_000_000
"""Signs each side processes unmeasured before it is timed (and at least every batch once).

A ps runs the same lookups millions of times; timing from a cold start measured page and
cache warm-up instead: the small variable's first 30 lookups took up to 2.5x the steady time.
"""


@dataclass(frozen=True)
class Case:
    """Batches of one bench case, with their torch ids precomputed."""

    name: str
    variables: tuple[VariableSpec, ...]
    """The case's variables, in the order of every batch (variable by variable, each with one
    bag per example)."""
    signs: list[NDArray[np.uint64]]
    offsets: list[NDArray[np.int64]]
    prefill: NDArray[np.uint64]

    @property
    def signs_per_batch(self) -> int:
        return int(np.mean([len(s) for s in self.signs]))

    @property
    def bags(self) -> int:
        """Bags (examples) per variable of a batch."""
        return (len(self.offsets[0]) - 1) // len(self.variables)

    @property
    def warmup_calls(self) -> int:
        """Unmeasured calls before timing: every batch once, and :data:`WARMUP_SIGNS` signs."""
        return max(len(self.signs), WARMUP_SIGNS // max(1, self.signs_per_batch))

    def steady_seconds(self, call: Callable[[int], object], repeats: int) -> float:
        """Median time of ``call(batch_index)`` once warm (see :data:`WARMUP_SIGNS`)."""
        return median_seconds(call, repeats, warmup=self.warmup_calls)

    def grads(self, dim: int) -> list[NDArray[np.float32]]:
        """The gradient of every batch's pooled output, the same for sniper and each peer."""
        rng = np.random.default_rng(2)
        return [rng.normal(0, 1, (len(o) - 1, dim)).astype(np.float32) for o in self.offsets]


def _ragged(
    sampler: ZipfSampler, field: int, n: int, bags: int, rng: np.random.Generator
) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
    counts = rng.multinomial(n, np.full(bags, 1.0 / bags))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return sampler.signs(n, field), offsets


def build_cases(workload: Workload, batches: int, prefill_rows: int, seed: int) -> list[Case]:
    """The three cases; each variable draws zipf ranks from its own field's sign space."""
    rng = np.random.default_rng(seed)
    sampler = ZipfSampler(VOCABULARY, workload.zipf_exponent, seed)
    bags = workload.batch_size
    small = min(workload.variables, key=lambda v: abs(v.signs_per_batch - SMALL_SIGNS))
    cases = []
    for name, variables in (
        (f"small ({small.name})", [small]),
        (f"huge ({workload.largest().name})", [workload.largest()]),
        ("whole batch (76 variables)", list(workload.variables)),
    ):
        total = sum(v.signs_per_batch for v in variables)
        prefill = np.concatenate(
            [
                signs_of_ranks(
                    np.arange(max(1, prefill_rows * v.signs_per_batch // total)), v.field
                )
                for v in variables
            ]
        )
        signs, offsets = [], []
        for _ in range(batches):
            parts = [_ragged(sampler, v.field, v.signs_per_batch, bags, rng) for v in variables]
            signs.append(np.concatenate([p[0] for p in parts]))
            shifts = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
            offsets.append(
                np.concatenate(
                    [[0]] + [p[1][1:] + shift for p, shift in zip(parts, shifts, strict=True)]
                ).astype(np.int64)
            )
        cases.append(Case(name, tuple(variables), signs, offsets, prefill))
    return cases


class ShardedRunner:
    """Runs a table's shard tasks on a thread pool, the way a ps scheduler does.

    A batch below ``INLINE_SIGNS`` signs runs its shards in the caller: handing ~4k signs
    (tens of microseconds of kernel time) to another thread costs about as much as the work.
    """

    INLINE_SIGNS = 32_768

    def __init__(self, table: EmbeddingTable, pool: ThreadPoolExecutor) -> None:
        self.table = table
        self.pool = pool

    def _each_shard(self, batch: ShardedBatch, task: Callable[[int], _T]) -> list[_T]:
        shards = range(batch.num_shards)
        if len(batch.signs) < self.INLINE_SIGNS:
            return [task(s) for s in shards]
        return list(self.pool.map(task, shards))

    def lookup(self, batch: ShardedBatch) -> NDArray[np.float32]:
        parts = self._each_shard(batch, lambda s: self.table.lookup_shard(batch, s))
        out = parts[0]
        for part in parts[1:]:
            out += part
        return out

    def push(self, batch: ShardedBatch, grads: NDArray[np.float32]) -> None:
        self._each_shard(batch, lambda s: self.table.push_grad_shard(batch, s, grads))

    def pin(self, batch: ShardedBatch) -> None:
        """Map and pin a batch's rows, as a ps does when FeedSample arrives."""
        self._each_shard(batch, lambda s: self.table.pin_shard(batch, s))


def shards_for(signs_per_batch: int, threads: int) -> int:
    """One shard per thread, but a single one below ``INLINE_SIGNS`` signs per batch.

    A ps gives a small variable one shard (see ``sniper.roles``' task packing): splitting 4k
    signs costs more than the parallelism it would allow, and its shards would run inline.
    """
    return threads if signs_per_batch >= ShardedRunner.INLINE_SIGNS else 1


def _fresh_table(case: Case, dim: int, threads: int) -> EmbeddingTable:
    table = EmbeddingTable(
        dim,
        capacity=2 * len(case.prefill) + 1_000_000,
        optimizer=Adagrad(lr=LR),
        num_shards=shards_for(case.signs_per_batch, threads),
    )
    rng = np.random.default_rng(1)
    n = len(case.prefill)
    table.import_(
        TableExport(
            case.prefill,
            rng.normal(0, 0.01, (n, dim)).astype(np.float32),
            np.zeros((n, 1, dim), np.float32),
            np.zeros(n, np.int32),
        )
    )
    return table


def _torch_ids(case: Case) -> tuple[NDArray[np.uint64], list[NDArray[np.int64]]]:
    """Dense ids for torch: every distinct sign of the case, mapped before timing."""
    universe = np.unique(np.concatenate([case.prefill, *case.signs]))
    return universe, [np.searchsorted(universe, s).astype(np.int64) for s in case.signs]


PeerSeconds = Callable[[Case, list[NDArray[np.float32]], int, int], tuple[float, float]]
"""A library peer's median lookup and lookup+update seconds on a case's batches, given the
gradients, the threads and the measured calls per side."""


@dataclass(frozen=True)
class LibraryPeer:
    """A library a user would pick instead of sniper's store, as ``--peer`` names it."""

    lookup: str
    """What sniper's lookup is compared with, in the row's name."""
    train: str
    """What sniper's lookup + push is compared with."""
    lookup_target: float
    train_target: float
    seconds: PeerSeconds
    check: Callable[[], object] | None
    """Raises :class:`PeerMissing` before anything is measured: a peer named on purpose that
    is missing stops the bench. None for torch, the default, which is optional: without it
    the bench prints a note and still measures the dict store."""


def _torch_seconds(
    case: Case, grads: list[NDArray[np.float32]], threads: int, repeats: int
) -> tuple[float, float]:
    universe, ids = _torch_ids(case)
    dim = grads[0].shape[1]
    weights = np.random.default_rng(1).normal(0, 0.01, (len(universe), dim)).astype(np.float32)
    bag = TorchBag(weights, threads, LR)
    tensors = [bag.tensors(i, o) for i, o in zip(ids, case.offsets, strict=True)]
    torch_grads = [bag.torch.from_numpy(g) for g in grads]
    n = len(tensors)
    lookup: Callable[[int], object] = lambda i: bag.lookup(*tensors[i % n])  # noqa: E731
    return case.steady_seconds(lookup, repeats), case.steady_seconds(
        lambda i: bag.train_step(*tensors[i % n], torch_grads[i % n]), repeats
    )


def _torchrec_seconds(
    case: Case, grads: list[NDArray[np.float32]], threads: int, repeats: int
) -> tuple[float, float]:
    return torchrec_seconds(
        case, grads, Adagrad(lr=LR), threads, repeats=repeats, warmup=case.warmup_calls
    )


LIBRARY_PEERS = {
    "torch": LibraryPeer(
        "EmbeddingBag (pre-mapped ids)", "EmbeddingBag+Adagrad", 0.5, 5.0, _torch_seconds, None
    ),
    "torchrec": LibraryPeer(
        "TorchRec (sign % rows)",
        "TorchRec, Adagrad fused",
        0.5,
        1.5,
        _torchrec_seconds,
        torchrec_python,
    ),
}


def run_case(
    case: Case,
    dim: int,
    threads: int,
    repeats: int,
    dict_repeats: int,
    pool: ThreadPoolExecutor,
    peer: LibraryPeer,
) -> tuple[list[Comparison], str | None]:
    """Measure one case; returns its comparisons and a note if an optional peer was missing."""
    n_batches = len(case.signs)
    grads = case.grads(dim)
    runner = ShardedRunner(_fresh_table(case, dim, threads), pool)

    def sniper_lookup(i: int) -> object:
        k = i % n_batches
        return runner.lookup(runner.table.split(case.signs[k], case.offsets[k]))

    def sniper_train(i: int, *, fed: bool = False) -> None:
        """One step of the store: split, (map and pin, as at FeedSample,) lookup, push."""
        k = i % n_batches
        batch = runner.table.split(case.signs[k], case.offsets[k])
        if fed:
            runner.pin(batch)
        runner.lookup(batch)
        runner.push(batch, grads[k])

    sniper_lookup_s = case.steady_seconds(sniper_lookup, repeats)
    sniper_train_s = case.steady_seconds(sniper_train, repeats)
    sniper_fed_s = _fed_lookup_seconds(case, runner, repeats)
    sniper_fed_train_s = case.steady_seconds(lambda i: sniper_train(i, fed=True), repeats)
    results = []
    note = None
    try:
        peer_lookup_s, peer_train_s = peer.seconds(case, grads, threads, repeats)
        results += [
            Comparison(
                f"{case.name}: lookup vs {peer.lookup}",
                case.signs_per_batch,
                sniper_lookup_s,
                peer_lookup_s,
                peer.lookup_target,
            ),
            Comparison(
                f"{case.name}: lookup of a fed batch vs {peer.lookup}",
                case.signs_per_batch,
                sniper_fed_s,
                peer_lookup_s,
                FED_LOOKUP_TARGET,
            ),
            Comparison(
                f"{case.name}: lookup+push vs {peer.train}",
                case.signs_per_batch,
                sniper_train_s,
                peer_train_s,
                peer.train_target,
            ),
            Comparison(
                f"{case.name}: feed+lookup+push vs {peer.train}",
                case.signs_per_batch,
                sniper_fed_train_s,
                peer_train_s,
                peer.train_target,
            ),
        ]
    except PeerMissing as exc:
        if peer.check is not None:
            raise
        note = str(exc)
    results.append(_dict_comparison(case, dim, grads, dict_repeats, sniper_train_s))
    return results, note


FED_LOOKUP_TARGET = 0.8
"""Issue 15's target for a lookup as the trainer waits for it, the rows mapped at FeedSample."""


def _fed_lookup_seconds(case: Case, runner: ShardedRunner, repeats: int) -> float:
    """Median lookup of batches whose rows were mapped when they were fed (a gather and pool,
    what the trainer waits for on a ps with ``map_rows = "feed"``); the mapping itself is
    FeedSample's work, done before the trainer asks, so it is not timed here."""
    fed = [runner.table.split(s, o) for s, o in zip(case.signs, case.offsets, strict=True)]
    for batch in fed:
        runner.pin(batch)
    try:
        return case.steady_seconds(lambda i: runner.lookup(fed[i % len(fed)]), repeats)
    finally:
        for batch in fed:
            runner.table.unpin(batch)


def _dict_comparison(
    case: Case,
    dim: int,
    grads: list[NDArray[np.float32]],
    repeats: int,
    sniper_train_s: float,
) -> Comparison:
    n_batches = len(case.signs)
    dict_table = DictAdagradTable(dim, capacity=len(case.prefill) + 2 * sum(map(len, case.signs)))
    dict_table.fill(case.prefill, np.zeros((len(case.prefill), dim), np.float32))

    def dict_train(i: int) -> None:
        k = i % n_batches
        dict_table.lookup_pool(case.signs[k], case.offsets[k])
        dict_table.push_grad(case.signs[k], case.offsets[k], grads[k])

    dict_s = case.steady_seconds(dict_train, repeats)
    return Comparison(
        f"{case.name}: lookup+push vs dict", case.signs_per_batch, sniper_train_s, dict_s, 20.0
    )


def run(
    workload: Workload,
    *,
    batches: int,
    repeats: int,
    dict_repeats: int,
    threads: int,
    prefill_rows: int,
    seed: int,
    peer: str = "torch",
) -> list[Comparison]:
    """Run every case and print the table; returns the comparisons."""
    library = LIBRARY_PEERS.get(peer)
    if library is None:
        raise LookupError(f"unknown peer {peer!r}; valid peers: {', '.join(LIBRARY_PEERS)}")
    if library.check is not None:
        library.check()
    dim = workload.embedding_dim
    print(
        f"sniper bench store: workload {workload.name}, dim {dim}, "
        f"table pre-filled with {prefill_rows:,} rows, zipf {workload.zipf_exponent}, "
        f"{threads} shards on {threads} threads, one for the small variable "
        f"({peer}: {threads} threads), "
        f"median of {repeats} batches (dict peer: {dict_repeats})"
    )
    cases = build_cases(workload, batches, prefill_rows, seed)
    results: list[Comparison] = []
    notes = set()
    with ThreadPoolExecutor(threads, thread_name_prefix="sniper-bench") as pool:
        for case in cases:
            found, note = run_case(case, dim, threads, repeats, dict_repeats, pool, library)
            results += found
            if note:
                notes.add(note)
    print_comparisons("signs per batch; ratio = peer time / sniper time", "peer", "signs", results)
    print_initial_values(dim, repeats)
    for note in sorted(notes):
        print(f"\nnote: {note}")
    return results
