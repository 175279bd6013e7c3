"""What a new row costs against a hit: one engine's feed, lookup and push, twice over.

Every benchmark trains one epoch of fresh synthetic data, so early in a run most of a batch's
signs are new to their tables, and a new row costs 20-40 times a hit: the index probe misses, a
row is claimed, its index entry written, its initial value drawn (16 normals) and its
optimizer state set, in memory the process may touch for the first time. This script feeds,
looks up and pushes the same batches twice through one ``PsEngine`` on the ``inline``
scheduler, with tables sized as ``sniper train`` sizes them: first with new signs, then with
the same ones. It prints the CPU time of each request a batch in each pass, and the rows
inserted a batch. CHANGELOG.md (2026-11-24) quotes its figures: at scale 1.0 the first
pass's feed cost 58-62 ms a batch against 15 ms for the second.

Usage: ``python benchmarks/insert_cost.py [SCALE] [BATCHES]`` (default 1.0 and 60).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from sniper.data import SyntheticCtr, load_workload
from sniper.roles import PsEngine
from sniper.scheduler import open_scheduler
from sniper.store import Adagrad, EmbeddingTable

WARM_BATCHES = 10
"""Batches of each pass left out of its means."""


def main() -> None:
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    num_batches = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    data = SyntheticCtr(load_workload("seed_ctr"), num_batches=num_batches, scale=scale)
    batches = list(data.batches())
    names = list(batches[0].sparse)
    grads = {n: np.full((data.workload.batch_size, 16), 1e-3, np.float32) for n in names}
    with open_scheduler("inline") as scheduler:
        engine = PsEngine(scheduler)
        for n in names:
            capacity = min(max(1024, data.vocabulary[n]), 4_000_000)  # as `sniper train` sizes
            table = EmbeddingTable(16, capacity=capacity, optimizer=Adagrad(0.05))
            engine.create_variable(n, table)

        def step(batch_id, sparse):
            marks = [time.process_time()]
            engine.feed_many(batch_id, [(n, *sparse[n]) for n in names])
            marks.append(time.process_time())
            engine.lookup(batch_id, names)
            marks.append(time.process_time())
            engine.push_grad(batch_id, grads)
            marks.append(time.process_time())
            return np.diff(marks) * 1e3

        for label, base in (("first pass (new signs)", 0), ("second pass (same signs)", 10**6)):
            times = [step(base + i, b.sparse) for i, b in enumerate(batches)]
            feed, lookup, push = np.mean(times[WARM_BATCHES:], axis=0)
            print(f"{label}: feed {feed:.1f} lookup {lookup:.1f} push {push:.1f} ms CPU a batch")
        inserts = sum(engine.table(n).statistics().inserts for n in names)
        print(f"{inserts / len(batches):,.0f} rows inserted a batch in the first pass")


if __name__ == "__main__":
    main()
