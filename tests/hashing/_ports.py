"""Build and drive the C, Rust and JavaScript ports of sniper's placement hashes.

The ports in ``tests/hashing/ports`` are written from the definitions in ``sniper/_hashing.py``,
not from its code, so agreement between them and Python is evidence that every language a
client may be written in places variables and signs the same way.

- C is compiled with ``cc -O2 -shared -fPIC`` into a shared library and called through ctypes;
  for ``check_hash_command`` it is also linked with ``hash_main.c``, a driver of the line
  protocol, into a command (:meth:`Ports.command`).
- Rust is compiled with ``rustc -O`` into a binary, and JavaScript runs under ``node``; each is
  one long-lived subprocess per test session, fed batches of requests over a line protocol (see
  :mod:`sniper._contracts._hash`, which also checks such a command as a whole:
  ``check_hash_command(ports.command("rust"))``). Strings travel as hex of their UTF-8 bytes,
  so NUL and newlines in names cannot break the framing.

A missing toolchain is a test failure, never a skip: :meth:`Ports.get` calls ``pytest.fail``
with the tool's name and how to install it, from inside the test that needed it.

Test modules share one :class:`Ports` per session through :func:`shared_ports`::

    @pytest.fixture(scope="session")
    def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
        with shared_ports(tmp_path_factory) as shared:
            yield shared
"""

from __future__ import annotations

import abc
import contextlib
import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import pytest

from sniper._contracts._hash import HashCommand, HashCommandError
from sniper._hashing import MASK64

__all__ = [
    "LANGUAGES",
    "U64_MAX",
    "HashPort",
    "PortError",
    "Ports",
    "shared_ports",
]

PORTS_DIR: Final = Path(__file__).resolve().parent / "ports"
U64_MAX: Final = MASK64
LANGUAGES: Final = ("c", "rust", "js")

_INSTALL_HINTS: Final = {
    "cc": (
        "install a C compiler that answers to `cc`: `apt-get install gcc` (Debian/Ubuntu), "
        "`dnf install gcc` (Fedora) or `xcode-select --install` (macOS)"
    ),
    "rustc": (
        "install Rust with rustup (https://rustup.rs: "
        "`curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh`) "
        "or `apt-get install rustc`"
    ),
    "node": (
        "install Node.js 16 or newer (for BigInt and TextDecoder): `apt-get install nodejs` "
        "(Debian/Ubuntu) or from https://nodejs.org"
    ),
}
_C_FLAGS: Final = ("-O2", "-std=c99", "-Wall", "-Wextra", "-Werror")
_C_LIBRARY: Final = ("-shared", "-fPIC")
_DECIMAL = re.compile(r"[0-9]+")
_COMPILE_TIMEOUT_S: Final = 300


class PortError(RuntimeError):
    """A port died, answered garbage, or refused a request."""


class PortUnavailableError(Exception):
    """A port could not be built: its toolchain is missing or the compiler failed."""


class HashPort(abc.ABC):
    """One language's port of ``string_to_u64`` and ``shard_of_sign``, queried in batches."""

    language: str

    @abc.abstractmethod
    def bytes_to_u64(self, items: Sequence[bytes]) -> list[int]:
        """Hash raw byte strings with the 31-polynomial."""

    @abc.abstractmethod
    def string_to_u64(self, texts: Sequence[str]) -> list[int]:
        """Hash strings the way a client in this language would hash a variable name."""

    @abc.abstractmethod
    def shard_of_sign(self, queries: Sequence[tuple[int, int]]) -> list[int]:
        """Return ``splitmix64_mix(sign) % num_shards`` for each ``(sign, num_shards)``."""

    @abc.abstractmethod
    def feature_sign(self, queries: Sequence[tuple[bytes, bytes]]) -> list[int]:
        """Return ``feature_sign(variable, value)`` for each ``(variable, value)`` (bytes)."""

    def close(self) -> None:  # noqa: B027 - a port with nothing to release keeps the default
        """Release the port's process, if it has one."""

    def __repr__(self) -> str:
        return f"<{self.language} port>"


