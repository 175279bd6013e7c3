"""C, Rust and JavaScript ports agree with Python on every placement hash.

A parameter server cluster only works if every process sends a variable to the same ps and a
sign to the same shard, whatever language it is written in. The ports in ``ports/`` are written
from the definitions in ``sniper/_hashing.py``; these tests drive them with arbitrary inputs and
check that each equals Python, and hence that C == Rust == JavaScript == Python.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sniper._contracts._hash import (
    EDGE_NAMES,
    EDGE_SHARD_COUNTS,
    EDGE_SIGNS,
    LARGE_SHARD_COUNTS,
    NAME_CHARS,
    TRICKY_CHARS,
    check_hash_command,
)
from sniper._hashing import feature_sign, ps_for_variable, shard_of_sign, string_to_u64
from tests.hashing._ports import LANGUAGES, U64_MAX, HashPort, Ports, shared_ports

PORT_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


texts = st.text()
astral_texts = st.text(st.characters(min_codepoint=0x10000), min_size=1)
tricky_texts = st.text(st.sampled_from(TRICKY_CHARS) | st.characters(codec="utf-8"))
long_names = st.text(NAME_CHARS, min_size=13, max_size=200)
long_unicode_names = st.text(min_size=13, max_size=100)
signs = st.integers(0, U64_MAX) | st.sampled_from(EDGE_SIGNS)
shard_counts = (
    st.integers(1, 1 << 16) | st.sampled_from(LARGE_SHARD_COUNTS) | st.integers(1, 1 << 63)
)


@pytest.fixture(scope="session")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    with shared_ports(tmp_path_factory) as shared:
        yield shared


def assert_strings_agree(port: HashPort, names: list[str]) -> None:
    expected = [string_to_u64(name) for name in names]
    assert port.string_to_u64(names) == expected
    assert port.bytes_to_u64([name.encode("utf-8") for name in names]) == expected


@pytest.mark.parametrize("language", LANGUAGES)
def test_port_builds_and_answers(ports: Ports, language: str) -> None:
    """The toolchain exists and the port runs; a missing ``cc``, ``rustc`` or ``node`` fails."""
    port = ports.get(language)
    assert port.string_to_u64(["", "a", "ab"]) == [0, 97, 97 * 31 + 98]
    assert port.shard_of_sign([(0, 1), (U64_MAX, 1)]) == [0, 0]


@pytest.mark.parametrize("language", LANGUAGES)
@PORT_SETTINGS
@given(names=st.lists(texts, max_size=16))
@example(names=[])
@example(names=[""])
@example(names=["\x00", "\x00\x00", "a\x00b", "\x00" * 13])
@example(names=["\U0001f600", "\U0010ffff", "emb_\U0001f600_0"])
def test_string_to_u64_agrees_on_arbitrary_text(
    ports: Ports, language: str, names: list[str]
) -> None:
    """Any text without surrogates, hashed by a port, matches Python ``string_to_u64``."""
    assert_strings_agree(ports.get(language), names)


@pytest.mark.parametrize("language", LANGUAGES)
@PORT_SETTINGS
@given(names=st.lists(astral_texts | tricky_texts, min_size=1, max_size=16))
def test_string_to_u64_agrees_on_astral_and_control_text(
    ports: Ports, language: str, names: list[str]
) -> None:
    """Astral-plane characters (4 UTF-8 bytes; surrogate pairs in JavaScript), NUL, newlines
    and a leading BOM hash the same in every port."""
    assert_strings_agree(ports.get(language), names)


@pytest.mark.parametrize("language", LANGUAGES)
@PORT_SETTINGS
@given(names=st.lists(long_names | long_unicode_names, min_size=1, max_size=16))
@example(names=["abcdefghijklm", "embedding_100", "sparse_embedding_weights_0"])
def test_string_to_u64_agrees_on_names_of_13_or_more_bytes(
    ports: Ports, language: str, names: list[str]
) -> None:
    """Names of 13 or more bytes push the polynomial past 2**64, so the hash must wrap.

    The original system's Python ``string_to_u64`` did not wrap at 2**64: for every name of
    13 or more bytes it produced an unbounded integer, and ``% num_ps`` of that integer sent
    the variable to a different ps than the Rust and C++ processes (which wrap natively) did.
    Lookups then landed on a ps that never saw the variable. This is the regression test.
    """
    assert all(len(name.encode("utf-8")) >= 13 for name in names)
    assert_strings_agree(ports.get(language), names)


@PORT_SETTINGS
@given(blobs=st.lists(st.binary(max_size=64), min_size=1, max_size=16))
@example(blobs=[b"", b"\x00", b"\xff" * 13, b"\xed\xa0\x80", b"\xc0\x80"])
def test_ports_agree_with_each_other_on_arbitrary_bytes(ports: Ports, blobs: list[bytes]) -> None:
    """On raw bytes, including invalid UTF-8 that Python's ``str`` API cannot express, the
    three ports compute the same polynomial; where the bytes are UTF-8 it is Python's."""
    answers = {port.language: port.bytes_to_u64(blobs) for port in ports.all()}
    assert answers["c"] == answers["rust"] == answers["js"]
    for blob, answer in zip(blobs, answers["c"], strict=True):
        try:
            text = blob.decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert answer == string_to_u64(text)


