"""A ps for a whole workload on one machine: tables sized from its shape, synthetic batches.

Used by ``sniper bench ps`` and ``sniper bench scheduler``, so both run the same configuration.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sniper.data import Workload, ZipfSampler, signs_of_ranks
from sniper.placement import capacity_for, shards_for
from sniper.store import EmbeddingTable, LockMode, Optimizer

__all__ = ["Batch", "make_batches", "make_tables"]


Batch = dict[str, tuple[NDArray[np.uint64], NDArray[np.int64]]]


def make_batches(workload: Workload, count: int, seed: int) -> list[Batch]:
    """``count`` batches of every variable, zipf signs over each variable's vocabulary."""
    sampler = ZipfSampler(
        max(v.vocabulary for v in workload.variables), workload.zipf_exponent, seed
    )
    rng = np.random.default_rng(seed)
    bags = workload.batch_size
    batches = []
    for _ in range(count):
        batch: Batch = {}
        for spec in workload.variables:
            ranks = sampler.ranks(spec.signs_per_batch) % spec.vocabulary
            counts = rng.multinomial(spec.signs_per_batch, np.full(bags, 1.0 / bags))
            offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            batch[spec.name] = (signs_of_ranks(ranks, spec.field), offsets)
        batches.append(batch)
    return batches


def make_tables(
    workload: Workload, optimizer: Optimizer, lock: LockMode = "shard"
) -> dict[str, EmbeddingTable]:
    """One table per variable, sharded and sized by ``sniper.placement``'s :func:`shards_for` and
    :func:`capacity_for`."""
    return {
        spec.name: EmbeddingTable(
            workload.embedding_dim,
            capacity=capacity_for(spec),
            optimizer=optimizer,
            num_shards=shards_for(spec),
            lock=lock,
        )
        for spec in workload.variables
    }
