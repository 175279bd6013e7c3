"""Python-only properties of the placement hashes in ``sniper._hashing``."""

from __future__ import annotations

import math
import re
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from sniper._hashing import (
    MASK64,
    MAX_SHARDS,
    ps_for_variable,
    shard_of,
    shard_of_sign,
    splitmix64_mix,
    string_to_u64,
    strings_to_u64,
)

U64_MAX = (1 << 64) - 1
EDGE_SIGNS = [0, 1, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, U64_MAX - 1, U64_MAX]

u64s = st.integers(0, U64_MAX) | st.sampled_from(EDGE_SIGNS)
# shard_of returns int64, so its shards (< num_shards) are representable up to num_shards=2**63.
shard_counts = st.integers(1, 1 << 16) | st.integers(1, 1 << 63) | st.sampled_from([1 << 63])


def unwrapped_polynomial(name: str) -> int:
    """The 31-polynomial as the original system computed it: exact, never reduced mod 2**64.

    Written in closed form, sum(b_i * 31**(n-1-i)), rather than by Horner's rule, so that it is
    not a copy of the implementation it checks.
    """
    data = name.encode("utf-8")
    return sum(byte * 31 ** (len(data) - 1 - i) for i, byte in enumerate(data))


# -- string_to_u64 and ps_for_variable ------------------------------------------------------------


def test_string_to_u64_small_known_answers() -> None:
    assert string_to_u64("") == 0
    assert string_to_u64("a") == 97
    assert string_to_u64("ab") == 97 * 31 + 98
    assert string_to_u64("\x00") == 0
    assert string_to_u64("\xe9") == 0xC3 * 31 + 0xA9  # UTF-8 bytes, not the code point


def test_string_to_u64_wraps_at_2_64() -> None:
    """A 13+ byte name whose exact polynomial exceeds 2**64 hashes to that value mod 2**64."""
    name = "embedding_long_name_0"
    unwrapped = unwrapped_polynomial(name)
    assert unwrapped > 1 << 64
    assert string_to_u64(name) == unwrapped % (1 << 64)
    assert string_to_u64(name) != unwrapped
    # The placement the original system computed differs from the wrapped one for this name.
    # (With a power-of-two num_ps the two agree, since 2**64 is a multiple of it; the bug only
    # showed with other cluster sizes.)
    assert ps_for_variable(name, 7) == string_to_u64(name) % 7 == 6
    assert unwrapped % 7 == 1
    assert all(ps_for_variable(name, 1 << k) == unwrapped % (1 << k) for k in range(10))


@given(st.text())
@example("")
@example("\U0010ffff" * 20)
def test_string_to_u64_is_the_polynomial_mod_2_64(name: str) -> None:
    hashed = string_to_u64(name)
    assert 0 <= hashed <= MASK64
    assert hashed == unwrapped_polynomial(name) % (1 << 64)


@given(st.text(max_size=12).filter(lambda s: len(s.encode("utf-8")) <= 12))
def test_names_of_at_most_12_bytes_never_reach_2_64(name: str) -> None:
    """Why the original bug hid: up to 12 bytes the exact polynomial stays below 2**64, so the
    wrapping and non-wrapping hashes agree and short test names placed correctly."""
    assert unwrapped_polynomial(name) < 1 << 64


@given(st.text(min_size=13).filter(lambda s: s[0] >= " "))
@example("abcdefghijklm")
@example(" " * 13)
def test_names_of_13_or_more_bytes_starting_printable_always_wrap(name: str) -> None:
    """Every 13+ byte name whose first byte is at least 0x18 (so any name starting with a
    printable or non-ASCII character) overflows, since 24 * 31**12 > 2**64: exactly the names
    the original system's unwrapped Python hash placed differently from Rust and C++."""
    assert unwrapped_polynomial(name) >= 1 << 64


@given(st.lists(st.text(), max_size=50))
@example([])
@example([""])
@example(["", "a" * 40, "\x00", "\U0001f600"])
def test_strings_to_u64_equals_scalar(names: list[str]) -> None:
    hashes = strings_to_u64(names)
    assert hashes.dtype == np.uint64
    assert hashes.shape == (len(names),)
    assert hashes.tolist() == [string_to_u64(name) for name in names]


