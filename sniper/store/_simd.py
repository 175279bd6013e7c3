"""A 16-lane float32 vector for numba kernels, held in registers across loop iterations.

Why. Pooling adds rows into ``out[b]``; written as ``out[b, d] += weights[row, d]`` numba
compiles it to a load, add and store of ``out[b]`` for every row, and LLVM cannot keep the sum
in registers because it cannot prove that ``out`` and ``weights`` do not overlap. Each row's
add then waits for the previous row's store to be forwarded to its load (about 10 cycles a
row, the whole cost of pooling rows that are in cache). A numba variable of this type is an
LLVM ``<16 x float>``: two AVX registers that a bag's rows are added into, stored once per bag.
Measured on the store bench's huge variable (135k signs a shard, dim 16, one thread): 0.75 ms
for the scalar loop, 0.25 ms with this accumulator and a longer prefetch distance.

The lanes are added one by one, as IEEE float32 adds without fast-math flags: each lane gets
exactly the sums, in the same order, that the scalar loop gives (tests/store/test_kernels.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, register_model

__all__ = ["LANES", "add16", "load16", "store16"]

LANES = 16
"""Lanes of the vector: the dim of the rows the specialized kernels pool."""

_VECTOR = ir.VectorType(ir.FloatType(), LANES)


class Float32x16(types.Type):
    """numba's type of a ``<16 x float>`` value (no Python object has it)."""

    def __init__(self) -> None:
        super().__init__(name="float32x16")


float32x16 = Float32x16()


@register_model(Float32x16)
class _Float32x16Model(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Any) -> None:
        super().__init__(dmm, fe_type, _VECTOR)  # type: ignore[no-untyped-call]


def _is_float32_array(array: Any) -> bool:
    """A C-contiguous float32 array: its flat index is an offset from its data pointer."""
    return isinstance(array, types.Array) and array.dtype == types.float32 and array.layout == "C"


def _vector_pointer(context: Any, builder: Any, array_type: Any, array: Any, index: Any) -> Any:
    """``&array.flat[index]`` as a ``<16 x float>*`` (``array`` C-contiguous)."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [index]), _VECTOR.as_pointer())


@intrinsic
def _load16(typingctx: Any, array: Any, flat_index: Any) -> Any:
    """``array.flat[flat_index : flat_index + 16]`` of a C-contiguous float32 array."""
    if not _is_float32_array(array) or not isinstance(flat_index, types.Integer):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        # align 4: any row start is valid; on aligned rows the CPU loads at full speed anyway.
        return builder.load(_vector_pointer(context, builder, sig.args[0], *args), align=4)

    return float32x16(array, flat_index), codegen


@intrinsic
def _store16(typingctx: Any, array: Any, flat_index: Any, value: Any) -> Any:
    """``array.flat[flat_index : flat_index + 16] = value``."""
    if (
        not _is_float32_array(array)
        or not isinstance(flat_index, types.Integer)
        or not isinstance(value, Float32x16)
    ):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        pointer = _vector_pointer(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], pointer, align=4)
        return context.get_dummy_value()

    return types.void(array, flat_index, value), codegen


@intrinsic
def _add16(typingctx: Any, a: Any, b: Any) -> Any:
    """Lane-wise ``a + b`` (an IEEE add per lane, no reassociation)."""
    if not isinstance(a, Float32x16) or not isinstance(b, Float32x16):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.fadd(args[0], args[1])

    return float32x16(a, b), codegen


# The intrinsics, typed for callers; only numba kernels can call them. Bounds are the
# caller's to keep: like the kernels' indexing, they are not checked.
load16 = cast(Callable[[Any, int], Any], _load16)
"""``load16(array, flat_index)``: 16 float32 lanes from a C-contiguous float32 array."""
store16 = cast(Callable[[Any, int, Any], None], _store16)
"""``store16(array, flat_index, value)``: write 16 lanes back."""
add16 = cast(Callable[[Any, Any], Any], _add16)
"""``add16(a, b)``: lane-wise sum of two vectors."""
