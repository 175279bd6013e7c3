"""What a new row's initial value costs: sniper's ``normal`` initializer against torch's.

Early in training a large share of a batch's signs are new (seed_ctr at scale 1.0: 31% of the
first batch's signs, 10% of the sixtieth's), and each new row gets its initial value inside the
ps's mapping kernel. sniper's value is a pure function of (seed, sign), drawn from a
counter-based generator (the ziggurat on splitmix64), so that an evicted or moved sign comes
back with the same row; torch's ``nn.init.normal_`` fills a tensor from one stateful
generator. Each allocates a ``[rows, dim]`` float32 block and fills it on one thread (sniper's
mapping kernels initialize the rows of each shard on the thread that maps them).
"""

from __future__ import annotations

import numpy as np

from sniper._bench._report import Comparison, PeerMissing, median_seconds
from sniper._bench._torch_peer import import_torch
from sniper.store import INIT_NORMAL, initial_rows, mix64

__all__ = ["ROWS", "initial_values", "print_initial_values"]

ROWS = 100_000
"""New rows per call: about what one seed_ctr batch at scale 1.0 inserts early in training."""
STD = 0.01


def initial_values(dim: int, repeats: int, rows: int = ROWS) -> Comparison:
    """sniper's and torch's time to give ``rows`` new rows of ``dim`` a normal(0.01) value
    (:class:`~sniper._bench._report.PeerMissing` without torch)."""
    torch = import_torch()
    signs = np.random.default_rng(3).integers(0, 2**63, rows, dtype=np.uint64)
    key = np.uint64(mix64(np.uint64(0)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sniper_s = median_seconds(
            lambda _: initial_rows(signs, dim, key, INIT_NORMAL, 0.0, STD), repeats
        )
        torch_s = median_seconds(
            lambda _: torch.nn.init.normal_(torch.empty(rows, dim), 0.0, STD), repeats
        )
    finally:
        torch.set_num_threads(threads)
    return Comparison(f"new rows: normal({STD}) initial values", rows, sniper_s, torch_s, 0.0)


def print_initial_values(dim: int, repeats: int) -> None:
    """Print :func:`initial_values` as one paragraph (no target: torch's values are not a pure
    function of the sign, so it does less); a missing torch is a note."""
    try:
        c = initial_values(dim, repeats)
    except PeerMissing as exc:
        print(f"\nnote: {exc}")
        return
    per_row = 1e9 / c.work
    print(
        f"\n{c.case}, {c.work:,} rows of {dim} on one thread: sniper {c.sniper_s * 1e3:.2f} ms "
        f"({c.sniper_s * per_row:.0f} ns a row), torch nn.init.normal_ {c.peer_s * 1e3:.2f} ms "
        f"({c.peer_s * per_row:.0f} ns a row); ratio {c.ratio:.2f}x (no target: sniper's "
        "value is a pure function of the seed and the sign, torch's comes from one stream)"
    )
