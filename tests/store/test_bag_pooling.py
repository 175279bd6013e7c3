"""Pooling per variable (sum, mean, sqrtn, weighted bags, none) against a numpy reference:
the pooled values and the rows' updates after a push, on one shard and on several."""

from __future__ import annotations

import numpy as np
import pytest

from sniper.store import BAG_POOLINGS, SGD, BagPooling, EmbeddingTable, normal

DIM = 5
LR = 0.5


def make(pooling: BagPooling, shards: int = 1) -> EmbeddingTable:
    return EmbeddingTable(
        DIM,
        capacity=1024,
        optimizer=SGD(lr=LR),
        initializer=normal(0.0, 1.0),
        num_shards=shards,
        bag_pooling=pooling,
    )


def batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ragged batch with an empty bag, a repeated sign and weights of both signs."""
    rng = np.random.default_rng(seed)
    sizes = np.array([3, 0, 1, 4, 2])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    signs = rng.integers(1, 12, size=offsets[-1]).astype(np.uint64)
    weights = rng.uniform(-1.0, 2.0, size=offsets[-1]).astype(np.float32)
    return signs, offsets, weights


def factors(pooling: str, offsets: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each sign's factor in its pool, written out the slow way."""
    out = np.zeros(len(weights))
    for b in range(len(offsets) - 1):
        w = weights[offsets[b] : offsets[b + 1]].astype(np.float64)
        divisor = {
            "sum": 1.0,
            "none": 1.0,
            "mean": w.sum(),
            "sqrtn": np.sqrt((w * w).sum()),
        }[pooling]
        out[offsets[b] : offsets[b + 1]] = w / divisor if divisor else 0.0
    return out


def reference(
    pooling: str, rows: np.ndarray, offsets: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    scaled: np.ndarray = rows.astype(np.float64) * factors(pooling, offsets, weights)[:, None]
    if pooling == "none":
        return scaled
    return np.stack(
        [scaled[offsets[b] : offsets[b + 1]].sum(axis=0) for b in range(len(offsets) - 1)]
    )


def reference_update(
    pooling: str,
    signs: np.ndarray,
    offsets: np.ndarray,
    weights: np.ndarray,
    before: np.ndarray,
    grads: np.ndarray,
) -> np.ndarray:
    """Rows of ``signs`` after one SGD step, each sign's gradient summed over its
    occurrences."""
    f = factors(pooling, offsets, weights)
    per_value = grads if pooling == "none" else np.repeat(grads, np.diff(offsets), axis=0)
    after = before.astype(np.float64).copy()
    for j, sign in enumerate(signs):
        for i in np.nonzero(signs == sign)[0]:
            after[j] -= LR * f[i] * per_value[i]
    return after


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pooling", BAG_POOLINGS)
def test_lookup_and_push_match_numpy(pooling: BagPooling, weighted: bool, shards: int) -> None:
    table = make(pooling, shards)
    signs, offsets, weights = batch()
    given = weights if weighted else None
    used = weights if weighted else np.ones_like(weights)
    rows = table.get(signs)

    pooled = table.lookup_pool(signs, offsets, given)

    expected = reference(pooling, rows, offsets, used)
    assert pooled.shape == expected.shape
    np.testing.assert_allclose(pooled, expected, rtol=1e-5, atol=1e-6)
    assert not pooled[1].any() or pooling == "none"  # the empty bag pools to zeros

    grads = np.random.default_rng(1).normal(size=pooled.shape).astype(np.float32)
    table.push_grad(signs, offsets, grads, given)
    np.testing.assert_allclose(
        table.get(signs),
        reference_update(pooling, signs, offsets, used, rows, grads),
        rtol=1e-5,
        atol=1e-5,
    )


def test_unpooled_batch_keeps_its_bags_and_weights_to_move() -> None:
    table = make("none", shards=4)
    signs, offsets, weights = batch()
    split = table.split(signs, offsets, weights)
    assert split.batch_size == len(signs)
    back_signs, back_offsets, back_weights = split.unsplit()
    np.testing.assert_array_equal(back_signs, signs)
    np.testing.assert_array_equal(back_offsets, offsets)
    np.testing.assert_array_equal(back_weights, weights)


def test_weighted_batch_unsplits_with_its_weights() -> None:
    table = make("mean", shards=3)
    signs, offsets, weights = batch()
    back_signs, back_offsets, back_weights = table.split(signs, offsets, weights).unsplit()
    np.testing.assert_array_equal(back_offsets, offsets)
    assert back_weights is not None
    # Within each example the signs come back grouped by shard: each keeps its own weight.
    for b in range(len(offsets) - 1):
        part = slice(offsets[b], offsets[b + 1])
        assert sorted(zip(back_signs[part], back_weights[part], strict=True)) == sorted(
            zip(signs[part], weights[part], strict=True)
        )
    again = table.split(back_signs, back_offsets, back_weights)
    np.testing.assert_allclose(
        table.lookup_pool(signs, offsets, weights),
        table.lookup_shard(again, 0) + table.lookup_shard(again, 1) + table.lookup_shard(again, 2),
        rtol=1e-6,
    )


def test_unweighted_sum_takes_the_plain_kernels() -> None:
    split = make("sum", shards=2).split(*batch()[:2])
    assert split.scales is None and split.weights is None and split.bags is None


def test_bad_weights_and_pooling_are_refused() -> None:
    table = make("sum")
    signs, offsets, weights = batch()
    with pytest.raises(ValueError, match=r"^weights must be float32 of shape \(10,\), one per"):
        table.split(signs, offsets, weights[:-1])
    with pytest.raises(ValueError, match=r"^weights must be float32 of shape"):
        table.split(signs, offsets, weights.astype(np.float64))
    weights[2] = np.nan
    with pytest.raises(ValueError, match=r"^weights must be finite, got NaN or Inf$"):
        table.split(signs, offsets, weights)
    with pytest.raises(ValueError, match=r"^pooling must be one of sum, mean, sqrtn, none, got"):
        EmbeddingTable(DIM, capacity=8, optimizer=SGD(), bag_pooling="max")  # type: ignore[arg-type]
