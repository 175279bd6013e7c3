"""``check_hash_command`` and ``sniper conformance hash``: a port checked as a command.

The ports in ``ports/`` agree (``test_crosslang.py`` runs the check on them too); here a port
with the original system's bug, commands that die, hang or do not exist, and bad usage show
that every failure is reported as the module docstring of ``sniper._contracts._hash`` says.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sniper._contracts._hash import (
    DEFAULT_EXAMPLES,
    EDGE_FEATURE_VALUES,
    EDGE_FEATURE_VARIABLES,
    EDGE_NAMES,
    EDGE_SHARD_COUNTS,
    EDGE_SIGNS,
    HashCommandError,
    HashMismatch,
    _queries,
    check_hash_command,
    conformance_main,
)
from sniper.hashing import feature_sign, string_to_u64
from tests.hashing._ports import Ports, shared_ports

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = (
    "import sys; from sniper._contracts._hash import conformance_main; "
    "sys.exit(conformance_main(sys.argv[1:]))"
)

# A port with the bug the original system's Python had: the polynomial never wraps at 2**64,
# so every name of 13 or more bytes hashes to a number too large for a u64.
UNWRAPPED_PORT = """\
import sys

from sniper.hashing import shard_of_sign

sys.set_int_max_str_digits(0)  # a 4000-byte name hashes to a 6000-digit number


def answer(line):
    command, _, rest = line.partition(" ")
    if command == "h":
        sign, count = map(int, rest.split())
        return shard_of_sign(sign, count)
    h = 0
    for byte in bytes.fromhex(rest):
        h = h * 31 + byte
    return h


pending = []
for line in sys.stdin:
    line = line.rstrip("\\n")
    if line:
        pending.append(f"{answer(line)}\\n")
        continue
    sys.stdout.write("".join(pending))
    sys.stdout.flush()
    pending.clear()
    if "--quit-after-one-batch" in sys.argv:
        break
"""


# A port of the placement hashes alone: sniper's own answers to s, b and h, and no f (or, with
# --unsalted, f without the variable's salt: equal values of two columns collide).
PLACEMENT_PORT = """\
import sys

from sniper.hashing import feature_sign, shard_of_sign, string_to_u64


def answer(line):
    command, _, rest = line.partition(" ")
    if command == "h":
        sign, count = map(int, rest.split())
        return shard_of_sign(sign, count)
    if command == "f":
        if "--unsalted" not in sys.argv:
            return "e unknown request 'f'"
        return feature_sign("", bytes.fromhex(rest.split(" ")[1]))
    return string_to_u64(bytes.fromhex(rest).decode("utf-8", "surrogatepass"))


pending = []
for line in sys.stdin:
    line = line.rstrip("\\n")
    if line:
        pending.append(f"{answer(line)}\\n")
        continue
    sys.stdout.write("".join(pending))
    sys.stdout.flush()
    pending.clear()
