"""Array checks shared by layers that do not import each other (the store and the contract)."""

from __future__ import annotations

import numpy as np

__all__ = ["is_float32_matrix"]


def is_float32_matrix(array: object) -> bool:
    """Whether ``array`` is a writable C-contiguous 2-D float32 numpy array: what a kernel may
    write rows of by flat index, with no bounds or stride checks of its own."""
    return (
        isinstance(array, np.ndarray)
        and array.dtype == np.float32
        and array.ndim == 2
        and array.flags.c_contiguous
        and array.flags.writeable
    )
