"""Shared pieces of the data tests: batch equality, a small generator, Criteo lines."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sniper.data import Batch, SyntheticCtr
from sniper.data._workload import load_workload

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


def write_criteo(path: Path, lines: int, seed: int, *, missing: float = 0.2) -> Path:
    """A Criteo-format TSV of ``lines`` examples with a learnable signal and missing values.

    Each categorical column draws from 40 hex values with zipf-like skew; every value of C1..C8
    carries a weight, I1 and I2 add to the logit, and the label is drawn from the logistic of
    the sum, so a model can learn it. ``missing`` of the fields are empty.
    """
    rng = np.random.default_rng(seed)
    weights = np.random.default_rng(1234).normal(0, 1.2, (8, 40))  # the same in every file
    values = rng.zipf(1.3, (lines, 26)) % 40
    integers = rng.poisson(3, (lines, 13)) - 1  # some negative, as the real data has
    logit = weights[np.arange(8), values[:, :8]].sum(axis=1) / 2 + 0.3 * np.log1p(
        np.maximum(integers[:, 0], 0)
    )
    labels = rng.random(lines) < 1 / (1 + np.exp(-(logit - 0.5)))
    empty_int = rng.random((lines, 13)) < missing
    empty_cat = rng.random((lines, 26)) < missing
    with path.open("w") as out:
        for i in range(lines):
            ints = ["" if empty_int[i, j] else str(integers[i, j]) for j in range(13)]
            cats = [
                "" if empty_cat[i, j] else f"{(j << 20) + values[i, j] * 7919:08x}"
                for j in range(26)
            ]
            out.write(criteo_line(str(int(labels[i])), ints, cats))
    return path
