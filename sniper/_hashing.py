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
- ``feature_sign(variable, value)``: the sign of one value of a user's column (a feature spec's
  sparse column, :mod:`sniper.data`), salted by the variable's name::

      h = splitmix64_mix(string_to_u64(variable))
      for each byte b of value: h = (h ^ b) * 0x100000001B3      (FNV-1a's step)
      sign = splitmix64_mix(h)

  ``value`` is bytes: a string's UTF-8 encoding, an integer's decimal text (``-12`` is the
  bytes ``2d 31 32``), so the integer 12 and the string ``"12"`` are one sign (a CSV column
  and a Parquet column of the same table agree whatever types they were read as). The salt
  starts FNV from a state of the variable's own: a value in two variables is two signs, and
  in two columns that share a variable one sign. FNV-1a rather than the 31-polynomial of
  names, because that one collides on short values (``"Aa"`` and ``"BB"`` are both 2112);
  each byte step is a bijection of the state, so two salts never give one value one sign.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "MASK64",
    "feature_sign",
    "feature_signs",
    "mix_u64",
    "ps_for_variable",
    "shard_of",
    "shard_of_sign",
    "splitmix64_mix",
    "string_to_u64",
    "strings_to_u64",
]

MASK64 = (1 << 64) - 1
MAX_SHARDS = 1 << 63
"""Shard ids are int64, so a table or cluster has at most 2**63 shards."""
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
FNV_PRIME = 0x100000001B3
"""FNV-1a's 64-bit prime: the multiplier of :func:`feature_sign`'s byte step."""


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
    return string_to_u64(name) % _check_count("num_ps", num_ps)


def splitmix64_mix(x: int) -> int:
    """Return the splitmix64 finalizer of the 64-bit integer ``x``."""
    z = x & MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & MASK64
    return z ^ (z >> 31)


def shard_of_sign(sign: int, num_shards: int) -> int:
    """Return the shard of one sign; equal to ``shard_of([sign], num_shards)[0]``."""
    count = _check_count("num_shards", num_shards, limit=MAX_SHARDS)
    if not _is_integer(sign):
        raise TypeError(f"sign must be an int, got {type(sign).__name__}")
    if not 0 <= int(sign) <= MASK64:
        raise ValueError(f"sign must be an unsigned 64-bit integer, got {sign}")
    return splitmix64_mix(int(sign)) % count


def shard_of(signs: ArrayLike, num_shards: int) -> NDArray[np.int64]:
    """Return the shard of every sign, as int64 in ``[0, num_shards)``, in the input's shape.

    ``signs`` must hold unsigned 64-bit integers: any unsigned dtype, or integers that are all
    non-negative. A negative value is refused rather than reinterpreted, because ``-1`` and
    ``2**64 - 1`` would silently become the same sign.
    """
    count = _check_count("num_shards", num_shards, limit=MAX_SHARDS)
    array = _as_u64(signs, "signs")
    # Work on a 1-D view: numpy computes 0-d input with scalar arithmetic, which warns on the
    # intended wrap-around of the multiplications.
    z = mix_u64(array.reshape(-1))
    return (z % np.uint64(count)).astype(np.int64).reshape(array.shape)


def mix_u64(values: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """Vectorized :func:`splitmix64_mix` (wrapping uint64 arithmetic) of a 1-D array."""
    z = (values ^ (values >> np.uint64(30))) * np.uint64(_MUL1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MUL2)
    return z ^ (z >> np.uint64(31))


def feature_sign(variable: str, value: bytes | str | int) -> int:
    """The sign of one value of variable ``variable`` (see the module doc): a string hashes
    its UTF-8 bytes, an integer its decimal text."""
    data = _value_bytes(value)
    h = splitmix64_mix(string_to_u64(variable))
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & MASK64
    return splitmix64_mix(h)


def feature_signs(
    variable: str, data: NDArray[np.uint8], offsets: NDArray[np.int64]
) -> NDArray[np.uint64]:
    """Vectorized :func:`feature_sign` of ``len(offsets) - 1`` values laid out as Arrow lays
    out a string column: value ``i`` is ``data[offsets[i]:offsets[i + 1]]``.

    A numba kernel (compiled on first use, cached on disk, without the GIL) walks the bytes
    once: a hub hashes every value of every string column of every batch here.
    """
    kernel = _feature_signs_kernel()
    out = np.empty(max(len(offsets) - 1, 0), dtype=np.uint64)
    salt = np.uint64(splitmix64_mix(string_to_u64(variable)))
    kernel(np.ascontiguousarray(data, dtype=np.uint8), np.asarray(offsets, np.int64), salt, out)
    return out


def _feature_signs_kernel() -> Any:
    """The compiled byte loop of :func:`feature_signs`, imported on first use: numba stays out
    of ``import sniper.hashing`` for clients that only place variables."""
    from sniper._hashing_kernel import feature_signs_kernel

    return feature_signs_kernel


def _value_bytes(value: bytes | str | int) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if _is_integer(value):
        return str(int(value)).encode("ascii")
    raise TypeError(f"a feature value is bytes, a string or an int, got {type(value).__name__}")


def _is_integer(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _as_u64(values: ArrayLike, what: str) -> NDArray[np.uint64]:
    # A Python list that mixes ints above 2**63 with small ones would become float64 and lose
    # bits; going through dtype=object keeps every int exact.
    array = values if isinstance(values, np.ndarray) else np.array(values, dtype=object)
    kind = array.dtype.kind
    if kind == "u":
        return array.astype(np.uint64, copy=False)
    if kind == "i" and (array.size == 0 or int(array.min()) >= 0):
        return array.astype(np.uint64)
    if kind == "O" and all(_is_integer(v) and 0 <= int(v) <= MASK64 for v in array.flat):
        return np.array([int(v) for v in array.flat], dtype=np.uint64).reshape(array.shape)
    raise TypeError(
        f"{what} must be unsigned 64-bit integers (dtype uint64), got dtype {array.dtype} "
        f"with values outside [0, 2**64); signs are never negative"
    )


def _check_count(name: str, value: int, limit: int | None = None) -> int:
    """Validate a count of ps or shards and return it as a Python int."""
    if not _is_integer(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    count = int(value)
    if count < 1:
        raise ValueError(f"{name} must be at least 1, got {count}")
    if limit is not None and count > limit:
        raise ValueError(f"{name} must be at most 2**63 (shards are int64), got {count}")
    return count