def _check_shard_query(sign: int, num_shards: int) -> None:
    if not 0 <= sign <= U64_MAX:
        raise ValueError(f"ports take signs in [0, 2**64), got {sign}")
    if not 1 <= num_shards <= U64_MAX:
        raise ValueError(f"ports take num_shards in [1, 2**64), got {num_shards}")


class CPort(HashPort):
    """The C port, loaded from a shared library with ctypes."""

    language = "c"

    def __init__(self, library: Path) -> None:
        lib = ctypes.CDLL(str(library))
        self._hash = lib.sniper_string_to_u64
        # c_char_p passes a pointer to the bytes object's buffer; the explicit length makes
        # embedded NULs part of the string rather than its end.
        self._hash.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self._hash.restype = ctypes.c_uint64
        self._shard = lib.sniper_shard_of_sign
        self._shard.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
        self._shard.restype = ctypes.c_uint64
        self._feature = lib.sniper_feature_sign
        self._feature.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        self._feature.restype = ctypes.c_uint64

    def bytes_to_u64(self, items: Sequence[bytes]) -> list[int]:
        return [int(self._hash(item, len(item))) for item in items]

    def string_to_u64(self, texts: Sequence[str]) -> list[int]:
        # A C client hashes whatever UTF-8 bytes it holds; there is no other notion of a string.
        return self.bytes_to_u64([text.encode("utf-8") for text in texts])

    def shard_of_sign(self, queries: Sequence[tuple[int, int]]) -> list[int]:
        for sign, num_shards in queries:
            _check_shard_query(sign, num_shards)
        return [int(self._shard(sign, num_shards)) for sign, num_shards in queries]

    def feature_sign(self, queries: Sequence[tuple[bytes, bytes]]) -> list[int]:
        return [int(self._feature(v, len(v), x, len(x))) for v, x in queries]


class ProcessPort(HashPort):
    """A port running as a subprocess, driven through sniper's client of the line protocol.

    :class:`sniper._contracts._hash.HashCommand` is the one implementation of the protocol's
    client side: ``sniper conformance hash`` and these tests speak it through the same code.
    """

    def __init__(self, language: str, argv: Sequence[str], log_path: Path) -> None:
        self.language = language
        self.argv = tuple(argv)
        """The command that runs the port; ``check_hash_command`` takes it too."""
        self._command = HashCommand(argv, stderr_path=log_path)

    def bytes_to_u64(self, items: Sequence[bytes]) -> list[int]:
        return self._ask([f"b {item.hex()}" for item in items])

    def string_to_u64(self, texts: Sequence[str]) -> list[int]:
        return self._ask([f"s {text.encode('utf-8').hex()}" for text in texts])

    def shard_of_sign(self, queries: Sequence[tuple[int, int]]) -> list[int]:
        for sign, num_shards in queries:
            _check_shard_query(sign, num_shards)
        return self._ask([f"h {sign} {num_shards}" for sign, num_shards in queries])

    def feature_sign(self, queries: Sequence[tuple[bytes, bytes]]) -> list[int]:
        return self._ask([f"f {variable.hex()} {value.hex()}" for variable, value in queries])

    def _ask(self, requests: Sequence[str]) -> list[int]:
        """Send one batch and parse its answers, which must all be decimal."""
        try:
            lines = self._command.ask(requests)
        except HashCommandError as exc:
            raise PortError(f"{self.language} port: {exc}") from exc
        answers = []
        for request, line in zip(requests, lines, strict=True):
            if not _DECIMAL.fullmatch(line):
                raise PortError(f"{self.language} port answered {line!r} to {request!r}")
            answers.append(int(line))
        return answers

    def close(self) -> None:
        self._command.close()


def _require_tool(tool: str, language: str) -> str:
    found = shutil.which(tool)
    if found is None and tool == "rustc":
        # rustup installs here; a shell that never sourced ~/.cargo/env does not have it on PATH.
        candidate = Path.home() / ".cargo" / "bin" / "rustc"
        if os.access(candidate, os.X_OK):
            found = str(candidate)
    if found is None:
        raise PortUnavailableError(
            f"`{tool}` was not found on PATH, and the cross-language hash tests need it for "
            f"the {language} port; {_INSTALL_HINTS[tool]}"
        )
    return found


