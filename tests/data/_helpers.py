"""Shared pieces of the data tests: batch equality, a small generator, Criteo lines."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from sniper._workload import load_workload
from sniper.data import Batch, SyntheticCtr

SMALL_SCALE = 0.02
SMALL_BATCH = 256


@functools.cache
def small_generator(seed: int = 0, num_batches: int = 8) -> SyntheticCtr:
    """``seed_ctr`` at scale 0.02 with batches of 256: ~20k signs a batch, ~1 ms to draw."""
    return SyntheticCtr(
        load_workload("seed_ctr"),
        num_batches=num_batches,
        scale=SMALL_SCALE,
        seed=seed,
        batch_size=SMALL_BATCH,
    )


def assert_batches_equal(got: Batch, want: Batch) -> None:
    """Same labels, dense features and, per variable in the same order, signs and offsets."""
    np.testing.assert_array_equal(got.labels, want.labels)
    np.testing.assert_array_equal(got.dense, want.dense)
    assert list(got.sparse) == list(want.sparse)
    for name, (signs, offsets) in want.sparse.items():
        np.testing.assert_array_equal(got.sparse[name][0], signs, err_msg=name)
        np.testing.assert_array_equal(got.sparse[name][1], offsets, err_msg=name)


def criteo_line(label: str, integers: Sequence[str], categories: Sequence[str]) -> str:
    """One TSV line: label, the 13 integer fields, the 26 categorical fields."""
    assert len(integers) == 13 and len(categories) == 26
    return "\t".join([label, *integers, *categories]) + "\n"
