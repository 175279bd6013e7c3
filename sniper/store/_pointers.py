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

import numpy as np
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

    Read from the array's own struct: numpy's ``PyArrayObject_fields`` is the object header,
    then ``char *data`` (the field ``PyArray_DATA`` reads). 0.1 us, whatever the array's
    layout or flags: ctypes' ``from_buffer`` took 0.4 us and only lends writable C-contiguous
    buffers, and ``__array_interface__`` (which builds a dict) 0.9-1.1 us. A criteo batch asks
    for 141 addresses, 52 of them of gradient blocks and read-only arrays; a seed_ctr 0.02
    batch for 417. When this module loads, the field is checked against
    ``__array_interface__`` on arrays of every kind; where it disagrees (another build of
    Python or numpy) every address comes from ``__array_interface__``.
    """
    if not issubclass(type(array), np.ndarray):  # not isinstance: __class__ can be faked
        raise TypeError(f"an address is an ndarray's, got {type(array).__name__}")
    if _DATA_FIELD is None:
        return _address_by_interface(array)
    return _DATA_FIELD(id(array) + _DATA_OFFSET).value or 0


def _address_by_interface(array: NDArray[Any]) -> int:
    return int(array.__array_interface__["data"][0])


_DATA_OFFSET = object.__basicsize__
"""Bytes of the object header, after which ``PyArrayObject_fields`` keeps its data pointer."""


def _data_field() -> Callable[[int], ctypes.c_void_p] | None:
    """``ctypes.c_void_p.from_address`` if every array below has its data pointer right after
    its object header, else None."""
    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    arrays = (
        base,
        base[2:],
        base[:, 3:5].T,
        np.frombuffer(bytes(64), np.float32),  # read-only, not owning its data
        np.empty(0, np.float32),
        np.zeros(3, np.uint64)[1:],
    )
    read = ctypes.c_void_p.from_address
    if all((read(id(a) + _DATA_OFFSET).value or 0) == _address_by_interface(a) for a in arrays):
        return read
    return None


_DATA_FIELD = _data_field()


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
