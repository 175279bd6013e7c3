"""Tensors on the wire: raw little-endian bytes plus dtype and shape.

Decoding is one ``np.frombuffer`` view after checks that name the offending field, so a
malformed request becomes INVALID_ARGUMENT with a message, never a crash or a silent reshape.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import betterproto
import numpy as np
from numpy.typing import NDArray

from sniper.rpc._generated.sniper.v1 import Tensor
from sniper.rpc._halves import narrow_bfloat16, narrow_float16, widen_bfloat16, widen_float16

if TYPE_CHECKING:
    from sniper.rpc._wire import RawTensor

__all__ = [
    "FLOAT_DTYPES",
    "TensorError",
    "check_wire_dtype",
    "decode",
    "decode_floats",
    "encode",
    "narrow",
    "present",
    "wire_array",
]

_DTYPES = {
    name: np.dtype(name).newbyteorder("<")
    for name in ("float32", "uint64", "int64", "int32", "float16")
} | {"bfloat16": np.dtype("<u2")}
"""What each wire dtype decodes to; numpy has no bfloat16, so its bits travel as uint16."""

FLOAT_DTYPES = ("float32", "bfloat16", "float16")
"""How pooled embeddings and gradients may travel (``wire_dtype``): float32 as they are, or in
half the bytes. bfloat16 keeps float32's range with 8 bits of mantissa (about 3 significant
digits); float16 keeps 11 bits and clips finite values to +-65504. Both convert in one compiled
pass each way (:mod:`sniper.rpc._halves`)."""


class TensorError(ValueError):
    """A tensor field is missing or inconsistent; the message names the field."""


def present(tensor: Tensor | RawTensor | None) -> bool:
    """Whether an optional Tensor field was sent: a parsed view is; betterproto gives an
    unset message field a default instance, which is present only if set or received."""
    if tensor is None:
        return False
    return not isinstance(tensor, Tensor) or betterproto.serialized_on_wire(tensor)


def wire_array(array: NDArray[Any]) -> NDArray[Any]:
    """``array`` as it goes on the wire: one of the wire dtypes, little-endian, contiguous."""
    name = array.dtype.name
    if name not in _DTYPES:
        raise TypeError(f"dtype {name} cannot go on the wire; use one of {', '.join(_DTYPES)}")
    return np.ascontiguousarray(array, dtype=_DTYPES[name])


def encode(array: NDArray[np.generic], dtype: str | None = None) -> Tensor:
    """Wrap ``array`` (one of the wire dtypes) as a :class:`Tensor`, little-endian; ``dtype``
    names what the array holds where numpy has no name for it (``narrow``'s bfloat16)."""
    if dtype == "bfloat16":
        data = np.ascontiguousarray(array, dtype="<u2").tobytes()
    else:
        data = wire_array(array).tobytes()
    return Tensor(dtype=dtype or array.dtype.name, shape=list(array.shape), data=data)


def decode(
    tensor: Tensor | RawTensor | None, field: str, dtype: str, ndim: int | tuple[int, ...]
) -> NDArray[Any]:
    """The array in ``tensor``, checked to have ``dtype`` and ``ndim`` dimensions (or one of
    the numbers ``ndim`` lists).

    The result is a read-only view of the message's bytes (no copy).
    """
    if tensor is None or (not tensor.dtype and not tensor.shape and not tensor.data):
        raise TensorError(f"{field} is missing")
    if tensor.dtype != dtype:
        raise TensorError(f"{field} must have dtype {dtype}, got {tensor.dtype!r}")
    shape = tuple(tensor.shape)
    # A dimension that is not an int: betterproto reads a packed field whose tag says another
    # wire type (a corrupted message) as None.
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if len(shape) not in ndims or any(not isinstance(d, int) or d < 0 for d in shape):
        said = " or ".join(map(str, ndims))
        raise TensorError(f"{field} must have {said} non-negative dimensions, got shape {shape}")
    expected = math.prod(shape) * _DTYPES[dtype].itemsize
    if len(tensor.data) != expected:
        raise TensorError(
            f"{field} has {len(tensor.data)} bytes of data, but shape {shape} of "
            f"{dtype} needs {expected}"
        )
    return np.frombuffer(tensor.data, dtype=_DTYPES[dtype]).reshape(shape)


def check_wire_dtype(dtype: str, field: str = "wire_dtype", *, empty_ok: bool = False) -> None:
    """``ValueError`` naming ``field`` unless ``dtype`` is one of :data:`FLOAT_DTYPES` (or,
    with ``empty_ok``, empty: a request's field left unset means float32)."""
    if dtype not in FLOAT_DTYPES and not (empty_ok and dtype == ""):
        empty = " (or empty)" if empty_ok else ""
        raise ValueError(f"{field} must be one of {', '.join(FLOAT_DTYPES)}{empty}, got {dtype!r}")


def narrow(array: NDArray[np.float32], dtype: str) -> NDArray[Any]:
    """``array`` as ``dtype`` (one of :data:`FLOAT_DTYPES`) for the wire: bfloat16 rounds to
    nearest even and keeps NaN a NaN; its result holds the bits as uint16. An array of another
    float dtype is rounded to float32 first, whatever ``dtype`` is."""
    if dtype == "float32":
        return np.ascontiguousarray(array, dtype="<f4")
    if dtype == "float16":
        # Finite values past float16's range are clipped to it: a gradient of 1e5 is big, not
        # infinite, and an inf would make the ps refuse the whole push. NaN and inf stay.
        return narrow_float16(array)
    check_wire_dtype(dtype, "wire dtype")
    return narrow_bfloat16(array)


def decode_floats(tensor: Tensor | RawTensor | None, field: str, ndim: int) -> NDArray[np.float32]:
    """A float array sent in any of :data:`FLOAT_DTYPES`, as float32 (float32 is a view of the
    message's bytes; the 16-bit dtypes are widened into a new array, exactly)."""
    dtype = tensor.dtype if tensor is not None else ""
    if dtype not in FLOAT_DTYPES:
        dtype = "float32"  # decode names what is wrong
    array = decode(tensor, field, dtype, ndim)
    if dtype == "float16":
        return widen_float16(array)
    if dtype == "bfloat16":
        return widen_bfloat16(array)
    return array