@given(st.text(), st.integers(1, 1 << 16) | st.integers(1, 1 << 70))
def test_ps_for_variable_is_hash_mod_num_ps(name: str, num_ps: int) -> None:
    ps = ps_for_variable(name, num_ps)
    assert type(ps) is int
    assert 0 <= ps < num_ps
    assert ps == string_to_u64(name) % num_ps


# -- splitmix64_mix, shard_of_sign and shard_of ---------------------------------------------------


def test_splitmix64_mix_matches_the_reference_generator() -> None:
    """splitmix64 seeded with 0 outputs mix(k * 0x9E3779B97F4A7C15) for k = 1, 2, 3; these are
    the published first outputs of the reference implementation."""
    golden = 0x9E3779B97F4A7C15
    outputs = [splitmix64_mix(k * golden % (1 << 64)) for k in (1, 2, 3)]
    assert outputs == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    assert splitmix64_mix(0) == 0


@settings(max_examples=300)
@given(st.lists(u64s, max_size=64), shard_counts)
@example([], 1)
@example(EDGE_SIGNS, 1)
@example(EDGE_SIGNS, 7)
@example(EDGE_SIGNS, 1 << 63)
def test_shard_of_equals_shard_of_sign(signs: list[int], num_shards: int) -> None:
    expected = [shard_of_sign(sign, num_shards) for sign in signs]
    as_uint64 = shard_of(np.array(signs, dtype=np.uint64), num_shards)
    as_list = shard_of(signs, num_shards)  # mixes ints above 2**63 with small ones
    for shards in (as_uint64, as_list):
        assert shards.dtype == np.int64
        assert shards.shape == (len(signs),)
        assert shards.tolist() == expected
    if all(sign < 1 << 63 for sign in signs):
        assert shard_of(np.array(signs, dtype=np.int64), num_shards).tolist() == expected


@given(u64s, shard_counts | st.integers(1, MAX_SHARDS))
def test_shard_of_sign_is_mix_mod_n(sign: int, num_shards: int) -> None:
    shard = shard_of_sign(sign, num_shards)
    assert type(shard) is int
    assert 0 <= shard < num_shards
    assert shard == splitmix64_mix(sign) % num_shards


@pytest.mark.parametrize("num_shards", [MAX_SHARDS + 1, 1 << 80])
def test_more_shards_than_int64_holds_is_refused(num_shards: int) -> None:
    message = f"num_shards must be at most 2**63 (shards are int64), got {num_shards}"
    with pytest.raises(ValueError, match=exactly(message)):
        shard_of_sign(1, num_shards)
    with pytest.raises(ValueError, match=exactly(message)):
        shard_of(np.array([1], dtype=np.uint64), num_shards)


@pytest.mark.parametrize("num_shards", [1, 2, 3, 7, 16, 64, 1000, 1 << 16, 1 << 63])
def test_shard_of_dtype_and_range(num_shards: int) -> None:
    rng = np.random.default_rng(num_shards)
    signs = np.concatenate(
        [
            rng.integers(0, U64_MAX, size=10_000, dtype=np.uint64, endpoint=True),
            np.array(EDGE_SIGNS, dtype=np.uint64),
        ]
    )
    shards = shard_of(signs, num_shards)
    assert shards.dtype == np.int64
    assert shards.shape == signs.shape
    assert int(shards.min()) >= 0
    assert int(shards.max()) < num_shards


@pytest.mark.parametrize(
    "signs",
    [
        np.array([], dtype=np.uint64),
        np.array([], dtype=np.int64),
        np.array([], dtype=np.uint32),
        [],
        (),
    ],
    ids=["uint64", "int64", "uint32", "list", "tuple"],
)
def test_shard_of_empty(signs: object) -> None:
    shards = shard_of(signs, 7)  # type: ignore[arg-type]
    assert shards.dtype == np.int64
    assert shards.shape == (0,)


def test_shard_of_keeps_the_shape_of_its_input() -> None:
    signs = np.arange(12, dtype=np.uint64).reshape(3, 4)
    shards = shard_of(signs, 5)
    assert shards.shape == (3, 4)
    assert shards.ravel().tolist() == [shard_of_sign(s, 5) for s in range(12)]


# -- near-uniformity ------------------------------------------------------------------------------

