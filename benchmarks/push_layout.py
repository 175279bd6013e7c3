"""What laying the numpy MLP's gradients out C-ordered cost the trainer, against a whole PushGrad.

The numpy MLP computes every variable's input gradient as a block of one transposed product
(``Mlp.backward_input``), so each ``[batch, dim]`` gradient lies in memory as its transpose.
Before 490acb8 the trainer's client made each one C-contiguous before encoding it: a
transposing copy of 5 MB a seed_ctr batch, on the event loop, on the way to the push. Since
then such a gradient travels as its transpose (``VariableGradient.grad_transposed``) and the
ps reads it in place. This script times, in alternated rounds on one batch's gradients as the
MLP lays them out: that copy alone, and a whole PushGrad of them to a real ps over loopback
gRPC (feed, then push; the push's time only). Figures, min over the rounds.

Printed on 2026-11-28 (the 2-core machine of docs/benchmarks.md; 76 variables of 1024 x 16,
one ps holding them all): the copy 1.20 ms, the PushGrad 13.9 ms. Run from worktrees of
490acb8's parent and of 490acb8 in turn, the PushGrad (the copy inside it before) took 14.7
and 15.6 ms against 14.9 and 13.9 ms: the copy is gone from the trainer's thread, and the
whole call's time moves by less than its noise.

Usage: ``python benchmarks/push_layout.py [ROUNDS]`` (default 9).
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator

import anyio
import numpy as np

from sniper.data import Batch, SyntheticCtr, load_workload
from sniper.models import Mlp
from sniper.rpc import PsClient, VariableConfig
from sniper.testing import running_ps

DIM = 16
REPEATS = 20
"""Pushes (and copies) a round; the round's figure is their mean."""


def gradients(names: list[str], batch: int) -> dict[str, np.ndarray]:
    """One batch's input gradients as the numpy MLP returns them: views of one product."""
    width = len(names) * DIM
    mlp = Mlp(width, (64,), 0.002)
    rng = np.random.default_rng(0)
    _, activations = mlp.forward(rng.standard_normal((batch, width)).astype(np.float32))
    columns = [(i * DIM, (i + 1) * DIM) for i in range(len(names))]
    d_logits = rng.standard_normal(batch).astype(np.float32)
    d_input = mlp.backward_input(activations, d_logits, columns).d_input
    return dict(zip(names, d_input, strict=True))


async def push_seconds(
    client: PsClient, batch: Batch, grads: dict[str, np.ndarray], ids: Iterator[int]
) -> float:
    """The mean seconds of a PushGrad of ``grads``, each after a FeedSample of ``batch`` under
    the next of ``ids`` (a pushed batch id is never fed again)."""
    total = 0.0
    for _ in range(REPEATS):
        batch_id = next(ids)
        await client.feed_sample(batch_id, batch.sparse)
        start = time.perf_counter()
        await client.push_grad(batch_id, grads)
        total += time.perf_counter() - start
    return total / REPEATS


def copy_seconds(grads: dict[str, np.ndarray]) -> float:
    """The mean seconds of laying every gradient out C-ordered, as the client did before."""
    start = time.perf_counter()
    for _ in range(REPEATS):
        for grad in grads.values():
            np.ascontiguousarray(grad)
    return (time.perf_counter() - start) / REPEATS


async def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    data = SyntheticCtr(load_workload("seed_ctr"), num_batches=1, scale=0.02)
    batch = next(iter(data.batches()))
    names = list(batch.sparse)
    grads = gradients(names, data.workload.batch_size)
    assert all(g.T.flags.c_contiguous and not g.flags.c_contiguous for g in grads.values())
    copies, pushes = [], []
    ids = itertools.count(1)
    async with running_ps() as (_, client):
        for name in names:
            await client.create_variable(VariableConfig(name, DIM, 1 << 20, optimizer="adagrad"))
        # A trainer looks a batch up before it pushes: the answer says the ps reads gradients
        # as they lie (grad_transposed), and the client sends them so from then on.
        first = next(ids)
        await client.feed_sample(first, batch.sparse)
        await client.embedding_lookup(first, names, release=True)
        for _ in range(rounds):
            copies.append(copy_seconds(grads))
            pushes.append(await push_seconds(client, batch, grads, ids))
    print(f"{len(names)} gradients of {data.workload.batch_size} x {DIM}, {rounds} rounds:")
    print(f"  laying them out C-ordered (no longer done): {min(copies) * 1e3:.2f} ms")
    print(f"  a PushGrad of them over loopback gRPC:      {min(pushes) * 1e3:.2f} ms")


if __name__ == "__main__":
    anyio.run(main)
