"""A Batch checks its arrays once, at construction, and names the field that is wrong."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from sniper.data import Batch


def parts(**changes: Any) -> dict[str, Any]:
    """A valid 3-example batch's arguments, with some replaced."""
    arguments: dict[str, Any] = {
        "labels": np.array([0, 1, 0], dtype=np.float32),
        "dense": np.zeros((3, 2), dtype=np.float32),
        "sparse": {
            "a": (np.array([7, 8, 9], dtype=np.uint64), np.array([0, 2, 2, 3], dtype=np.int64))
        },
    }
    arguments.update(changes)
    return arguments


def ragged(signs: list[int], offsets: list[int]) -> dict[str, Any]:
    return {"a": (np.array(signs, dtype=np.uint64), np.array(offsets, dtype=np.int64))}


def test_a_valid_batch_reports_its_shape() -> None:
    batch = Batch(**parts())
    assert batch.batch_size == 3
    assert batch.dense_features == 2
    assert batch.num_signs == 3


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"labels": [0.0, 1.0, 0.0]}, TypeError, "labels must be a numpy array, got list"),
        (
            {"labels": np.zeros(3, dtype=np.float64)},
            TypeError,
            "labels must have dtype float32, got float64",
        ),
        (
            {"labels": np.array([0, 2, 1], dtype=np.float32)},
            ValueError,
            "labels must be 0.0 or 1.0; binarize click counts before batching",
        ),
        (
            {"dense": np.zeros(6, dtype=np.float32)},
            ValueError,
            "dense must be 2-D, got shape (6,)",
        ),
        (
            {"dense": np.zeros((4, 2), dtype=np.float32)},
            ValueError,
            "dense has 4 rows, expected batch_size=3",
        ),
        (
            {"sparse": {"a": [np.zeros(0, np.uint64), np.zeros(4, np.int64)]}},
            TypeError,
            "sparse['a'] must be a tuple (signs, offsets)",
        ),
        (
            {"sparse": {"a": (np.zeros(0, np.int64), np.zeros(4, np.int64))}},
            TypeError,
            "sparse['a'] signs must have dtype uint64, got int64",
        ),
        (
            {"sparse": {"a": (np.zeros(0, np.uint64), np.zeros(4, np.int32))}},
            TypeError,
            "sparse['a'] offsets must have dtype int64, got int32",
        ),
        (
            {"sparse": ragged([], [0, 0, 0])},
            ValueError,
            "sparse['a'] offsets has length 3, expected batch_size + 1 = 4",
        ),
        (
            {"sparse": ragged([1, 2], [0, 1, 1, 3])},
            ValueError,
            "sparse['a'] offsets must run from 0 to len(signs) = 2, got 0 .. 3",
        ),
        (
            {"sparse": ragged([1, 2], [0, 2, 1, 2])},
            ValueError,
            "sparse['a'] offsets must be non-decreasing",
        ),
    ],
)
def test_a_bad_field_is_named(
    changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        Batch(**parts(**changes))


def test_a_batch_is_frozen() -> None:
    batch = Batch(**parts())
    with pytest.raises(AttributeError):
        batch.labels = np.zeros(3, dtype=np.float32)  # type: ignore[misc]