# A false alarm rate of one in a million per check; the samples are also fixed, so a passing
# test passes on every run.
FALSE_ALARM_RATE = 1e-6
SAMPLE_SIZE = 1_000_000
UNIFORMITY_SHARD_COUNTS = [2, 7, 16, 64, 1000]


def chi_square_critical_value(degrees_of_freedom: int, false_alarm_rate: float) -> float:
    """The upper ``false_alarm_rate`` quantile of chi-square, by Wilson and Hilferty (1931).

    (X / k) ** (1/3) is close to normal with mean 1 - 2/(9k) and variance 2/(9k). For k = 1 the
    approximation overshoots the exact quantile (27.5 against 23.9 at 1e-6), which only makes
    the test more lenient, never flaky.
    """
    k = degrees_of_freedom
    z = NormalDist().inv_cdf(1.0 - false_alarm_rate)
    spread = 2.0 / (9.0 * k)
    return k * (1.0 - spread + z * math.sqrt(spread)) ** 3


def chi_square_statistic(shards: NDArray[np.int64], num_shards: int) -> float:
    observed = np.bincount(shards, minlength=num_shards).astype(np.float64)
    expected = shards.size / num_shards
    return float(((observed - expected) ** 2 / expected).sum())


def test_chi_square_critical_value_matches_tables() -> None:
    """Against published chi-square quantiles (p = 0.05 and p = 0.001)."""
    assert chi_square_critical_value(10, 0.05) == pytest.approx(18.307, rel=2e-3)
    assert chi_square_critical_value(100, 0.001) == pytest.approx(149.449, rel=2e-3)
    assert chi_square_critical_value(999, 1e-6) > 999


def _random_signs() -> NDArray[np.uint64]:
    rng = np.random.default_rng(20240601)
    return rng.integers(0, U64_MAX, size=SAMPLE_SIZE, dtype=np.uint64, endpoint=True)


def _consecutive_signs() -> NDArray[np.uint64]:
    return np.arange(SAMPLE_SIZE, dtype=np.uint64)


