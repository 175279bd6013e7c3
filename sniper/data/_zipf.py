"""Zipf-distributed signs over a bounded vocabulary, as CTR features are.

``numpy.random.Generator.zipf`` draws from an unbounded support and needs exponent > 1; real
features have a finite vocabulary and the seed workload's exponent is 1.1. This sampler draws
ranks from the truncated law ``P(rank = r) ~ (r + 1) ** -exponent`` for ``r < vocabulary`` by
inverting a precomputed CDF, then turns ranks into signs with a mixing hash of (field, rank),
so that hot signs are not small consecutive integers and fields never collide.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sniper._hashing import mix_u64

__all__ = ["ZipfSampler", "signs_of_ranks"]


def signs_of_ranks(ranks: NDArray[np.int64], field: int) -> NDArray[np.uint64]:
    """The sign of each (field, rank): the splitmix64 finalizer of ``field << 40 | rank``."""
    return mix_u64(ranks.astype(np.uint64) | np.uint64((field & 0xFFFFFF) << 40))


class ZipfSampler:
    """Draws ranks in ``[0, vocabulary)`` with probability proportional to ``(r+1)^-exponent``."""

    def __init__(self, vocabulary: int, exponent: float, seed: int = 0) -> None:
        if vocabulary < 1:
            raise ValueError(f"vocabulary must be at least 1, got {vocabulary}")
        if exponent <= 0:
            raise ValueError(f"exponent must be positive, got {exponent}")
        weights = np.arange(1, vocabulary + 1, dtype=np.float64) ** -exponent
        self._cdf = np.cumsum(weights)
        self._cdf /= self._cdf[-1]
        self.vocabulary = vocabulary
        self._rng = np.random.default_rng(seed)

    def ranks(self, n: int) -> NDArray[np.int64]:
        """``n`` independent ranks."""
        u = self._rng.random(n)
        ranks = np.searchsorted(self._cdf, u, side="right")
        return np.minimum(ranks, self.vocabulary - 1).astype(np.int64)

    def signs(self, n: int, field: int) -> NDArray[np.uint64]:
        """``n`` independent signs of ``field``."""
        return signs_of_ranks(self.ranks(n), field)