def _compile(argv: Sequence[str], language: str) -> None:
    try:
        result = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_COMPILE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PortUnavailableError(f"building the {language} port timed out: {argv}") from exc
    if result.returncode != 0:
        raise PortUnavailableError(
            f"building the {language} port failed (exit status {result.returncode}): "
            f"{' '.join(argv)}\n{result.stdout}{result.stderr}"
        )


def _build_c(workdir: Path) -> HashPort:
    cc = _require_tool("cc", "C")
    library = workdir / "libsniper_hash.so"
    source = PORTS_DIR / "hash.c"
    _compile([cc, *_C_FLAGS, *_C_LIBRARY, "-o", str(library), str(source)], "C")
    return CPort(library)


def _build_c_command(workdir: Path) -> list[str]:
    """The C port and its line-protocol driver linked into one binary."""
    cc = _require_tool("cc", "C")
    binary = workdir / ("sniper_hash_c.exe" if os.name == "nt" else "sniper_hash_c")
    sources = [str(PORTS_DIR / "hash.c"), str(PORTS_DIR / "hash_main.c")]
    _compile([cc, *_C_FLAGS, "-o", str(binary), *sources], "C")
    return [str(binary)]


def _build_rust(workdir: Path) -> HashPort:
    rustc = _require_tool("rustc", "Rust")
    binary = workdir / ("sniper_hash_rs.exe" if os.name == "nt" else "sniper_hash_rs")
    source = PORTS_DIR / "hash.rs"
    _compile([rustc, "-O", "--edition", "2021", "-o", str(binary), str(source)], "Rust")
    return ProcessPort("rust", [str(binary)], workdir / "rust.stderr")


def _build_js(workdir: Path) -> HashPort:
    node = _require_tool("node", "JavaScript")
    return ProcessPort("js", [node, str(PORTS_DIR / "hash.js")], workdir / "js.stderr")


_BUILDERS: Final[dict[str, Callable[[Path], HashPort]]] = {
    "c": _build_c,
    "rust": _build_rust,
    "js": _build_js,
}


class Ports:
    """The session's ports, each built on first use and kept until :meth:`close`."""

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._ports: dict[str, HashPort] = {}
        self._unavailable: dict[str, str] = {}
        self._c_command: list[str] | None = None

    def get(self, language: str) -> HashPort:
        """Return the port for ``language``, failing the calling test if it cannot be built."""
        if language not in _BUILDERS:
            raise KeyError(f"no port for {language!r}; ports exist for {LANGUAGES}")
        if language not in self._ports and language not in self._unavailable:
            try:
                self._ports[language] = _BUILDERS[language](self._workdir)
            except PortUnavailableError as exc:
                self._unavailable[language] = str(exc)
        if language in self._unavailable:
            pytest.fail(self._unavailable[language], pytrace=False)
        return self._ports[language]

    def command(self, language: str) -> list[str]:
        """The command line of ``language``'s port, building it first if needed (the C
        port's is its library's functions linked with the line-protocol driver)."""
        port = self.get(language)
        if isinstance(port, ProcessPort):
            return list(port.argv)
        if self._c_command is None:
            try:
                self._c_command = _build_c_command(self._workdir)
            except PortUnavailableError as exc:
                pytest.fail(str(exc), pytrace=False)
        return list(self._c_command)

    def all(self) -> list[HashPort]:
        """Return every port, failing the calling test if any cannot be built."""
        return [self.get(language) for language in LANGUAGES]

    def close(self) -> None:
        ports, self._ports = self._ports, {}
        for port in ports.values():
            port.close()


class _Shared:
    ports: Ports | None = None
    users: int = 0


@contextlib.contextmanager
def shared_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    """Lend the session's single :class:`Ports`, closing it when its last user is done.

    Each test module declares its own session-scoped fixture around this; pytest keeps one
    fixture instance per declaring module, and this shares the ports (and so the compilers'
    output and the subprocesses) between them.
    """
    if _Shared.ports is None:
        _Shared.ports = Ports(tmp_path_factory.mktemp("hash_ports"))
    ports = _Shared.ports
    _Shared.users += 1
    try:
        yield ports
    finally:
        _Shared.users -= 1
        if _Shared.users == 0:
            _Shared.ports = None
            ports.close()
