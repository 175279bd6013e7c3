"""The compiled 16-bit conversions give the same bits as the numpy code they replaced (kept
here as the reference), on bit patterns from the whole float32 range, and keep any shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sniper.rpc._halves import narrow_bfloat16, narrow_float16, widen_bfloat16, widen_float16

_FLOAT16_MAX = np.float32(65504.0)


def _numpy_float16(array: np.ndarray) -> np.ndarray:
    clipped = np.clip(array, -_FLOAT16_MAX, _FLOAT16_MAX)
    return np.where(np.isinf(array), array, clipped).astype("<f2")


def _numpy_bfloat16(array: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(array, dtype="<f4").view("<u4")
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16
    half = rounded.astype("<u2")
    half[np.isnan(array)] = 0x7FC0
    return half


_EDGES = {
    "float32 zero and subnormals": [0x00000000, 0x00000001, 0x007FFFFF, 0x00800000],
    "float16's subnormal range": [0x33000000, 0x33800000, 0x38000000, 0x38800000],
    "1.0 and ties at 11 and 8 bits": [0x3F800000, 0x3F801000, 0x3F803000, 0x3F808000],
    "65504 up to 65536": [0x477FE000, 0x477FEFFF, 0x477FF000, 0x47800000],
    "float32 max, inf and NaNs": [0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF],
}
"""Bit patterns where the conversions change branch (both signs, and a few either side)."""


def _edges() -> np.ndarray:
    anchors = np.array([bits for group in _EDGES.values() for bits in group], dtype=np.int64)
    near = (anchors[:, None] + np.arange(-3, 4)[None, :]).reshape(-1) % (1 << 31)
    both_signs = np.concatenate([near, near | (1 << 31)])
    return both_signs.astype(np.uint32)


def _patterns() -> np.ndarray:
    spread = np.arange(0, 1 << 32, 997, dtype=np.uint64).astype(np.uint32)  # every exponent
    random = np.random.default_rng(11).integers(0, 1 << 32, 1 << 18, dtype=np.uint64)
    return np.concatenate([_edges(), spread, random.astype(np.uint32)])


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    mismatch = np.nonzero(got.view(np.uint16) != want.view(np.uint16))[0]
    assert mismatch.size == 0, f"{mismatch.size} differ, first at index {mismatch[:5]}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's cast warns on overflow
def test_narrowing_gives_numpys_bits_across_the_float32_range() -> None:
    values = _patterns().view(np.float32)
    with np.errstate(all="ignore"):
        _same_bits(narrow_float16(values), _numpy_float16(values))
        _same_bits(narrow_bfloat16(values), _numpy_bfloat16(values))


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_narrowing_any_bits_matches_numpy(bits: list[int]) -> None:
    values = np.array(bits, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        _same_bits(narrow_float16(values), _numpy_float16(values))
        _same_bits(narrow_bfloat16(values), _numpy_bfloat16(values))


def test_widening_is_exact_for_every_16_bit_pattern() -> None:
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    as_float16 = widen_float16(every.view(np.float16))
    assert as_float16.dtype == np.float32
    want = every.view(np.float16).astype(np.float32)
    assert np.array_equal(as_float16.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(widen_bfloat16(every).view(np.uint32), every.astype(np.uint32) << 16)


@pytest.mark.parametrize(
    ("narrow", "widen"), [(narrow_float16, widen_float16), (narrow_bfloat16, widen_bfloat16)]
)
def test_shapes_and_strided_inputs_are_kept(
    narrow: Callable[[Any], Any], widen: Callable[[Any], Any]
) -> None:
    matrix = np.random.default_rng(2).normal(size=(6, 10)).astype(np.float32)
    block = matrix[:, 2:6]  # a column block: not contiguous, as a model input's is
    half = narrow(block)
    assert half.shape == (6, 4)
    back = widen(half)
    assert back.shape == (6, 4) and back.flags.c_contiguous
    assert np.allclose(back, block, rtol=2**-8)
    assert widen(narrow(np.empty((0, 16), np.float32))).shape == (0, 16)


def test_other_dtypes_and_byte_orders_are_converted_first() -> None:
    # Big-endian float16 widens to the same values; float64 narrows as its float32 rounding
    # does (as the float32 wire would send it), and widening never reads past its input.
    values = np.array([1.5, -2.25e-6, 65504.0, np.inf, 1e39], dtype=np.float64)
    with np.errstate(over="ignore"):
        as_float32 = values.astype(np.float32)
        for narrow in (narrow_float16, narrow_bfloat16):
            _same_bits(narrow(values), narrow(as_float32))
    half = narrow_float16(as_float32)
    big_endian = half.astype(">f2")
    assert np.array_equal(widen_float16(big_endian), widen_float16(half))
    many = np.arange(1 << 16, dtype=np.float64) / 16  # 4x the bytes of the float16 it means
    assert widen_float16(many).shape == many.shape