@pytest.mark.parametrize("language", LANGUAGES)
@PORT_SETTINGS
@given(queries=st.lists(st.tuples(texts | long_names, shard_counts), min_size=1, max_size=16))
@example(queries=[("", 1), ("\x00", 2), ("embedding_100", 3), ("\U0010ffff", U64_MAX)])
def test_ps_for_variable_agrees(
    ports: Ports, language: str, queries: list[tuple[str, int]]
) -> None:
    """``ps_for_variable`` is the string hash modulo ``num_ps``: a port's hash reduced the same
    way names the same ps that Python does."""
    port = ports.get(language)
    hashes = port.string_to_u64([name for name, _ in queries])
    for (name, num_ps), hashed in zip(queries, hashes, strict=True):
        assert ps_for_variable(name, num_ps) == hashed % num_ps


@pytest.mark.parametrize("language", LANGUAGES)
@PORT_SETTINGS
@given(queries=st.lists(st.tuples(signs, shard_counts), min_size=1, max_size=32))
@example(queries=[(sign, n) for sign in (0, 1 << 63, U64_MAX) for n in (1, 2, 3, 1 << 16)])
def test_shard_of_sign_agrees(ports: Ports, language: str, queries: list[tuple[int, int]]) -> None:
    """For any uint64 sign and any shard count, every port picks Python's shard."""
    expected = [shard_of_sign(sign, num_shards) for sign, num_shards in queries]
    assert ports.get(language).shard_of_sign(queries) == expected


@pytest.mark.parametrize("language", LANGUAGES)
def test_port_conforms_as_a_command(ports: Ports, language: str) -> None:
    """The whole ``sniper conformance hash`` check: edge cases and 2000 random examples of
    each request, feature signs included (the C port through its line-protocol driver)."""
    report = check_hash_command(ports.command(language))
    assert report.ok, report.summary()
    assert report.agreed == report.checked > 8000
    assert set(report.by_function) == {
        "string_to_u64",
        "bytes_to_u64",
        "shard_of_sign",
        "feature_sign",
    }
    assert report.by_function["feature_sign"] > 2000


def test_edge_case_names_agree_across_all_ports(ports: Ports) -> None:
    """Each listed edge case, side by side in every port: C == Rust == JS == Python."""
    expected = [string_to_u64(name) for name in EDGE_NAMES]
    for port in ports.all():
        assert port.string_to_u64(EDGE_NAMES) == expected, port
        assert port.bytes_to_u64([n.encode("utf-8") for n in EDGE_NAMES]) == expected, port
    assert expected[0] == 0
    assert expected[1] == 0  # a NUL byte contributes 0 ...
    assert expected[2] == 0  # ... however many there are, but it still shifts what follows:
    assert expected[3] == (97 * 31 + 0) * 31 + 98


def test_edge_case_signs_agree_across_all_ports(ports: Ports) -> None:
    """Edge signs against small, power-of-two, prime and near-2**64 shard counts."""
    queries = [(sign, n) for sign in EDGE_SIGNS for n in EDGE_SHARD_COUNTS]
    expected = [shard_of_sign(sign, n) for sign, n in queries]
    for port in ports.all():
        assert port.shard_of_sign(queries) == expected, port
    # One shard holds everything, and the finalizer fixes 0.
    assert all(shard == 0 for (_, n), shard in zip(queries, expected, strict=True) if n == 1)
    assert shard_of_sign(0, 1 << 63) == 0


@pytest.mark.parametrize("language", LANGUAGES)
@PORT_SETTINGS
@given(
    queries=st.lists(
        st.tuples(
            st.text(max_size=20),
            st.binary(max_size=40) | st.integers().map(lambda n: str(n).encode("ascii")),
        ),
        max_size=16,
    )
)
@example(queries=[("user_id", b""), ("user_id", b"Aa"), ("user_id", b"BB"), ("", b"\x00")])
def test_feature_sign_agrees_on_arbitrary_values(
    ports: Ports, language: str, queries: list[tuple[str, bytes]]
) -> None:
    """Any variable and value bytes, signed by a port, match Python ``feature_sign``."""
    expected = [feature_sign(variable, value) for variable, value in queries]
    encoded = [(variable.encode("utf-8"), value) for variable, value in queries]
    assert ports.get(language).feature_sign(encoded) == expected
