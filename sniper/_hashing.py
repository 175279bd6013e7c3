"""Hashes that decide where data lives: variable -> ps, and sign -> shard.

These functions are a wire contract, not an implementation detail. A hub written in Rust, a
trainer in C++ and a ps in Python must send the same variable to the same ps, or lookups land on
a server that never saw the signs. The original system broke exactly here: its Python
``string_to_u64`` did not wrap at 2**64, so every name of 13 or more bytes was placed differently
from the Rust and C++ sides. Every function below is therefore defined by explicit modular
arithmetic and checked against C, Rust and JavaScript ports in ``tests/hashing``.

Definitions (all arithmetic modulo 2**64):

- ``string_to_u64(s)``: ``h = 0``; for each byte ``b`` of ``s.encode("utf-8")``: ``h = h*31 + b``.
- ``ps_for_variable(name, num_ps) = string_to_u64(name) % num_ps``.
- ``shard_of_sign(sign, n) = splitmix64_mix(sign) % n`` where ``splitmix64_mix`` is the
  splitmix64 finalizer (Steele, Lea and Flood, 2014)::

      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
      z = (z ^ (z >> 27)) * 0x94D049BB133111EB
      z =  z ^ (z >> 31)

  Signs are often already hashes, but some producers emit small consecutive integers or
  ``field << 48 | value`` patterns; the finalizer spreads any of those evenly over shards.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "MASK64",
    "ps_for_variable",
    "shard_of",
    "shard_of_sign",
    "splitmix64_mix",
    "string_to_u64",
    "strings_to_u64",
]

MASK64 = (1 << 64) - 1
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB


def string_to_u64(s: str) -> int:
    """Return the 31-polynomial hash of ``s``'s UTF-8 bytes, wrapping at 2**64."""
    h = 0
    for byte in s.encode("utf-8"):
        h = (h * 31 + byte) & MASK64
    return h


def strings_to_u64(names: Sequence[str]) -> NDArray[np.uint64]:
    """Vectorized :func:`string_to_u64`: element ``i`` equals ``string_to_u64(names[i])``.

    The names are laid out as a zero-padded byte matrix and hashed one byte column at a time for
    all names at once (Horner's rule in wrapping uint64). A name shorter than the longest one
    stops updating once its bytes run out, so padding never changes its hash.
    """
    encoded = [name.encode("utf-8") for name in names]
    out = np.zeros(len(encoded), dtype=np.uint64)
    if not encoded:
        return out
    lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
    width = int(lengths.max())
    matrix = np.zeros((len(encoded), width), dtype=np.uint8)
    for row, data in enumerate(encoded):
        matrix[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
    thirty_one = np.uint64(31)
    for column in range(width):
        active = lengths > column
        updated = out * thirty_one + matrix[:, column].astype(np.uint64)
        out = np.where(active, updated, out)
    return out


def ps_for_variable(name: str, num_ps: int) -> int:
    """Return the index of the ps that owns variable ``name`` in a cluster of ``num_ps``."""
    _check_count("num_ps", num_ps)
    return string_to_u64(name) % num_ps


def splitmix64_mix(x: int) -> int:
    """Return the splitmix64 finalizer of the 64-bit integer ``x``."""
    z = x & MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & MASK64
    return z ^ (z >> 31)


def shard_of_sign(sign: int, num_shards: int) -> int:
    """Return the shard of one sign; equal to ``shard_of([sign], num_shards)[0]``."""
    _check_count("num_shards", num_shards)
    if not 0 <= sign <= MASK64:
        raise ValueError(f"sign must be an unsigned 64-bit integer, got {sign}")
    return splitmix64_mix(sign) % num_shards


def shard_of(signs: ArrayLike, num_shards: int) -> NDArray[np.int64]:
    """Return the shard of every sign, as int64 in ``[0, num_shards)``.

    ``signs`` must hold unsigned 64-bit integers: any unsigned dtype, or integers that are all
    non-negative. A negative value is refused rather than reinterpreted, because ``-1`` and
    ``2**64 - 1`` would silently become the same sign.
    """
    _check_count("num_shards", num_shards)
    z = _as_u64(signs, "signs")
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MUL1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MUL2)
    z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(num_shards)).astype(np.int64)


def _as_u64(values: ArrayLike, what: str) -> NDArray[np.uint64]:
    # A Python list that mixes ints above 2**63 with small ones would become float64 and lose
    # bits; going through dtype=object keeps every int exact.
    array = values if isinstance(values, np.ndarray) else np.array(values, dtype=object)
    if (
        array.dtype.kind == "O"
        and array.size
        and all(isinstance(v, int) and 0 <= v <= MASK64 for v in array.flat)
    ):
        return array.astype(np.uint64)
    if array.dtype.kind == "u":
        return array.astype(np.uint64, copy=False)
    if array.size == 0:
        return np.zeros(array.shape, dtype=np.uint64)
    if array.dtype.kind == "i" and int(array.min()) >= 0:
        return array.astype(np.uint64)
    raise TypeError(
        f"{what} must be unsigned 64-bit integers (dtype uint64), got dtype {array.dtype} "
        f"with values outside [0, 2**64); signs are never negative"
    )


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
