"""Arrays passed to a numba kernel by address: many tables' arrays in one call.

Why. A request names dozens of variables (76 for seed_ctr), each its own table with its own
arrays, and :mod:`sniper.store._grouped` does a request's per-sign work in one kernel call.
That call needs every table's arrays in one argument: a table of addresses (``int64``), which
the kernel turns back into arrays with :func:`numba.carray`. A numba typed list of arrays
would do too, but building one costs about as much as the calls it saves. numba has no cast
from an integer to a typed pointer, so :func:`float32_at` and its siblings are intrinsics
(LLVM's ``inttoptr``).

The caller keeps every array alive and checked (dtype, shape, layout, alignment) while the
kernel runs: a kernel trusts an address as numba trusts an array's bounds.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, cast

from numba import types
from numba.extending import intrinsic
from numpy.typing import NDArray

__all__ = [
    "address",
    "float32_at",
    "float64_at",
    "int32_at",
    "int64_at",
    "uint16_at",
    "uint32_at",
    "uint64_at",
]


def address(array: NDArray[Any]) -> int:
    """Where ``array``'s data starts.

    Through ctypes where the array lends a writable C-contiguous buffer (0.6 us; numpy's
    ``ctypes.data`` and ``__array_interface__`` take 2-3 us, and a request asks for a few
    per variable), else through ``__array_interface__`` (asked first: a failed ctypes try
    costs more than both).
    """
    flags = array.flags
    if flags.c_contiguous and flags.writeable and array.size:
        return ctypes.addressof(ctypes.c_char.from_buffer(cast(Any, array)))
    return int(array.__array_interface__["data"][0])


def _pointer_cast(element: types.Type) -> Callable[[int], Any]:
    """An intrinsic taking an address (any integer) to a ``CPointer(element)``."""

    @intrinsic
    def cast_address(typingctx: Any, at: Any) -> Any:
        if not isinstance(at, types.Integer):
            return None
        pointer = types.CPointer(element)  # type: ignore[no-untyped-call]

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(pointer))

        return pointer(at), codegen

    return cast(Callable[[int], Any], cast_address)


float32_at = _pointer_cast(types.float32)
"""``float32_at(address)``: a float32 pointer for :func:`numba.carray`, inside a kernel."""
float64_at = _pointer_cast(types.float64)
"""The same for float64 arrays (an optimizer's parameters)."""
int64_at = _pointer_cast(types.int64)
"""The same for int64 arrays (rows, offsets, counters)."""
int32_at = _pointer_cast(types.int32)
"""The same for int32 arrays (Adam's per-row steps)."""
uint32_at = _pointer_cast(types.uint32)
"""The same for uint32 arrays (a table's ``slot_of_row``, its index slots, its sketch)."""
uint16_at = _pointer_cast(types.uint16)
"""The same for uint16 arrays (a table's row stamps)."""
uint64_at = _pointer_cast(types.uint64)
"""The same for uint64 arrays (a batch's signs)."""
