"""Tensors on the wire: raw little-endian bytes plus dtype and shape.

Decoding is one ``np.frombuffer`` view after checks that name the offending field, so a
malformed request becomes INVALID_ARGUMENT with a message, never a crash or a silent reshape.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper.rpc._generated.sniper.v1 import Tensor
from sniper.rpc._wire import RawTensor

__all__ = ["TensorError", "decode", "encode", "wire_array"]

_DTYPES = {
    name: np.dtype(name).newbyteorder("<") for name in ("float32", "uint64", "int64", "int32")
}


class TensorError(ValueError):
    """A tensor field is missing or inconsistent; the message names the field."""


def wire_array(array: NDArray[Any]) -> NDArray[Any]:
    """``array`` as it goes on the wire: one of the wire dtypes, little-endian, contiguous."""
    name = array.dtype.name
    if name not in _DTYPES:
        raise TypeError(f"dtype {name} cannot go on the wire; use one of {', '.join(_DTYPES)}")
    return np.ascontiguousarray(array, dtype=_DTYPES[name])


def encode(array: NDArray[np.generic]) -> Tensor:
    """Wrap ``array`` (one of the wire dtypes) as a :class:`Tensor`, little-endian."""
    data = wire_array(array).tobytes()
    return Tensor(dtype=array.dtype.name, shape=list(array.shape), data=data)


def decode(tensor: Tensor | RawTensor | None, field: str, dtype: str, ndim: int) -> NDArray[Any]:
    """The array in ``tensor``, checked to have ``dtype`` and ``ndim`` dimensions.

    The result is a read-only view of the message's bytes (no copy).
    """
    if tensor is None or (not tensor.dtype and not tensor.shape and not tensor.data):
        raise TensorError(f"{field} is missing")
    if tensor.dtype != dtype:
        raise TensorError(f"{field} must have dtype {dtype}, got {tensor.dtype!r}")
    shape = tuple(tensor.shape)
    if len(shape) != ndim or any(d < 0 for d in shape):
        raise TensorError(f"{field} must have {ndim} non-negative dimensions, got shape {shape}")
    expected = math.prod(shape) * _DTYPES[dtype].itemsize
    if len(tensor.data) != expected:
        raise TensorError(
            f"{field} has {len(tensor.data)} bytes of data, but shape {shape} of "
            f"{dtype} needs {expected}"
        )
    return np.frombuffer(tensor.data, dtype=_DTYPES[dtype]).reshape(shape)
