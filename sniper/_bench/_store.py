"""``sniper bench store``: the embedding store against torch and against a Python dict.

Shape: the ``seed_ctr`` workload (dim 16, zipf signs, batch 1024); the table is pre-filled with
2M rows. Three cases: a small variable (about 4k signs per batch), the huge one (270k) and the
whole 76-variable batch (719k signs, pooled per example and variable). sniper splits each batch
over 2 shards run on 2 threads (the kernels release the GIL), except the small variable, which
has one shard as on a ps; torch gets the same thread count.

Peers, each run on the same batches in the same process:

- torch ``EmbeddingBag(mode="sum")`` on rows already mapped to dense ids: it does no hashing,
  so it bounds what a gather-and-sum can reach. Target: sniper lookup >= 0.5x of it.
- torch ``EmbeddingBag(sparse=True)`` forward + backward + ``torch.optim.Adagrad`` step,
  against sniper ``lookup`` + ``push_grad`` with Adagrad. Target >= 5x.
- a dict-based store (:mod:`sniper._bench._dict_store`). Target >= 20x.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from sniper._bench._dict_store import DictAdagradTable
from sniper._bench._report import Comparison, PeerMissing, median_seconds, print_comparisons
from sniper._bench._torch_peer import TorchBag
from sniper.data._workload import Workload
from sniper.data._zipf import ZipfSampler, signs_of_ranks
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
    signs: list[NDArray[np.uint64]]
    offsets: list[NDArray[np.int64]]
    prefill: NDArray[np.uint64]

    @property
    def signs_per_batch(self) -> int:
        return int(np.mean([len(s) for s in self.signs]))

    def steady_seconds(self, call: Callable[[int], object], repeats: int) -> float:
        """Median time of ``call(batch_index)`` once warm (see :data:`WARMUP_SIGNS`)."""
        warmup = max(len(self.signs), WARMUP_SIGNS // max(1, self.signs_per_batch))
        return median_seconds(call, repeats, warmup=warmup)


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
        cases.append(Case(name, signs, offsets, prefill))
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


def run_case(
    case: Case, dim: int, threads: int, repeats: int, dict_repeats: int, pool: ThreadPoolExecutor
) -> tuple[list[Comparison], str | None]:
    """Measure one case; returns its comparisons and a note if torch was missing."""
    n_batches = len(case.signs)
    rng = np.random.default_rng(2)
    grads = [rng.normal(0, 1, (len(o) - 1, dim)).astype(np.float32) for o in case.offsets]
    runner = ShardedRunner(_fresh_table(case, dim, threads), pool)

    def sniper_lookup(i: int) -> object:
        k = i % n_batches
        return runner.lookup(runner.table.split(case.signs[k], case.offsets[k]))

    def sniper_train(i: int) -> None:
        k = i % n_batches
        batch = runner.table.split(case.signs[k], case.offsets[k])
        runner.lookup(batch)
        runner.push(batch, grads[k])

    sniper_lookup_s = case.steady_seconds(sniper_lookup, repeats)
    sniper_train_s = case.steady_seconds(sniper_train, repeats)
    results = []
    note = None
    try:
        results += _torch_comparisons(
            case, dim, threads, repeats, grads, sniper_lookup_s, sniper_train_s
        )
    except PeerMissing as exc:
        note = str(exc)
    dict_table = DictAdagradTable(dim, capacity=len(case.prefill) + 2 * sum(map(len, case.signs)))
    dict_table.fill(case.prefill, np.zeros((len(case.prefill), dim), np.float32))

    def dict_train(i: int) -> None:
        k = i % n_batches
        dict_table.lookup_pool(case.signs[k], case.offsets[k])
        dict_table.push_grad(case.signs[k], case.offsets[k], grads[k])

    dict_s = case.steady_seconds(dict_train, dict_repeats)
    results.append(
        Comparison(
            f"{case.name}: lookup+push vs dict", case.signs_per_batch, sniper_train_s, dict_s, 20.0
        )
    )
    return results, note


def _torch_comparisons(
    case: Case,
    dim: int,
    threads: int,
    repeats: int,
    grads: list[NDArray[np.float32]],
    sniper_lookup_s: float,
    sniper_train_s: float,
) -> list[Comparison]:
    universe, ids = _torch_ids(case)
    weights = np.random.default_rng(1).normal(0, 0.01, (len(universe), dim)).astype(np.float32)
    bag = TorchBag(weights, threads, LR)
    tensors = [bag.tensors(i, o) for i, o in zip(ids, case.offsets, strict=True)]
    torch_grads = [bag.torch.from_numpy(g) for g in grads]
    n = len(tensors)
    lookup: Callable[[int], object] = lambda i: bag.lookup(*tensors[i % n])  # noqa: E731
    torch_lookup_s = case.steady_seconds(lookup, repeats)
    torch_train_s = case.steady_seconds(
        lambda i: bag.train_step(*tensors[i % n], torch_grads[i % n]), repeats
    )
    return [
        Comparison(
            f"{case.name}: lookup vs EmbeddingBag (pre-mapped ids)",
            case.signs_per_batch,
            sniper_lookup_s,
            torch_lookup_s,
            0.5,
        ),
        Comparison(
            f"{case.name}: lookup+push vs EmbeddingBag+Adagrad",
            case.signs_per_batch,
            sniper_train_s,
            torch_train_s,
            5.0,
        ),
    ]


def run(
    workload: Workload,
    *,
    batches: int,
    repeats: int,
    dict_repeats: int,
    threads: int,
    prefill_rows: int,
    seed: int,
) -> list[Comparison]:
    """Run every case and print the table; returns the comparisons."""
    dim = workload.embedding_dim
    print(
        f"sniper bench store: workload {workload.name}, dim {dim}, "
        f"table pre-filled with {prefill_rows:,} rows, zipf {workload.zipf_exponent}, "
        f"{threads} shards on {threads} threads, one for the small variable "
        f"(torch: {threads} threads), "
        f"median of {repeats} batches (dict peer: {dict_repeats})"
    )
    cases = build_cases(workload, batches, prefill_rows, seed)
    results: list[Comparison] = []
    notes = set()
    with ThreadPoolExecutor(threads, thread_name_prefix="sniper-bench") as pool:
        for case in cases:
            found, note = run_case(case, dim, threads, repeats, dict_repeats, pool)
            results += found
            if note:
                notes.add(note)
    print_comparisons("signs per batch; ratio = peer time / sniper time", "peer", "signs", results)
    for note in sorted(notes):
        print(f"\nnote: {note}")
    return results
