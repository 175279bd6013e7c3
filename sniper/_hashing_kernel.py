"""The numba kernel of :func:`sniper._hashing.feature_signs`, in a module of its own so that
``sniper.hashing`` imports numba only when a column is hashed."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["feature_signs_kernel"]

_PRIME = np.uint64(0x100000001B3)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@njit(nogil=True, cache=True)
def feature_signs_kernel(
    data: np.ndarray, offsets: np.ndarray, salt: np.uint64, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out[i]`` = the feature sign of ``data[offsets[i]:offsets[i + 1]]`` from ``salt``
    (the mixed hash of the variable's name): FNV-1a's byte step, then splitmix64's finalizer."""
    for i in range(len(out)):
        h = salt
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * _PRIME
        h = (h ^ (h >> _S30)) * _MUL1
        h = (h ^ (h >> _S27)) * _MUL2
        out[i] = h ^ (h >> _S31)
