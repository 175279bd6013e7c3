"""A port of sniper's hashes, in any language, checked as a command.

A client or server in another language must place variables on ps and signs on shards exactly
as sniper does, and sign a user's feature values as a ``[features]`` table does (see
:mod:`sniper._hashing`). :func:`check_hash_command` runs the port as a subprocess, feeds it
generated names, shard queries and feature values over a line protocol, and compares every
answer with :mod:`sniper.hashing`; ``sniper conformance hash -- CMD ARGS...`` is the same check
on the command line (:func:`conformance_main`).

**The protocol.** The command reads requests from standard input, one per line, until an empty
line; then it writes one answer line per request, in order, and flushes. It repeats that until
standard input closes, then exits. Requests:

``s <hex>``
    ``<hex>`` is UTF-8: decode it into the language's own string type and hash that the way a
    client hashes a variable name (``string_to_u64``).
``b <hex>``
    ``string_to_u64`` of the raw bytes ``<hex>``.
``h <sign> <num_shards>``
    ``shard_of_sign``; both are decimal unsigned 64-bit integers.
``f <variable hex> <value hex>``
    ``feature_sign`` of the raw value bytes in the variable named by the raw bytes (UTF-8):
    the sign a feature spec gives a value of a user's column (a string's UTF-8 bytes, an
    integer's decimal text). A port of the placement hashes alone, which has no ``f``, is
    checked without it (``features=False``, ``--no-feature-signs``).

An answer is a decimal unsigned 64-bit integer, or ``e <message>`` for a request the port
refuses. Strings travel as hex so that NUL and newlines in names cannot break the framing.
``ps_for_variable(name, n)`` is ``string_to_u64(name) % n``, so a port whose ``s`` answers
agree places variables on ps as sniper does. ``tests/hashing/ports/`` holds C, Rust and
JavaScript ports that speak it.

Inputs come from a seeded ``random.Random`` (no hypothesis: this runs outside test suites):
the fixed edge cases first (empty, NUL, newlines, a BOM, the last code point of each UTF-8
length, astral characters, the 12- and 13-byte names around the first wrap past 2**64, edge
signs and shard counts up to 2**63), then ``examples`` random names of every kind and as many
random shard queries; then each edge-case variable with each edge-case value (empty, NUL,
newline, bytes that are not UTF-8, the decimal text of the int64 and uint64 extremes, a long
value) and ``examples`` random feature values of every kind.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import random
import string
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final, NoReturn, Self

from sniper._hashing import MASK64, MAX_SHARDS
from sniper.hashing import feature_sign, shard_of_sign, string_to_u64

__all__ = [
    "EDGE_FEATURE_VALUES",
    "EDGE_FEATURE_VARIABLES",
    "EDGE_NAMES",
    "EDGE_SHARD_COUNTS",
    "EDGE_SIGNS",
    "LARGE_SHARD_COUNTS",
    "NAME_CHARS",
    "TRICKY_CHARS",
    "HashCommand",
    "HashCommandError",
    "HashMismatch",
    "HashReport",
    "check_hash_command",
    "conformance_main",
]

EXIT_AGREE: Final = 0
EXIT_MISMATCH: Final = 1
EXIT_USAGE: Final = 2

# Characters that break naive ports: NUL, newline (the line protocol), a BOM that decoders like
# to swallow, the last code point of each UTF-8 length, the first astral one and the last one.
TRICKY_CHARS: Final = (
    "\x00",
    "\n",
    "\r",
    "\x7f",
    "\x80",
    "\u07ff",
    "\u0800",
    "\ufeff",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\U0010ffff",
)
EDGE_NAMES: Final = (
    "",
    "\x00",
    "\x00\x00",
    "a\x00b",
    "\n",
    "line\nbreak",
    "\ufeff",
    "\ufeffembedding_0",
    "\U0001f600",
    "\U0010ffff",
    "emb_\U0001f600_0",
    "\u65e5\u672c\u8a9e",
    "abcdefghijkl",  # 12 bytes: no name this short reaches 2**64 unwrapped
    "abcdefghijklm",  # 13 bytes: the shortest that wraps
    "embedding_0",
    "embedding_75",
    "embedding_100",
    "tower/deep/embedding_weights:0",
    "z" * 1000,
)
EDGE_SIGNS: Final = (
    0,
    1,
    2,
    (1 << 31) - 1,
    1 << 32,
    (1 << 53) + 1,
    (1 << 63) - 1,
    1 << 63,
    (1 << 63) + 1,
    (1 << 64) - 2,
    MASK64,
    0x9E3779B97F4A7C15,
    (7 << 48) | 12345,
)
LARGE_SHARD_COUNTS: Final = (
    (1 << 31) - 1,
    1 << 32,
    (1 << 32) + 1,
    (1 << 53) + 1,
    (1 << 63) - 1,
    MAX_SHARDS,  # the most shards sniper allows: shard ids are int64
)
EDGE_SHARD_COUNTS: Final = (1, 2, 3, 7, 16, 64, 1000, 1 << 16, *LARGE_SHARD_COUNTS)
"""Small, power-of-two, prime and near-2**63 shard counts: each edge sign is asked with each."""
EDGE_FEATURE_VARIABLES: Final = (
    "",
    "\x00",
    "user_id",
    "line\nbreak",
    "\U0001f600",
    "abcdefghijklm",  # the shortest name whose polynomial wraps: the salt's input past 2**64
)
EDGE_FEATURE_VALUES: Final = (
    b"",
    b"\x00",
    b"\n",
    b"\xff\xfe",  # not UTF-8: a value is bytes to the hash
    b"Aa",
    b"BB",
    b"0",
    b"-1",
    b"-9223372036854775808",  # int64's least, as a signed integer column's decimal text
    b"18446744073709551615",  # uint64's most
    "\u65e5\u672c\u8a9e \U0001f600".encode(),
    b"z" * 1000,
)
"""Each asked in each edge-case variable: a port's byte loop, its salt and its text."""
NAME_CHARS: Final = string.ascii_letters + string.digits + "_/.:-"
"""The characters of typical variable names."""