def _field_prefixed_signs() -> NDArray[np.uint64]:
    # field << 48 | value, the layout some feature pipelines emit: 16 fields, consecutive values.
    fields = np.repeat(np.arange(16, dtype=np.uint64), SAMPLE_SIZE // 16)
    values = np.tile(np.arange(SAMPLE_SIZE // 16, dtype=np.uint64), 16)
    return (fields << np.uint64(48)) | values


def _strided_signs() -> NDArray[np.uint64]:
    # Multiples of 56000 = lcm(2, 7, 16, 64, 1000), which a plain `sign % n` would send to
    # shard 0 for every shard count checked here.
    return np.arange(SAMPLE_SIZE, dtype=np.uint64) * np.uint64(56_000)


SIGN_SAMPLES = {
    "random": _random_signs,
    "consecutive": _consecutive_signs,
    "field_prefixed": _field_prefixed_signs,
    "strided": _strided_signs,
}


@pytest.mark.parametrize("sample", sorted(SIGN_SAMPLES))
def test_shard_of_is_near_uniform(sample: str) -> None:
    """Chi-square goodness of fit of ``shard_of`` to the uniform distribution over shards, for
    random signs and for the adversarial regular patterns that the finalizer must spread."""
    signs = SIGN_SAMPLES[sample]()
    assert signs.size == SAMPLE_SIZE
    for num_shards in UNIFORMITY_SHARD_COUNTS:
        statistic = chi_square_statistic(shard_of(signs, num_shards), num_shards)
        critical = chi_square_critical_value(num_shards - 1, FALSE_ALARM_RATE)
        assert statistic < critical, (sample, num_shards, statistic, critical)


def test_chi_square_check_rejects_an_unmixed_modulo() -> None:
    """The uniformity check has teeth: plain ``sign % n`` on strided signs fails it."""
    signs = _strided_signs()
    for num_shards in (7, 1000):
        naive = (signs % np.uint64(num_shards)).astype(np.int64)
        statistic = chi_square_statistic(naive, num_shards)
        assert statistic > 100 * chi_square_critical_value(num_shards - 1, FALSE_ALARM_RATE)


# -- errors ---------------------------------------------------------------------------------------


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


def test_ps_for_variable_rejects_zero_ps() -> None:
    with pytest.raises(ValueError, match=exactly("num_ps must be at least 1, got 0")):
        ps_for_variable("x", 0)
    with pytest.raises(ValueError, match=exactly("num_ps must be at least 1, got -2")):
        ps_for_variable("x", -2)


@pytest.mark.parametrize(("value", "kind"), [(1.0, "float"), (True, "bool"), ("3", "str")])
def test_counts_must_be_ints(value: object, kind: str) -> None:
    with pytest.raises(TypeError, match=exactly(f"num_ps must be an int, got {kind}")):
        ps_for_variable("x", value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=exactly(f"num_shards must be an int, got {kind}")):
        shard_of([1], value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=exactly(f"num_shards must be an int, got {kind}")):
        shard_of_sign(1, value)  # type: ignore[arg-type]


def test_shard_of_rejects_zero_shards() -> None:
    signs = np.arange(4, dtype=np.uint64)
    with pytest.raises(ValueError, match=exactly("num_shards must be at least 1, got 0")):
        shard_of(signs, 0)
    with pytest.raises(ValueError, match=exactly("num_shards must be at least 1, got 0")):
        shard_of_sign(5, 0)


def negative_signs_message(dtype: str) -> str:
    return (
        f"signs must be unsigned 64-bit integers (dtype uint64), got dtype {dtype} "
        "with values outside [0, 2**64); signs are never negative"
    )


@pytest.mark.parametrize(
    ("signs", "dtype"),
    [
        (np.array([-1], dtype=np.int64), "int64"),
        (np.array([5, -1, 7], dtype=np.int64), "int64"),
        (np.array([-(1 << 31)], dtype=np.int32), "int32"),
        ([-1], "object"),
        ([3, -1], "object"),
        ([U64_MAX, -1], "object"),
        ([1 << 64], "object"),
    ],
)
def test_shard_of_rejects_negative_or_oversized_signs(signs: object, dtype: str) -> None:
    """``-1`` is refused rather than reinterpreted as ``2**64 - 1``."""
    with pytest.raises(TypeError, match=exactly(negative_signs_message(dtype))):
        shard_of(signs, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("sign", [-1, -(1 << 63), 1 << 64])
def test_shard_of_sign_rejects_signs_outside_u64(sign: int) -> None:
    message = f"sign must be an unsigned 64-bit integer, got {sign}"
    with pytest.raises(ValueError, match=exactly(message)):
        shard_of_sign(sign, 3)


# -- inputs at the edges: each is computed right or refused with a clear error --------------------


@pytest.mark.parametrize("num_shards", [3 << 62, U64_MAX])
def test_shard_of_with_more_than_2_63_shards_is_right_or_refused(num_shards: int) -> None:
    signs = np.array(EDGE_SIGNS, dtype=np.uint64)
    try:
        shards = shard_of(signs, num_shards)
    except ValueError:
        return
    assert shards.tolist() == [shard_of_sign(int(s), num_shards) for s in EDGE_SIGNS]


@pytest.mark.parametrize("sign", [5, np.array(5, dtype=np.uint64)], ids=["int", "0d-uint64-array"])
def test_shard_of_on_a_scalar_is_right_or_refused(sign: object) -> None:
    try:
        shards = shard_of(sign, 3)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return
    assert np.asarray(shards).tolist() == shard_of_sign(5, 3)


def test_shard_of_accepts_a_list_of_numpy_integers() -> None:
    signs = np.array([5, U64_MAX], dtype=np.uint64)
    assert shard_of(list(signs), 3).tolist() == shard_of(signs, 3).tolist()


def test_numpy_integer_counts_are_right_or_refused() -> None:
    name = "embedding_long_name_0"  # string_to_u64(name) > 2**63
    assert string_to_u64(name) >= 1 << 63
    try:
        ps = ps_for_variable(name, np.int64(7))  # type: ignore[arg-type]
        shard = shard_of_sign(U64_MAX, np.int64(7))  # type: ignore[arg-type]
    except TypeError:
        return
    assert (type(ps), ps) == (int, ps_for_variable(name, 7))
    assert (type(shard), shard) == (int, shard_of_sign(U64_MAX, 7))
