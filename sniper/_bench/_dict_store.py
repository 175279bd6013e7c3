"""The store a user would write in an afternoon: a Python dict from sign to row, plus numpy.

It is the ``>= 20x`` peer of ``sniper bench store``: the same Adagrad semantics as
:class:`sniper.store.EmbeddingTable` (pooled lookup, duplicate gradients summed, one update per
row), no capacity limit and no eviction.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


class DictAdagradTable:
    """dict + ``np.add.reduceat`` for pooling + ``np.add.at`` for gradient sums."""

    def __init__(self, dim: int, capacity: int, lr: float = 0.01, eps: float = 1e-10) -> None:
        self.index: dict[int, int] = {}
        self.weights = np.zeros((capacity, dim), dtype=np.float32)
        self.acc = np.zeros((capacity, dim), dtype=np.float32)
        self.lr = np.float32(lr)
        self.eps = np.float32(eps)
        self._rng = np.random.default_rng(0)

    def fill(self, signs: NDArray[np.uint64], weights: NDArray[np.float32]) -> None:
        for sign in signs.tolist():
            self.index[sign] = len(self.index)
        self.weights[: len(signs)] = weights

    def rows(self, signs: NDArray[np.uint64]) -> NDArray[np.int64]:
        index = self.index
        out = np.empty(len(signs), dtype=np.int64)
        for j, sign in enumerate(signs.tolist()):
            row = index.get(sign)
            if row is None:
                row = index[sign] = len(index)
                self.weights[row] = self._rng.normal(0, 0.01, self.weights.shape[1])
            out[j] = row
        return out

    def lookup_pool(
        self, signs: NDArray[np.uint64], offsets: NDArray[np.int64]
    ) -> NDArray[np.float32]:
        gathered = self.weights[self.rows(signs)]
        out = np.zeros((len(offsets) - 1, self.weights.shape[1]), dtype=np.float32)
        nonempty = np.nonzero(np.diff(offsets) > 0)[0]
        if len(gathered):
            out[nonempty] = np.add.reduceat(gathered, offsets[nonempty], axis=0)
        return out

    def push_grad(
        self, signs: NDArray[np.uint64], offsets: NDArray[np.int64], grads: NDArray[np.float32]
    ) -> None:
        rows = self.rows(signs)
        per_sign = np.repeat(grads, np.diff(offsets), axis=0)
        unique, inverse = np.unique(rows, return_inverse=True)
        summed = np.zeros((len(unique), grads.shape[1]), dtype=np.float32)
        np.add.at(summed, inverse, per_sign)
        self.acc[unique] += summed * summed
        self.weights[unique] -= self.lr * summed / (np.sqrt(self.acc[unique]) + self.eps)
