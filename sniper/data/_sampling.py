"""Zipf ranks for every variable of a batch in one vectorized pass, and the inverse sign hash.

``_zipf.ZipfSampler`` inverts the exact CDF of one variable with ``searchsorted``. That is
exact, but at ``seed_ctr`` scale a variable has 5M ranks (a 40 MB CDF), a binary search costs
~40 ns a draw in branch misses, and a loop over 76 variables pays numpy's per-call overhead 76
times, which dominates small batches. Here:

- the head of each variable (its first :data:`HEAD_RANKS` ranks, most of the probability mass)
  is drawn exactly with Walker's alias method, one table look-up per draw; the alias tables of
  all variables live in one array, so one pass over one array of uniforms draws every sign of a
  batch;
- the whole tail is one more alias column; a draw that lands there is redrawn from the continuous
  density ``t ** -exponent`` over ``[HEAD_RANKS + 0.5, vocabulary + 0.5]`` (the midpoint rule for
  the sum of ``(r + 1) ** -exponent``), whose relative error per rank is below
  ``exponent * (exponent + 1) / (24 * HEAD_RANKS**2)``, under 1e-6: far below sampling noise.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["HEAD_RANKS", "ZipfColumns", "unmix_u64"]

HEAD_RANKS = 1024
"""Ranks of each variable drawn exactly from an alias table."""

_MUL1_INV = pow(0xBF58476D1CE4E5B9, -1, 1 << 64)
_MUL2_INV = pow(0x94D049BB133111EB, -1, 1 << 64)


class ZipfColumns:
    """Draws ``counts[v]`` ranks in ``[0, vocabularies[v])`` for every variable ``v`` at once.

    Rank ``r`` of variable ``v`` has probability proportional to ``(r + 1) ** -exponent``.
    Stateless: each draw takes its uniforms from the generator it is given, so a caller that
    derives one generator per batch gets batches that do not depend on one another.

    Every draw also reports its *column*: a global index that names ``(v, r)`` for a head rank
    and ``(v, tail)`` for any rank past the head. A caller can attach a value to each column
    (the synthetic generator attaches hidden weights) and gather it with one look-up.
    """

    def __init__(self, vocabularies: Sequence[int], counts: Sequence[int], exponent: float) -> None:
        if len(vocabularies) != len(counts):
            raise ValueError("vocabularies and counts must have one entry per variable")
        if min(vocabularies, default=1) < 1:
            raise ValueError(f"every vocabulary must be at least 1, got {min(vocabularies)}")
        if exponent <= 0:
            raise ValueError(f"exponent must be positive, got {exponent}")
        self.exponent = exponent
        self.vocabularies = np.asarray(vocabularies, dtype=np.int64)
        self.heads = np.minimum(self.vocabularies, HEAD_RANKS)
        """Exactly drawn ranks of each variable."""
        self.counts = np.asarray(counts, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        """Variable ``v``'s draws are ``[starts[v], starts[v + 1])`` of a sample."""
        has_tail = self.heads < self.vocabularies
        widths = self.heads + has_tail
        self.column_starts = np.concatenate([[0], np.cumsum(widths)])
        """Variable ``v``'s columns are ``[column_starts[v], column_starts[v + 1])``: its head
        ranks in order, then one tail column if its vocabulary is larger than the head."""
        self.is_tail = np.zeros(int(self.column_starts[-1]), dtype=bool)
        self.is_tail[self.column_starts[1:][has_tail] - 1] = True
        # The tail's continuous inverse CDF, t = (a + v * (b - a)) ** power for v ~ U[0, 1),
        # with s = 1 (where the power law integrates to a logarithm) nudged to 1 + 1e-9.
        s = _exponent_for_tail(exponent)
        self._tail_a = (self.heads + 0.5) ** (1.0 - s)
        self._tail_b = (self.vocabularies + 0.5) ** (1.0 - s)
        self._tail_power = 1.0 / (1.0 - s)
        tables = [_column_table(int(vocabulary), exponent) for vocabulary in self.vocabularies]
        self.column_probabilities = np.concatenate([p for p, _, _ in tables])
        """Probability of each column within its variable."""
        self._accept = np.concatenate([accept for _, accept, _ in tables])
        self._alias = np.concatenate(
            [
                alias + first
                for (_, _, alias), first in zip(tables, self.column_starts[:-1], strict=True)
            ]
        )
        self._variable_of_column = np.repeat(np.arange(len(widths)), widths)
        # Per draw: its variable's number of columns, first column and last column.
        self._widths = np.repeat(widths.astype(np.float64), self.counts)
        self._first_columns = np.repeat(self.column_starts[:-1], self.counts)
        self._last_columns = np.repeat(self.column_starts[1:] - 1, self.counts)

    @property
    def total(self) -> int:
        """Draws in one sample, over all variables."""
        return int(self.starts[-1])

    def sample(
        self, rng: np.random.Generator, start: int, stop: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Draws ``[start, stop)`` of a sample: ``(ranks, columns)``, each ``int64[stop - start]``.

        A sample is drawn in slices so that its working set stays in cache (the caller decides
        the slices; the same slices give the same sample).
        """
        # One uniform per draw: its integer part picks an alias column of the draw's variable,
        # its fraction is the coin that keeps the column or takes its alias (53 bits leave
        # plenty for both).
        scaled = rng.random(stop - start)
        scaled *= self._widths[start:stop]
        columns = scaled.astype(np.int64)
        scaled -= columns
        first = self._first_columns[start:stop]
        columns += first
        # u * width rounds up to width itself for u within 2**-53 of 1: keep it in the variable.
        np.minimum(columns, self._last_columns[start:stop], out=columns)
        chosen = self._alias[columns]
        np.copyto(chosen, columns, where=scaled < self._accept[columns])
        ranks = chosen - first
        tail = np.flatnonzero(self.is_tail[chosen])
        if len(tail):
            variable = self._variable_of_column[chosen[tail]]
            a = self._tail_a[variable]
            t = rng.random(len(tail))
            t *= self._tail_b[variable] - a
            t += a
            t **= self._tail_power
            t -= 0.5
            ranks[tail] = np.minimum(t, self.vocabularies[variable] - 1)
        return ranks, chosen


def _exponent_for_tail(exponent: float) -> float:
    return exponent if exponent != 1.0 else 1.0 + 1e-9


@functools.lru_cache(maxsize=256)
def _column_table(
    vocabulary: int, exponent: float
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """``(probabilities, accept, alias)`` of one variable's columns, alias local to it.

    Cached (many variables share a vocabulary), hence read-only.
    """
    head = min(vocabulary, HEAD_RANKS)
    weights = np.arange(1, head + 1, dtype=np.float64) ** -exponent
    if head < vocabulary:
        s = _exponent_for_tail(exponent)
        tail_mass = ((vocabulary + 0.5) ** (1.0 - s) - (head + 0.5) ** (1.0 - s)) / (1.0 - s)
        weights = np.append(weights, tail_mass)
    probabilities = weights / weights.sum()
    accept, alias = _alias_table(probabilities)
    for array in (probabilities, accept, alias):
        array.flags.writeable = False
    return probabilities, accept, alias


def _alias_table(p: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Vose's alias table: column ``i`` keeps itself with probability ``accept[i]``, else
    yields ``alias[i]``; a uniform column then yields each index ``i`` with probability
    ``p[i]``."""
    n = len(p)
    scaled = p * n
    accept = np.ones(n, dtype=np.float64)
    alias = np.arange(n, dtype=np.int64)
    small = [int(i) for i in np.flatnonzero(scaled < 1.0)]
    large = [int(i) for i in np.flatnonzero(scaled >= 1.0)]
    while small and large:
        lo, hi = small.pop(), large.pop()
        accept[lo] = scaled[lo]
        alias[lo] = hi
        scaled[hi] -= 1.0 - scaled[lo]
        (small if scaled[hi] < 1.0 else large).append(hi)
    # Whatever is left holds 1.0 up to rounding and keeps its own column.
    return accept, alias


def unmix_u64(values: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The inverse of ``sniper._hashing.mix_u64``: ``unmix_u64(mix_u64(x)) == x``.

    The splitmix64 finalizer is a bijection (xor-shifts and multiplications by odd constants),
    so a sign made by ``_zipf.signs_of_ranks`` gives back its field and rank. That is what
    lets the synthetic generator's planted model score any batch, even one read back from a file.
    """
    z = _unshift(values, 31)
    z *= np.uint64(_MUL2_INV)
    z = _unshift(z, 27)
    z *= np.uint64(_MUL1_INV)
    return _unshift(z, 30)


def _unshift(y: NDArray[np.uint64], shift: int) -> NDArray[np.uint64]:
    """Invert ``x ^ (x >> shift)``: xor in ``y >> shift``, ``y >> 2*shift``, ... down to zero."""
    x = y.copy()
    step = shift
    while step < 64:
        x ^= y >> np.uint64(step)
        step += shift
    return x