DEFAULT_EXAMPLES: Final = 2000
BATCH: Final = 512
"""Requests per batch: a batch's answers (at most ~21 bytes each) fit in any pipe's buffer."""
ANSWER_TIMEOUT: Final = 30.0
"""Seconds to wait for a batch's answers before the command counts as hung."""
_SHOWN: Final = 60
"""Characters of a long input or answer shown in a one-line summary."""


# -- the protocol ------------------------------------------------------------------------------


class HashCommandError(RuntimeError):
    """The command could not be run, stopped answering, or hung.

    ``started`` is False when it never answered at all (it could not be run, or it exited
    before its first answer): most likely a mistyped command rather than a wrong port.
    """

    def __init__(self, message: str, *, started: bool) -> None:
        super().__init__(message)
        self.started = started


class HashCommand:
    """A running command that speaks the hash line protocol; :meth:`ask` sends one batch.

    Standard output is read by a thread and every answer is awaited with a timeout, and each
    batch is written by a thread too, so a port that hangs, stops reading or dies is reported
    as :class:`HashCommandError` instead of blocking its caller. Standard error goes to
    ``stderr_path`` (a temporary file when None) and is quoted when the command fails.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float = ANSWER_TIMEOUT,
        stderr_path: Path | None = None,
    ) -> None:
        if not argv:
            raise ValueError("the port's command is empty; give the program and its arguments")
        self.argv = tuple(argv)
        self._timeout = timeout
        self._answered = 0
        # Open for the command's lifetime, closed by close().
        self._stderr: IO[bytes] = (
            stderr_path.open("w+b") if stderr_path else tempfile.TemporaryFile()  # noqa: SIM115
        )
        try:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
            )
        except OSError as exc:
            self._stderr.close()
            raise HashCommandError(f"cannot run {self}: {exc}", started=False) from exc
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="hash-port-reader", daemon=True)
        self._writer = threading.Thread(target=self._write, name="hash-port-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        for line in stdout:
            self._lines.put(line)
        self._lines.put(b"")  # end of output

    def _write(self) -> None:
        """Write batches in order until told to stop (None), then close the command's input."""
        stdin = self._process.stdin
        assert stdin is not None
        # A port that exits or stops reading mid-batch is reported by the reading side; here
        # it only means there is nothing more to write.
        with contextlib.suppress(BrokenPipeError, ValueError):
            while (payload := self._outbox.get()) is not None:
                stdin.write(payload)
                stdin.flush()
        with contextlib.suppress(BrokenPipeError, ValueError):
            stdin.close()

    def ask(self, requests: Sequence[str]) -> list[str]:
        """Send ``requests`` as one batch and return the answer lines, without line ends."""
        if not requests:
            return []
        payload = "".join(f"{request}\n" for request in requests).encode("ascii") + b"\n"
        self._outbox.put(payload)
        answers = []
        for _ in requests:
            try:
                line = self._lines.get(timeout=self._timeout)
            except queue.Empty:
                self._process.kill()
                raise HashCommandError(
                    f"{self} gave no answer within {self._timeout:g} s after {self._answered} "
                    "answers; it must answer every request once it reads the empty line that "
                    "ends a batch, and flush",
                    started=True,
                ) from None
            if not line.endswith(b"\n"):
                self._died()
            answers.append(line[:-1].decode("utf-8", errors="replace").removesuffix("\r"))
            self._answered += 1
        return answers

    def _died(self) -> NoReturn:
        try:
            code: int | str = self._process.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            code = "unknown: it closed its output but kept running"
        started = self._answered > 0
        when = f"after {self._answered} answers" if started else "before answering"
        raise HashCommandError(
            f"{self} exited with status {code} {when}{self._last_words()}", started=started
        )

    def _last_words(self) -> str:
        """The stderr line that best says why: the last to mention an error, else the last."""
        self._stderr.seek(0)
        text = self._stderr.read()[-8000:].decode("utf-8", errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not lines:
            return ""
        errors = [line for line in lines if "error" in line.lower()]
        return f"; its stderr says: {_shorten((errors or lines)[-1], 200)}"

    def close(self) -> None:
        """Close the command's input, wait for it to exit (killing it if it will not)."""
        self._outbox.put(None)
        self._writer.join(self._timeout)
        try:
            self._process.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._writer.join(self._timeout)
        self._reader.join(self._timeout)
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._stderr.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __str__(self) -> str:
        return f"`{_shorten(' '.join(self.argv), 120)}`"


# -- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HashMismatch:
    """One answer that differs from sniper's."""

    function: str
    """What was asked, as sniper names it: ``string_to_u64``, ``bytes_to_u64`` (the ``b``
    request), ``shard_of_sign`` or ``feature_sign``."""
    input: str
    """The input, readable: ``repr`` of the name, ``sign, num_shards``, or ``variable,
    value``."""
    request: str
    """The request line as sent."""
    expected: int
    """sniper's answer."""
    got: str
    """The command's answer line, as received."""

    def __str__(self) -> str:
        return (
            f"{self.function}({_shorten(self.input)}) is {self.expected}, "
            f"the command answered {_shorten(self.got)!r} (request {_shorten(self.request)!r})"
        )


@dataclass(frozen=True)
class HashReport:
    """What :func:`check_hash_command` found."""

    command: tuple[str, ...]
    """The command that was checked."""
    checked: int
    """Answers compared."""
    agreed: int
    """Answers equal to sniper's."""
    by_function: Mapping[str, int]
    """Answers compared, per function."""
    first_mismatch: HashMismatch | None
    """The first answer that differed, in the order the requests were sent; None if none."""

    @property
    def ok(self) -> bool:
        """Whether every answer agreed."""
        return self.first_mismatch is None

    def summary(self) -> str:
        """One line: ``hash conformance: N of N agree``, or the counts and first mismatch."""
        line = f"hash conformance: {self.agreed} of {self.checked} agree"
        if self.first_mismatch is not None:
            line += f"; first mismatch: {self.first_mismatch}"
        return line


# -- generated inputs --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Query:
    function: str
    input: str
    request: str
    expected: int


def _code_point(rng: random.Random, low: int = 0, high: int = sys.maxunicode) -> str:
    """A random code point in ``[low, high]`` that is not a surrogate (UTF-8 cannot hold one)."""
    while True:
        point = rng.randint(low, high)
        if not 0xD800 <= point <= 0xDFFF:
            return chr(point)


def _text(rng: random.Random, draw: Callable[[], str], low: int, high: int) -> str:
    return "".join(draw() for _ in range(rng.randint(low, high)))


# Each kind of name, and how often it is drawn: mostly names like real ones, and every kind of
# text a port could get wrong.
_NAME_KINDS: Final[tuple[tuple[int, Callable[[random.Random], str]], ...]] = (
    (4, lambda rng: _text(rng, lambda: rng.choice(NAME_CHARS), 0, 12)),
    (3, lambda rng: _text(rng, lambda: rng.choice(NAME_CHARS), 13, 200)),
    (2, lambda rng: _text(rng, lambda: chr(rng.randint(0, 0x7F)), 0, 30)),
    (2, lambda rng: _text(rng, lambda: _code_point(rng), 0, 30)),
    (2, lambda rng: _text(rng, lambda: _code_point(rng, 0x10000), 1, 12)),
    (2, lambda rng: _text(rng, lambda: rng.choice((*TRICKY_CHARS, "a", "_")), 1, 16)),
    (1, lambda rng: _text(rng, lambda: chr(rng.choice([*range(32), 0x7F])), 1, 8)),
    (1, lambda rng: _text(rng, lambda: _code_point(rng, 0x80), 13, 100)),
    (1, lambda rng: ""),
)
_NAME_WEIGHTS: Final = [weight for weight, _ in _NAME_KINDS]


def _random_names(rng: random.Random, count: int) -> list[str]:
    kinds = rng.choices([kind for _, kind in _NAME_KINDS], _NAME_WEIGHTS, k=count)
    names = [kind(rng) for kind in kinds]
    if count:
        # One name far past any buffer a port might size for typical names.
        names[rng.randrange(count)] = _text(rng, lambda: rng.choice(NAME_CHARS), 2000, 4000)
    return names


def _random_shard_queries(rng: random.Random, count: int) -> list[tuple[int, int]]:
    signs: tuple[Callable[[], int], ...] = (
        lambda: rng.getrandbits(64),
        lambda: rng.choice(EDGE_SIGNS),
        lambda: rng.randint(0, 1000),
        lambda: (rng.randint(0, 0xFFFF) << 48) | rng.getrandbits(48),
    )
    counts: tuple[Callable[[], int], ...] = (
        lambda: rng.randint(1, 1 << 16),
        lambda: rng.choice(EDGE_SHARD_COUNTS),
        lambda: rng.randint(1, MAX_SHARDS),
    )
    return [(rng.choice(signs)(), rng.choice(counts)()) for _ in range(count)]


def _random_values(rng: random.Random, count: int) -> list[bytes]:
    """Feature values of every kind: raw bytes, integers' decimal text, UTF-8 text."""
    kinds: tuple[Callable[[], bytes], ...] = (
        lambda: rng.randbytes(rng.randint(0, 40)),
        lambda: str(rng.randint(-(1 << 63), (1 << 64) - 1)).encode("ascii"),
        lambda: str(rng.randint(-1000, 1000)).encode("ascii"),
        lambda: rng.choices(_NAME_KINDS, _NAME_WEIGHTS)[0][1](rng).encode("utf-8"),
        lambda: rng.randbytes(rng.randint(41, 600)),
    )
    return [rng.choice(kinds)() for _ in range(count)]


def _feature_queries(rng: random.Random, examples: int) -> Iterator[_Query]:
    """Each edge variable with each edge value, then ``examples`` random pairs."""
    edge = [(v, x) for v in EDGE_FEATURE_VARIABLES for x in EDGE_FEATURE_VALUES]
    drawn = zip(_random_names(rng, examples), _random_values(rng, examples), strict=True)
    for variable, value in (*edge, *drawn):
        request = f"f {variable.encode('utf-8').hex()} {value.hex()}"
        expected = feature_sign(variable, value)
        yield _Query("feature_sign", f"{variable!r}, {value!r}", request, expected)


def _queries(examples: int, seed: int, *, features: bool = True) -> Iterator[_Query]:
    """The edge cases, then ``examples`` random names and shard queries, then (``features``)
    the feature values, in sending order."""
    rng = random.Random(seed)
    for name in (*EDGE_NAMES, *_random_names(rng, examples)):
        expected, hex_bytes = string_to_u64(name), name.encode("utf-8").hex()
        yield _Query("string_to_u64", repr(name), f"s {hex_bytes}", expected)
        yield _Query("bytes_to_u64", f"bytes.fromhex({hex_bytes!r})", f"b {hex_bytes}", expected)
    edge_pairs = [(sign, count) for sign in EDGE_SIGNS for count in EDGE_SHARD_COUNTS]
    for sign, count in (*edge_pairs, *_random_shard_queries(rng, examples)):
        expected = shard_of_sign(sign, count)
        yield _Query("shard_of_sign", f"{sign}, {count}", f"h {sign} {count}", expected)
    if features:
        yield from _feature_queries(rng, examples)


def _batches(queries: Iterator[_Query], size: int) -> Iterator[list[_Query]]:
    batch: list[_Query] = []
    for query in queries:
        batch.append(query)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# -- the check ---------------------------------------------------------------------------------


def check_hash_command(
    argv: Sequence[str],
    *,
    examples: int = DEFAULT_EXAMPLES,
    seed: int = 0,
    timeout: float = ANSWER_TIMEOUT,
    features: bool = True,
) -> HashReport:
    """Run ``argv`` as a hash port (see the module docstring) and compare it with sniper;
    ``features=False`` leaves out the feature signs (``f``), for a port of the placement
    hashes alone.

    Every request is sent and every answer compared, so the report counts all disagreements,
    not just the first. Raises :class:`HashCommandError` if the command cannot be run, exits
    before the last answer, or gives no answer for ``timeout`` seconds; ``ValueError`` for an
    empty ``argv`` or a negative ``examples``.
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"examples must be a non-negative integer, got {examples!r}")
    checked, agreed = 0, 0
    by_function: Counter[str] = Counter()
    first: HashMismatch | None = None
    with HashCommand(argv, timeout=timeout) as command:
        for batch in _batches(_queries(examples, seed, features=features), BATCH):
            answers = command.ask([query.request for query in batch])
            for query, answer in zip(batch, answers, strict=True):
                checked += 1
                by_function[query.function] += 1
                if answer == str(query.expected):
                    agreed += 1
                elif first is None:
                    first = HashMismatch(
                        query.function, query.input, query.request, query.expected, answer
                    )
    return HashReport(tuple(argv), checked, agreed, dict(by_function), first)


# -- sniper conformance hash -------------------------------------------------------------------

_USAGE: Final = (
    "sniper conformance hash [--examples N] [--seed S] [--no-feature-signs] -- COMMAND [ARGS...]"
)


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line, like the rest of the ``sniper`` command."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _parser() -> _Parser:
    parser = _Parser(
        prog="sniper conformance",
        usage=_USAGE,
        description=(
            "Check a port of sniper's hashes in another language: run COMMAND, send it "
            "generated names, shard queries and feature values over the hash line protocol "
            "(documented in sniper/_contracts/_hash.py and tests/hashing/ports/hash.rs), and "
            "compare every answer with sniper. Exit status 0: all agree; 1: a mismatch, or "
            "the command stopped answering; 2: a usage error, or the command cannot run."
        ),
        epilog="example: sniper conformance hash -- node tests/hashing/ports/hash.js",
    )
    parser.add_argument("suite", choices=["hash"], help="what to check (only hash, for now)")
    parser.add_argument(
        "--examples",
        type=_non_negative_int,
        default=DEFAULT_EXAMPLES,
        help=(
            "random names, shard queries and feature values beyond the edge cases "
            f"(default {DEFAULT_EXAMPLES} each)"
        ),
    )
    parser.add_argument(
        "--no-feature-signs",
        dest="features",
        action="store_false",
        help="leave out feature_sign (f requests): for a port of the placement hashes alone",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    return parser


def conformance_main(argv: Sequence[str]) -> int:
    """``sniper conformance hash [--examples N] [--seed S] [--no-feature-signs] -- COMMAND
    [ARGS...]``.

    Prints one summary line on standard output and returns 0 when every answer agrees, 1 on a
    mismatch (or a command that stops answering); 2 with one ``sniper: error: ...`` line on
    standard error for a usage error or a command that cannot run.
    """
    argv = list(argv)
    parser = _parser()
    try:
        if "--" not in argv:
            if any(arg in ("-h", "--help") for arg in argv):
                parser.print_help()
                return EXIT_AGREE
            raise _UsageError(
                "give the port's command after `--`, e.g. "
                "sniper conformance hash -- node tests/hashing/ports/hash.js"
            )
        split = argv.index("--")
        args = parser.parse_args(argv[:split])
        command = argv[split + 1 :]
        if not command:
            raise _UsageError("no command after `--`; give the port's program and arguments")
        report = check_hash_command(
            command, examples=args.examples, seed=args.seed, features=args.features
        )
    except _UsageError as exc:
        return _usage_error(f"{exc} (usage: {_USAGE})")
    except SystemExit as exc:  # --help before `--`: argparse printed it and asked to exit
        return int(exc.code or 0)
    except HashCommandError as exc:
        if not exc.started:
            return _usage_error(str(exc))
        print(f"hash conformance: {exc}")
        return EXIT_MISMATCH
    print(report.summary())
    return EXIT_AGREE if report.ok else EXIT_MISMATCH


def _usage_error(message: str) -> int:
    print(f"sniper: error: {_one_line(message)}", file=sys.stderr)
    return EXIT_USAGE


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _shorten(text: str, limit: int = _SHOWN) -> str:
    """``text`` on one line and at most about ``limit`` characters, marking what was cut."""
    text = text.replace("\n", "\\n")
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}...({len(text) - limit + 20} more)"
