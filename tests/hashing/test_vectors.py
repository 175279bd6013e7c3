"""``tests/data/hash_vectors.json``: Python and the C, Rust and JavaScript ports all reproduce it.

The file is what a client in another language checks itself against, so it must be correct,
complete (the edge cases it promises are really in it) and current (exactly what
``tests/data/make_hash_vectors.py`` writes).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from sniper._hashing import (
    feature_sign,
    feature_signs,
    ps_for_variable,
    shard_of,
    shard_of_sign,
    splitmix64_mix,
    string_to_u64,
    strings_to_u64,
)
from tests.hashing._ports import LANGUAGES, U64_MAX, Ports, shared_ports

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
VECTORS_PATH = DATA_DIR / "hash_vectors.json"
GENERATOR_PATH = DATA_DIR / "make_hash_vectors.py"
CANONICAL_DECIMAL = re.compile(r"0|[1-9][0-9]*")


@pytest.fixture(scope="session")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    with shared_ports(tmp_path_factory) as shared:
        yield shared


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="ascii"))
    return document


def u64(value: object) -> int:
    """Parse a 64-bit value from the file, which must be a canonical decimal string."""
    assert isinstance(value, str), f"64-bit values are decimal strings, got {value!r}"
    assert CANONICAL_DECIMAL.fullmatch(value), value
    number = int(value)
    assert 0 <= number <= U64_MAX, value
    return number


def string_cases(vectors: dict[str, Any]) -> list[tuple[bytes, str, int]]:
    return [
        (bytes.fromhex(case["utf8_hex"]), case["text"], u64(case["u64"]))
        for case in vectors["string_to_u64"]
    ]


def shard_cases(vectors: dict[str, Any]) -> list[tuple[int, int, int]]:
    return [(u64(case["sign"]), case["num_shards"], case["shard"]) for case in vectors["shard_of"]]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_hash_vectors", GENERATOR_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_file_is_what_the_generator_writes() -> None:
    """Regenerate with ``python tests/data/make_hash_vectors.py`` if this fails."""
    generator = load_generator()
    assert VECTORS_PATH.read_text(encoding="ascii") == generator.render(generator.build())


def test_file_documents_the_definitions(vectors: dict[str, Any]) -> None:
    definition = vectors["definition"]
    assert set(definition) >= {"string_to_u64", "ps_for_variable", "splitmix64_mix", "shard_of"}
    assert "31" in definition["string_to_u64"]
    assert "UTF-8" in definition["string_to_u64"]
    assert "2**64" in definition["string_to_u64"]
    assert "0xBF58476D1CE4E5B9" in definition["splitmix64_mix"]
    assert "0x94D049BB133111EB" in definition["splitmix64_mix"]


def test_file_covers_the_promised_edge_cases(vectors: dict[str, Any]) -> None:
    cases = string_cases(vectors)
    texts = {text for _, text, _ in cases}
    assert "" in texts
    assert any("\x00" in text for text in texts)
    assert {f"embedding_{i}" for i in range(76)} <= texts
    assert sum(len(data) >= 13 for data, _, _ in cases) >= 5
    assert any(len(data) > len(text) for data, text, _ in cases)  # multi-byte characters
    assert any(any(ord(c) > 0xFFFF for c in text) for text in texts)  # astral plane
    assert "\U0010ffff" in texts
    shards = shard_cases(vectors)
    assert {n for _, n, _ in shards} >= {1, 2, 3, 7, 16, 64, 1000, 65536}
    assert {sign for sign, _, _ in shards} >= {0, 1 << 63, U64_MAX}


def test_text_and_utf8_hex_agree(vectors: dict[str, Any]) -> None:
    for case in vectors["string_to_u64"]:
        assert case["text"].encode("utf-8").hex() == case["utf8_hex"], case


def test_python_string_hashes_match_the_file(vectors: dict[str, Any]) -> None:
    cases = string_cases(vectors)
    expected = [answer for _, _, answer in cases]
    assert [string_to_u64(text) for _, text, _ in cases] == expected
    assert strings_to_u64([text for _, text, _ in cases]).tolist() == expected


def test_python_ps_for_variable_matches_the_file(vectors: dict[str, Any]) -> None:
    for case in vectors["ps_for_variable"]:
        assert ps_for_variable(case["text"], case["num_ps"]) == case["ps"], case


def test_python_splitmix64_matches_the_file(vectors: dict[str, Any]) -> None:
    for case in vectors["splitmix64_mix"]:
        assert splitmix64_mix(u64(case["x"])) == u64(case["mix"]), case


def test_python_shards_match_the_file(vectors: dict[str, Any]) -> None:
    cases = shard_cases(vectors)
    for sign, num_shards, shard in cases:
        assert isinstance(shard, int)
        assert 0 <= shard < num_shards
        assert shard_of_sign(sign, num_shards) == shard, (sign, num_shards)
    for num_shards in sorted({n for _, n, _ in cases}):
        signs = np.array([s for s, n, _ in cases if n == num_shards], dtype=np.uint64)
        expected = [shard for _, n, shard in cases if n == num_shards]
        assert shard_of(signs, num_shards).tolist() == expected, num_shards


@pytest.mark.parametrize("language", LANGUAGES)
def test_port_string_hashes_match_the_file(
    ports: Ports, language: str, vectors: dict[str, Any]
) -> None:
    port = ports.get(language)
    cases = string_cases(vectors)
    expected = [answer for _, _, answer in cases]
    assert port.bytes_to_u64([data for data, _, _ in cases]) == expected
    assert port.string_to_u64([text for _, text, _ in cases]) == expected


@pytest.mark.parametrize("language", LANGUAGES)
def test_port_shards_match_the_file(ports: Ports, language: str, vectors: dict[str, Any]) -> None:
    cases = shard_cases(vectors)
    queries = [(sign, num_shards) for sign, num_shards, _ in cases]
    assert ports.get(language).shard_of_sign(queries) == [shard for _, _, shard in cases]


def feature_cases(vectors: dict[str, Any]) -> list[tuple[str, bytes, str | int, int]]:
    """(variable, bytes hashed, the value as Python holds it, sign) of each feature vector."""
    cases = []
    for case in vectors["feature_sign"]:
        value = int(case["value"]) if case["kind"] == "int" else case["value"]
        cases.append((case["variable"], bytes.fromhex(case["value_hex"]), value, u64(case["sign"])))
    return cases


def test_feature_vectors_cover_ints_strings_and_salts(vectors: dict[str, Any]) -> None:
    cases = feature_cases(vectors)
    assert {type(value) for _, _, value, _ in cases} == {int, str}
    assert any(isinstance(v, int) and v < 0 for _, _, v, _ in cases)
    assert len({variable for variable, _, _, _ in cases}) >= 3
    assert len({sign for _, _, _, sign in cases}) == len(cases)  # no two alike
    assert "0x100000001B3" in vectors["definition"]["feature_sign"]


def test_python_feature_signs_match_the_file(vectors: dict[str, Any]) -> None:
    cases = feature_cases(vectors)
    for variable, data, value, sign in cases:
        assert feature_sign(variable, value) == sign, (variable, value)
        assert feature_sign(variable, data) == sign, (variable, value)
    for variable in sorted({variable for variable, _, _, _ in cases}):
        mine = [(data, sign) for v, data, _, sign in cases if v == variable]
        offsets = np.cumsum([0] + [len(data) for data, _ in mine]).astype(np.int64)
        flat = np.frombuffer(b"".join(d for d, _ in mine), dtype=np.uint8)
        assert feature_signs(variable, flat, offsets).tolist() == [s for _, s in mine]


@pytest.mark.parametrize("language", LANGUAGES)
def test_port_feature_signs_match_the_file(
    ports: Ports, language: str, vectors: dict[str, Any]
) -> None:
    cases = feature_cases(vectors)
    queries = [(variable.encode("utf-8"), data) for variable, data, _, _ in cases]
    assert ports.get(language).feature_sign(queries) == [sign for _, _, _, sign in cases]
