"""SyntheticCtr: determinism, shards and epochs, shape, the sampler, and a learnable signal."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from sniper._hashing import mix_u64
from sniper.data import Batch, Reader, SyntheticCtr, roc_auc
from sniper.data._sampling import ZipfColumns, unmix_u64
from sniper.data._workload import WorkloadError, load_workload
from sniper.data._zipf import signs_of_ranks
from tests.data._helpers import SMALL_BATCH, SMALL_SCALE, assert_batches_equal, small_generator

WORKLOAD = load_workload("seed_ctr")


def fresh(seed: int = 0, **overrides: Any) -> SyntheticCtr:
    arguments: dict[str, Any] = {
        "num_batches": 8,
        "scale": SMALL_SCALE,
        "seed": seed,
        "batch_size": SMALL_BATCH,
    }
    arguments.update(overrides)
    return SyntheticCtr(WORKLOAD, **arguments)


def test_is_a_reader() -> None:
    generator = small_generator()
    assert isinstance(generator, Reader)
    assert generator.variables == tuple(v.name for v in WORKLOAD.variables)
    assert generator.dense_features == 13
    assert generator.batch_size == SMALL_BATCH


def test_the_same_seed_gives_the_same_batches() -> None:
    for got, want in zip(fresh(seed=0).batches(), small_generator(0).batches(), strict=True):
        assert_batches_equal(got, want)


def test_another_seed_gives_other_batches() -> None:
    a, b = small_generator(0).batch(0), small_generator(1).batch(0)
    assert not np.array_equal(a.sparse["embedding_0"][0], b.sparse["embedding_0"][0])
    assert not np.array_equal(a.dense, b.dense)


@pytest.mark.parametrize("num_shards", [1, 2, 3, 8, 9])
def test_shards_split_an_epoch_into_disjoint_parts(num_shards: int) -> None:
    generator = small_generator()
    seen: list[int] = []
    for shard in range(num_shards):
        indices = list(range(shard, generator.num_batches, num_shards))
        batches = list(generator.batches(shard=shard, num_shards=num_shards))
        assert len(batches) == len(indices)
        for index, batch in zip(indices, batches, strict=True):
            assert_batches_equal(batch, generator.batch(index))
        seen += indices
    assert sorted(seen) == list(range(generator.num_batches))


def test_each_epoch_is_a_different_stream_that_replays() -> None:
    generator = small_generator()
    first = generator.batch(0, epoch=0)
    second = generator.batch(0, epoch=1)
    assert not np.array_equal(first.sparse["embedding_11"][0], second.sparse["embedding_11"][0])
    assert_batches_equal(next(generator.batches(epoch=1)), second)


def test_positive_rate_is_the_workloads() -> None:
    for seed in (0, 1):
        generator = small_generator(seed, num_batches=40)
        labels = np.concatenate([b.labels for b in generator.batches()])
        assert abs(labels.mean() - WORKLOAD.positive_rate) < 0.015


def test_oracle_auc_is_in_the_promised_range() -> None:
    for seed in (0, 1):
        auc = small_generator(seed, num_batches=40).oracle_auc()
        assert 0.77 <= auc <= 0.85, auc


def test_oracle_logits_score_a_batch_from_its_signs_alone() -> None:
    generator = small_generator()
    for index in range(3):
        batch, logits = generator.batch_with_logits(index)
        copied = Batch(
            labels=batch.labels.copy(),
            dense=batch.dense.copy(),
            sparse={name: (s.copy(), o.copy()) for name, (s, o) in batch.sparse.items()},
        )
        np.testing.assert_array_equal(generator.oracle_logits(copied), logits)


def test_oracle_logits_refuse_a_batch_of_another_schema() -> None:
    generator = small_generator()
    batch = generator.batch(0)
    partial = Batch(labels=batch.labels, dense=batch.dense, sparse={})
    with pytest.raises(ValueError, match="batch lacks variables of this generator: embedding_0, "):
        generator.oracle_logits(partial)


def test_signs_are_those_of_the_workloads_sign_contract() -> None:
    generator = small_generator()
    batch = generator.batch(0)
    for spec in WORKLOAD.variables:
        signs, _ = batch.sparse[spec.name]
        ranks = (unmix_u64(signs) & np.uint64((1 << 40) - 1)).astype(np.int64)
        np.testing.assert_array_equal(signs_of_ranks(ranks, spec.field), signs)
        assert ranks.max() < generator.vocabulary[spec.name]


def test_every_example_gets_the_floor_or_ceiling_of_its_mean() -> None:
    generator = small_generator()
    batch = generator.batch(0)
    for name, count in generator.signs_per_batch.items():
        signs, offsets = batch.sparse[name]
        assert len(signs) == count
        low = count // SMALL_BATCH
        assert set(np.diff(offsets).tolist()) <= {low, low + 1}
        assert count >= SMALL_BATCH  # at least one sign per example on average


def test_a_smaller_batch_keeps_the_signs_per_example() -> None:
    full = fresh(batch_size=None)
    assert full.batch_size == WORKLOAD.batch_size
    small = small_generator()
    for name, count in full.signs_per_batch.items():
        per_example = count / full.batch_size
        assert small.signs_per_batch[name] / SMALL_BATCH == pytest.approx(per_example, abs=0.01)


def test_scale_one_has_the_workloads_shape() -> None:
    generator = SyntheticCtr(WORKLOAD, num_batches=1)
    batch = generator.batch(0)
    for spec in WORKLOAD.variables:
        assert len(batch.sparse[spec.name][0]) == spec.signs_per_batch
        assert generator.vocabulary[spec.name] == spec.vocabulary
    assert batch.num_signs == WORKLOAD.signs_per_batch == 719_168


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"num_batches": 0}, ValueError, "num_batches must be at least 1, got 0"),
        ({"seed": -1}, ValueError, "seed must be at least 0, got -1"),
        ({"scale": 0.0}, ValueError, "scale must be positive and finite, got 0.0"),
        ({"scale": "1"}, TypeError, "scale must be a number, got str"),
        ({"batch_size": 0}, ValueError, "batch_size must be at least 1, got 0"),
    ],
)
def test_bad_arguments_are_named(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        fresh(**arguments)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g: g.batch(-1), "index must be at least 0, got -1"),
        (lambda g: next(g.batches(epoch=-1)), "epoch must be at least 0, got -1"),
        (lambda g: next(g.batches(shard=2, num_shards=2)), "shard must be in [0, num_shards=2)"),
        (lambda g: next(g.batches(num_shards=0)), "num_shards must be at least 1, got 0"),
    ],
)
def test_bad_stream_arguments_are_named(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=re.escape(message)):
        call(small_generator())


@pytest.mark.parametrize("exponent", [1.1, 1.0, 2.0])
def test_zipf_ranks_follow_the_exact_law(exponent: float) -> None:
    vocabularies = [1, 5, 3000, 200_000]
    sampler = ZipfColumns(vocabularies, [200_000] * 4, exponent)
    ranks, _ = sampler.sample(np.random.default_rng(0), 0, sampler.total)
    for v, vocabulary in enumerate(vocabularies):
        drawn = ranks[sampler.starts[v] : sampler.starts[v + 1]]
        assert drawn.min() >= 0 and drawn.max() < vocabulary
        p = np.arange(1, vocabulary + 1, dtype=np.float64) ** -exponent
        p /= p.sum()
        # Ranges of ranks: single head ranks, then the tail in a few wide bins.
        edges = np.unique(np.concatenate([np.arange(min(vocabulary, 8)), [1024, 1e4, 1e5]]))
        edges = np.append(edges[edges < vocabulary], vocabulary).astype(np.int64)
        for lo, hi in itertools.pairwise(edges):
            expected = p[lo:hi].sum()
            observed = np.count_nonzero((drawn >= lo) & (drawn < hi)) / len(drawn)
            # Five standard errors of a binomial proportion.
            assert abs(observed - expected) <= 5 * np.sqrt(expected / len(drawn)) + 1e-9


@given(st.lists(st.integers(0, 2**64 - 1), max_size=20))
def test_unmix_inverts_the_sign_hash(values: list[int]) -> None:
    x = np.array(values, dtype=np.uint64)
    np.testing.assert_array_equal(unmix_u64(mix_u64(x)), x)


def test_the_signal_is_learnable_by_a_tiny_model() -> None:
    """Logistic regression on hashed one-hot signs, plain numpy, a few seconds of training."""
    generator = SyntheticCtr(WORKLOAD, num_batches=60, scale=SMALL_SCALE)
    model = HashedLogistic(buckets=1 << 18, dense_features=generator.dense_features)
    for batch in generator.batches():
        model.step(batch, lr=0.1)
    held_out = [generator.batch(i, epoch=1) for i in range(4)]
    labels = np.concatenate([b.labels for b in held_out])
    auc = roc_auc(labels, np.concatenate([model.logits(b) for b in held_out]))
    oracle = roc_auc(labels, np.concatenate([generator.oracle_logits(b) for b in held_out]))
    assert auc > 0.65, (auc, oracle)
    assert auc < oracle


class HashedLogistic:
    """``logit = bias + dense . w + sum over signs of v[sign % buckets]``, trained by Adagrad."""

    def __init__(self, buckets: int, dense_features: int) -> None:
        self.buckets = buckets
        self.sparse = np.zeros(buckets)
        self.sparse_squares = np.ones(buckets)
        self.dense = np.zeros(dense_features + 1)  # the last one is the bias
        self.dense_squares = np.ones(dense_features + 1)

    def logits(self, batch: Batch) -> NDArray[np.float64]:
        rows, examples = self._rows(batch)
        sums = np.bincount(examples, weights=self.sparse[rows], minlength=batch.batch_size)
        return np.asarray(sums + self._dense_inputs(batch) @ self.dense)

    def step(self, batch: Batch, lr: float) -> None:
        error = 1 / (1 + np.exp(-self.logits(batch))) - batch.labels
        rows, examples = self._rows(batch)
        unique, inverse = np.unique(rows, return_inverse=True)
        grad = np.bincount(inverse, weights=error[examples])
        self.sparse_squares[unique] += grad**2
        self.sparse[unique] -= lr * grad / np.sqrt(self.sparse_squares[unique])
        dense_grad = self._dense_inputs(batch).T @ error
        self.dense_squares += dense_grad**2
        self.dense -= lr * dense_grad / np.sqrt(self.dense_squares)

    def _rows(self, batch: Batch) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        rows, examples = [], []
        every_example = np.arange(batch.batch_size)
        for signs, offsets in batch.sparse.values():
            rows.append((signs % np.uint64(self.buckets)).astype(np.int64))
            examples.append(np.repeat(every_example, np.diff(offsets)))
        return np.concatenate(rows), np.concatenate(examples)

    @staticmethod
    def _dense_inputs(batch: Batch) -> NDArray[np.float64]:
        return np.column_stack([batch.dense, np.ones(batch.batch_size)])


def test_a_two_label_workload_plants_each_label_and_its_first_is_the_single_labels() -> None:
    """criteo_two_labels is criteo with a click and a buy label: click is exactly criteo's
    single label (same draws), buy has its own rate and its own planted model."""
    one = SyntheticCtr(load_workload("criteo"), num_batches=8, scale=0.01, seed=2)
    two = SyntheticCtr(load_workload("criteo_two_labels"), num_batches=8, scale=0.01, seed=2)
    assert (one.label_names, two.label_names) == (("label",), ("click", "buy"))
    labels = np.concatenate([b.labels for b in two.batches()])
    assert labels.shape == (8 * 1024, 2)
    for single, double in zip(one.batches(), two.batches(), strict=True):
        np.testing.assert_array_equal(double.labels[:, 0], single.labels)
        np.testing.assert_array_equal(double.dense, single.dense)
    assert abs(labels[:, 1].mean() - 0.03) < 0.01
    assert two.oracle_auc(label=0) == one.oracle_auc()
    assert two.oracle_auc(label=1) > 0.65


def test_a_workload_file_may_change_a_built_in_one(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text('{"base": "criteo", "name": "mine", "dense_features": 5}')
    workload = load_workload(path)
    assert (workload.name, workload.dense_features) == ("mine", 5)
    assert workload.variables == load_workload("criteo").variables
    path.write_text('{"base": "nope", "name": "mine"}')
    with pytest.raises(WorkloadError, match=r"base must be a built-in workload .* got 'nope'"):
        load_workload(path)
