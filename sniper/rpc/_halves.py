"""16-bit floats for the wire: float32 narrowed to bfloat16 or float16 and widened back, each
in one compiled pass.

``wire_dtype = "bfloat16"`` or ``"float16"`` halves the bytes of every pooled embedding and
gradient between trainer and ps, and each of those arrays is narrowed on one side and widened
on the other every batch. With numpy these were several passes each: float16's narrowing
clipped, tested for inf, selected and then cast, and numpy casts float32 to float16 in
software. On a seed_ctr batch at scale 1.0 (1.24M values each way) of pooled-sized values
that was 11.7 ms to narrow and 2.0 ms to widen for float16, 4.5 and 0.8 ms for bfloat16,
against 0.4 ms to copy the float32 array; gradients, whose values (about 1e-6) are float16
subnormals, took numpy 88 ms a batch to narrow. float16 on the wire made the processes job
twice as slow as float32 (measured: 3,587-4,873 against 6,665-7,691 examples/s; with these
kernels 8,258-9,055).

The kernels give the same bits as the numpy code they replace, which the tests check:

- bfloat16 rounds to nearest even and makes every NaN the quiet NaN ``0x7FC0``;
- float16 clips finite values past its range to +-65504 (a big gradient stays big instead of
  turning into an inf the ps would refuse), keeps infs and NaNs, and rounds to nearest even
  as numpy's cast does (``npy_floatbits_to_halfbits``), subnormals included;
- widening float16 reads a table of all 65,536 values made by numpy's own cast, so it is
  exact by construction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["narrow_bfloat16", "narrow_float16", "widen_bfloat16", "widen_float16"]

_FLOAT16_TABLE = (
    np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
).view(np.uint32)
"""The float32 bits of every float16, by its bits (256 KiB: stays in L2 while it is read)."""
_FLOAT16_TABLE.flags.writeable = False

_FLOAT16_MAX_BITS = np.uint32(0x477FE000)  # 65504.0, the largest finite float16
_BFLOAT16_NAN = np.uint16(0x7FC0)
_SIXTEEN = np.uint64(16)


@njit(nogil=True, cache=True)
def _bfloat16_bits(bits: NDArray[np.uint32], out: NDArray[np.uint16]) -> None:
    for i in range(bits.shape[0]):
        b = np.uint64(bits[i])  # 64 bits: the rounding carry cannot wrap
        if (b & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000):  # NaN
            out[i] = _BFLOAT16_NAN
        else:
            odd = (b >> _SIXTEEN) & np.uint64(1)  # ties go to the even neighbour
            out[i] = np.uint16((b + np.uint64(0x7FFF) + odd) >> _SIXTEEN)


@njit(nogil=True, cache=True)
def _half_of(f: np.uint32) -> np.uint16:
    """float32 bits ``f`` as float16 bits, rounded to nearest even (numpy's
    ``npy_floatbits_to_halfbits``; a NaN keeps the top of its payload, as there)."""
    h_sgn = (f & np.uint32(0x80000000)) >> np.uint32(16)
    f_exp = f & np.uint32(0x7F800000)
    if f_exp >= np.uint32(0x47800000):  # inf, NaN, or past the range
        f_sig = f & np.uint32(0x007FFFFF)
        if f_exp == np.uint32(0x7F800000) and f_sig != np.uint32(0):
            ret = np.uint32(0x7C00) + (f_sig >> np.uint32(13))
            if ret == np.uint32(0x7C00):
                ret += np.uint32(1)  # still a NaN
            return np.uint16(h_sgn + ret)
        return np.uint16(h_sgn + np.uint32(0x7C00))
    if f_exp <= np.uint32(0x38000000):  # a subnormal half, or zero
        if f_exp < np.uint32(0x33000000):
            return np.uint16(h_sgn)
        e = f_exp >> np.uint32(23)
        f_sig = np.uint32(0x00800000) + (f & np.uint32(0x007FFFFF))
        f_sig >>= np.uint32(113) - e
        if (f_sig & np.uint32(0x3FFF)) != np.uint32(0x1000) or (f & np.uint32(0x7FF)) != 0:
            f_sig += np.uint32(0x1000)
        return np.uint16(h_sgn + (f_sig >> np.uint32(13)))
    h_exp = (f_exp - np.uint32(0x38000000)) >> np.uint32(13)
    f_sig = f & np.uint32(0x007FFFFF)
    if (f_sig & np.uint32(0x3FFF)) != np.uint32(0x1000):
        f_sig += np.uint32(0x1000)
    # A carry out of the significand moves into the exponent: the right answer.
    return np.uint16(h_sgn + h_exp + (f_sig >> np.uint32(13)))


@njit(nogil=True, cache=True)
def _float16_bits(bits: NDArray[np.uint32], out: NDArray[np.uint16]) -> None:
    for i in range(bits.shape[0]):
        f = bits[i]
        magnitude = f & np.uint32(0x7FFFFFFF)
        if _FLOAT16_MAX_BITS < magnitude < np.uint32(0x7F800000):  # finite, past the range
            f = (f & np.uint32(0x80000000)) | _FLOAT16_MAX_BITS
        out[i] = _half_of(f)


@njit(nogil=True, cache=True)
def _widen_float16_bits(
    halves: NDArray[np.uint16], table: NDArray[np.uint32], out: NDArray[np.uint32]
) -> None:
    for i in range(halves.shape[0]):
        out[i] = table[halves[i]]


@njit(nogil=True, cache=True)
def _widen_bfloat16_bits(halves: NDArray[np.uint16], out: NDArray[np.uint32]) -> None:
    for i in range(halves.shape[0]):
        out[i] = np.uint32(halves[i]) << np.uint32(16)


def _float32_bits(array: NDArray[Any]) -> NDArray[np.uint32]:
    """The bits of ``array`` as little-endian float32: another float dtype is rounded to
    float32 first, as the float32 wire sends it (so a float64 past float32's range is an inf
    in every wire dtype)."""
    return np.ascontiguousarray(array, dtype="<f4").reshape(-1).view("<u4")


def narrow_bfloat16(array: NDArray[Any]) -> NDArray[np.uint16]:
    """``array`` as bfloat16 bits, same shape."""
    out = np.empty(array.shape, dtype="<u2")
    _bfloat16_bits(_float32_bits(array), out.reshape(-1))
    return out


def narrow_float16(array: NDArray[Any]) -> NDArray[np.float16]:
    """``array`` as float16, same shape, finite values clipped to +-65504."""
    out = np.empty(array.shape, dtype="<u2")
    _float16_bits(_float32_bits(array), out.reshape(-1))
    return out.view("<f2")


def widen_float16(array: NDArray[Any]) -> NDArray[np.float32]:
    """``array`` (float16) as float32, exactly; a new array."""
    out = np.empty(array.shape, dtype="<u4")
    halves = np.ascontiguousarray(array, dtype="<f2").reshape(-1).view("<u2")
    _widen_float16_bits(halves, _FLOAT16_TABLE, out.reshape(-1))
    return out.view("<f4")


def widen_bfloat16(array: NDArray[np.uint16]) -> NDArray[np.float32]:
    """``array`` (bfloat16 bits) as float32, exactly; a new array."""
    out = np.empty(array.shape, dtype="<u4")
    _widen_bfloat16_bits(np.ascontiguousarray(array, dtype="<u2").reshape(-1), out.reshape(-1))
    return out.view("<f4")