"""


FIRST_TO_WRAP = "\ufeffembedding_0"
"""The first edge-case name of 13 or more UTF-8 bytes (14: a BOM is 3), so the first whose
polynomial passes 2**64."""


def unwrapped(text: str) -> int:
    h = 0
    for byte in text.encode("utf-8"):
        h = h * 31 + byte
    return h


def expected_count(examples: int, *, features: bool = True) -> int:
    """Answers a check compares: s and b per name, h per shard query, f per feature value;
    edge cases included."""
    names = len(EDGE_NAMES) + examples
    placement = 2 * names + len(EDGE_SIGNS) * len(EDGE_SHARD_COUNTS) + examples
    edge_features = len(EDGE_FEATURE_VARIABLES) * len(EDGE_FEATURE_VALUES)
    return placement + (edge_features + examples if features else 0)


@pytest.fixture(scope="session")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    with shared_ports(tmp_path_factory) as shared:
        yield shared


@pytest.fixture
def wrong_port(tmp_path: Path) -> list[str]:
    script = tmp_path / "unwrapped_port.py"
    script.write_text(UNWRAPPED_PORT)
    return [sys.executable, str(script)]


@pytest.fixture
def placement_port(tmp_path: Path) -> list[str]:
    script = tmp_path / "placement_port.py"
    script.write_text(PLACEMENT_PORT)
    return [sys.executable, str(script)]


def run_conformance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CONFORMANCE, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_js_port_conforms_on_the_command_line(ports: Ports) -> None:
    result = run_conformance("hash", "--", *ports.command("js"))
    count = expected_count(DEFAULT_EXAMPLES)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"hash conformance: {count} of {count} agree\n"


def test_the_rust_port_conforms_through_conformance_main(
    ports: Ports, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ports.command("rust")
    assert conformance_main(["hash", "--examples", "300", "--seed", "7", "--", *command]) == 0
    count = expected_count(300)
    assert capsys.readouterr() == (f"hash conformance: {count} of {count} agree\n", "")


def test_the_c_port_conforms_on_feature_signs_too(
    ports: Ports, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ports.command("c")
    assert conformance_main(["hash", "--examples", "300", "--", *command]) == 0
    count = expected_count(300)
    assert capsys.readouterr() == (f"hash conformance: {count} of {count} agree\n", "")
    report = check_hash_command(command, examples=300)
    assert report.by_function["feature_sign"] == expected_count(300) - expected_count(
        300, features=False
    )


def test_a_port_without_feature_signs_fails_unless_they_are_left_out(
    placement_port: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert conformance_main(["hash", "--examples", "100", "--", *placement_port]) == 1
    placement = expected_count(100, features=False)
    first = f"{EDGE_FEATURE_VARIABLES[0]!r}, {EDGE_FEATURE_VALUES[0]!r}"
    assert capsys.readouterr() == (
        f"hash conformance: {placement} of {expected_count(100)} agree; first mismatch: "
        f"feature_sign({first}) is {feature_sign('', b'')}, the command answered "
        "\"e unknown request 'f'\" (request 'f  ')\n",
        "",
    )
    argv = ["hash", "--examples", "100", "--no-feature-signs", "--", *placement_port]
    assert conformance_main(argv) == 0
    assert capsys.readouterr().out == f"hash conformance: {placement} of {placement} agree\n"


def test_a_port_that_forgets_the_variable_s_salt_is_caught(placement_port: list[str]) -> None:
    """Salted by the empty name (and "\\x00", whose polynomial is 0 too) it agrees; "user_id"
    is the first variable it gets wrong."""
    report = check_hash_command([*placement_port, "--unsalted"], examples=50)
    assert report.first_mismatch == HashMismatch(
        function="feature_sign",
        input="'user_id', b''",
        request=f"f {b'user_id'.hex()} ",
        expected=feature_sign("user_id", b""),
        got=str(feature_sign("", b"")),
    )


def test_a_wrong_port_is_reported_with_its_first_mismatch(wrong_port: list[str]) -> None:
    assert next(n for n in EDGE_NAMES if len(n.encode()) >= 13) == FIRST_TO_WRAP
    report = check_hash_command(wrong_port, examples=200)
    name = FIRST_TO_WRAP
    assert report.first_mismatch == HashMismatch(
        function="string_to_u64",
        input=repr(name),
        request=f"s {name.encode().hex()}",
        expected=string_to_u64(name),
        got=str(unwrapped(name)),
    )
    assert not report.ok
    assert report.checked == expected_count(200)
    assert report.by_function["shard_of_sign"] == len(EDGE_SIGNS) * len(EDGE_SHARD_COUNTS) + 200
    assert 0 < report.agreed < report.checked


def test_a_wrong_port_exits_1_with_one_summary_line(
    wrong_port: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert conformance_main(["hash", "--examples", "200", "--", *wrong_port]) == 1
    report = check_hash_command(wrong_port, examples=200)
    name = FIRST_TO_WRAP
    expected = (
        f"hash conformance: {report.agreed} of {report.checked} agree; first mismatch: "
        f"string_to_u64({name!r}) is {string_to_u64(name)}, the command answered "
        f"'{unwrapped(name)}' (request 's {name.encode().hex()}')\n"
    )
    assert capsys.readouterr() == (expected, "")


def test_a_long_input_is_shortened_in_the_summary() -> None:
    name = "z" * 1000
    mismatch = HashMismatch(
        "string_to_u64", repr(name), f"s {name.encode().hex()}", string_to_u64(name), "1"
    )
    assert str(mismatch) == (
        f"string_to_u64('{'z' * 39}...(962 more)) is {string_to_u64(name)}, the command "
        f"answered '1' (request 's {'7a' * 19}...(1962 more)')"
    )


def test_a_port_that_stops_answering_exits_1(
    wrong_port: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    command = [*wrong_port, "--quit-after-one-batch"]
    assert conformance_main(["hash", "--", *command]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert re.fullmatch(
        r"hash conformance: `.*python.*` exited with status 0 after 512 answers\n",
        out,
    )


def test_a_command_that_does_not_exist_exits_2_with_one_line() -> None:
    result = run_conformance("hash", "--", "no-such-hash-port", "--flag")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "sniper: error: cannot run `no-such-hash-port --flag`: "
        "[Errno 2] No such file or directory: 'no-such-hash-port'\n"
    )


def test_a_command_that_exits_before_answering_exits_2_with_its_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = (
        "import sys; print('Traceback', file=sys.stderr); sys.exit('RuntimeError: no driver\\nbye')"
    )
    crash = [sys.executable, "-c", code]
    assert conformance_main(["hash", "--", *crash]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert re.fullmatch(
        r"sniper: error: `.*` exited with status 1 before answering; "
        r"its stderr says: RuntimeError: no driver\n",
        err,
    )


def test_a_command_that_hangs_is_reported_after_the_timeout() -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    message = "gave no answer within 0.5 s after 0 answers; it must answer every request"
    with pytest.raises(HashCommandError, match=message) as info:
        check_hash_command(hang, examples=0, timeout=0.5)
    assert info.value.started


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give the port's command after `--`, e.g. sniper conformance hash -- node "),
        (["hash", "cmd"], "give the port's command after `--`"),
        (["hash", "--"], "no command after `--`; give the port's program and arguments"),
        (
            ["hash", "--examples", "-1", "--", "x"],
            "argument --examples: expected a non-negative integer, got -1",
        ),
        (
            ["hash", "--examples", "many", "--", "x"],
            "argument --examples: expected a non-negative integer, got 'many'",
        ),
        (["hash", "--seed", "0x1", "--", "x"], "argument --seed: invalid int value: '0x1'"),
        (["store", "--", "x"], "argument suite: invalid choice: 'store' (choose from 'hash')"),
        (["hash", "--colour", "--", "x"], "unrecognized arguments: --colour"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert conformance_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"sniper: error: {message}")
    assert err.endswith(
        " (usage: sniper conformance hash [--examples N] [--seed S] [--no-feature-signs] -- "
        "COMMAND [ARGS...])\n"
    )
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv", [["--help"], ["hash", "-h", "--", "x"]])
def test_help_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance_main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith(
        "usage: sniper conformance hash [--examples N] [--seed S] [--no-feature-signs] -- COMMAND"
    )
    assert "example: sniper conformance hash -- node tests/hashing/ports/hash.js" in out
    assert err == ""


@pytest.mark.parametrize(("argv", "examples"), [([], 1), (["true"], -1), (["true"], True)])
def test_check_hash_command_refuses_bad_arguments(argv: list[str], examples: int) -> None:
    with pytest.raises(ValueError, match=r"^(the port's command is empty|examples must be)"):
        check_hash_command(argv, examples=examples)


def test_the_inputs_cover_every_kind_of_text_and_are_seeded() -> None:
    queries = list(_queries(2000, seed=0))
    names = [bytes.fromhex(q.request[2:]).decode() for q in queries if q.request[0] == "s"]
    assert names[: len(EDGE_NAMES)] == list(EDGE_NAMES)
    drawn = names[len(EDGE_NAMES) :]
    kinds: dict[str, Callable[[str], bool]] = {
        "empty": lambda n: n == "",
        "ascii name": lambda n: n.isascii() and n.isidentifier(),
        "astral": lambda n: any(ord(c) > 0xFFFF for c in n),
        "NUL": lambda n: "\x00" in n,
        "newline": lambda n: "\n" in n,
        "other control": lambda n: any(ord(c) < 32 and c not in "\x00\n" for c in n),
        "BOM": lambda n: "\ufeff" in n,
        "13+ UTF-8 bytes": lambda n: len(n.encode()) >= 13,
        "2000+ characters": lambda n: len(n) >= 2000,
    }
    missing = [kind for kind, test in kinds.items() if not any(test(n) for n in drawn)]
    assert missing == []
    shards = [q for q in queries if q.function == "shard_of_sign"]
    assert len(shards) == len(EDGE_SIGNS) * len(EDGE_SHARD_COUNTS) + 2000
    assert max(int(q.request.split()[2]) for q in shards) == 1 << 63
    assert [q.request for q in _queries(50, seed=1)] == [q.request for q in _queries(50, seed=1)]
    assert [q.request for q in _queries(50, seed=1)] != [q.request for q in _queries(50, seed=2)]
