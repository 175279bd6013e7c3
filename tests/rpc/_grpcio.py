"""grpcio peers of sniper's server: generated stubs and a real ``sniper serve`` subprocess.

Test modules re-export these fixtures (``ps_server = _grpcio.ps_server``):

- ``grpcio_modules`` (session): ``sniper_pb2``, ``sniper_pb2_grpc``, ``health_pb2`` and
  ``health_pb2_grpc`` generated from ``sniper/rpc/*.proto`` with ``grpc_tools.protoc`` at test
  time, so the tests check the committed .proto files, not a stale copy of generated code;
- ``ps_server`` (module): a ``sniper serve --role ps`` process on a free loopback port, stopped
  with SIGTERM at the end of the module, which must then exit 0.

The helpers (``start_server``, ``stop_server``, ``run_cli``) are for tests that need a
process of their own.
"""

from __future__ import annotations

import importlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import IO, Any, ClassVar

import numpy as np
import pytest
from grpc_tools import protoc
from numpy.typing import NDArray

__all__ = [
    "PROTO_DIR",
    "GrpcModules",
    "ServerProcess",
    "from_tensor",
    "grpcio_modules",
    "ps_server",
    "run_cli",
    "server_command",
    "start_server",
    "stop_server",
    "to_tensor",
]

PROTO_DIR = Path(__file__).resolve().parents[2] / "sniper" / "rpc"
GENERATED = ("sniper_pb2", "sniper_pb2_grpc", "health_pb2", "health_pb2_grpc")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


@dataclass(frozen=True)
class GrpcModules:
    """The grpcio modules generated from sniper's .proto files (untyped, hence ``Any``)."""

    pb: Any
    """``sniper_pb2``: the ``sniper.v1`` messages."""
    pb_grpc: Any
    """``sniper_pb2_grpc``: ``PsStub``."""
    health: Any
    """``health_pb2``: the ``grpc.health.v1`` messages."""
    health_grpc: Any
    """``health_pb2_grpc``: ``HealthStub``."""


def generate(out: Path) -> None:
    """Run ``grpc_tools.protoc`` on sniper.proto and health.proto into ``out``."""
    include = str(files("grpc_tools") / "_proto")
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_DIR / "sniper.proto"),
            str(PROTO_DIR / "health.proto"),
        ]
    )
    assert status == 0, f"grpc_tools.protoc failed with status {status}"


class _Loaded:
    """The generated modules, imported once per process however many modules use them."""

    modules: GrpcModules | None = None
    directory: str = ""
    users: int = 0
    stashed: ClassVar[dict[str, ModuleType]] = {}
    """Same-named modules imported before (``sniper bench rpc`` imports a ``sniper_pb2``)."""


@pytest.fixture(scope="session")
def grpcio_modules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcModules]:
    """Generate and import the grpcio modules; sys.path and sys.modules are restored after.

    Each test module that re-exports this fixture gets its own instance, so the import is
    shared and undone when the last instance is torn down.
    """
    if _Loaded.modules is None:
        out = tmp_path_factory.mktemp("grpcio_generated")
        generate(out)
        _Loaded.stashed = {n: sys.modules.pop(n) for n in GENERATED if n in sys.modules}
        sys.path.insert(0, str(out))
        _Loaded.directory = str(out)
        _Loaded.modules = GrpcModules(*(importlib.import_module(name) for name in GENERATED))
    _Loaded.users += 1
    try:
        yield _Loaded.modules
    finally:
        _Loaded.users -= 1
        if _Loaded.users == 0:
            sys.path.remove(_Loaded.directory)
            for name in GENERATED:
                sys.modules.pop(name, None)
            sys.modules.update(_Loaded.stashed)
            _Loaded.stashed = {}
            importlib.invalidate_caches()
            _Loaded.modules = None


def to_tensor(pb: Any, array: NDArray[Any]) -> Any:
    """A grpcio ``sniper.v1.Tensor`` of ``array``: raw little-endian bytes, dtype and shape."""
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return pb.Tensor(dtype=array.dtype.name, shape=list(array.shape), data=little.tobytes())


def from_tensor(tensor: Any, dtype: str) -> NDArray[Any]:
    """The array in a grpcio ``Tensor``, which must have ``dtype``."""
    assert tensor.dtype == dtype, f"tensor has dtype {tensor.dtype!r}, expected {dtype!r}"
    wire = np.dtype(dtype).newbyteorder("<")
    return np.frombuffer(tensor.data, dtype=wire).reshape(tuple(tensor.shape))


# -- a real `sniper serve` process ---------------------------------------------------------------


@dataclass
class ServerProcess:
    """A running ``sniper serve`` process and where it listens."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    listening_line: str
    stderr_path: Path

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def server_command(*args: str) -> list[str]:
    """``python -m sniper serve --role ps --port 0 --scheduler thread_pool --workers 2 ARGS``."""
    base = ["--role", "ps", "--port", "0", "--scheduler", "thread_pool", "--workers", "2"]
    return [sys.executable, "-m", "sniper", "serve", *base, *args]


def _read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line from a pipe, or what came before EOF or ``timeout`` seconds."""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        data += chunk
    return data


def start_server(
    directory: Path, *args: str, command: Sequence[str] | None = None
) -> ServerProcess:
    """Start ``sniper serve`` in ``directory`` and wait for its ``listening on`` line."""
    stderr_path = directory / f"serve-{time.monotonic_ns()}.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            list(command) if command is not None else server_command(*args),
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    line = _read_line(process.stdout, START_TIMEOUT).decode(errors="replace")
    prefix = "listening on "
    if not (line.startswith(prefix) and line.endswith("\n")):
        _kill(process)
        raise AssertionError(
            f"sniper serve did not print its listening line within {START_TIMEOUT} s; "
            f"stdout {line!r}; stderr:\n{stderr_path.read_text(errors='replace')}"
        )
    host, _, port = line[len(prefix) :].strip().rpartition(":")
    return ServerProcess(process, host, int(port), line, stderr_path)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=STOP_TIMEOUT)
    if process.stdout is not None:
        process.stdout.close()


def stop_server(server: ServerProcess, timeout: float = STOP_TIMEOUT) -> int:
    """SIGTERM the server and wait for it; killed (and reported) if it does not exit in time."""
    process = server.process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        status = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise AssertionError(
            f"sniper serve did not exit within {timeout} s of SIGTERM; stderr:\n{server.stderr()}"
        ) from None
    if process.stdout is not None:
        process.stdout.close()
    return status


@pytest.fixture(scope="module")
def ps_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A ``sniper serve`` ps for one test module, run in a directory of its own.

    Its tables may use at most 0.5 GiB; a module adds flags with a ``SERVE_ARGS`` tuple.
    """
    directory = tmp_path_factory.mktemp("ps_server")
    extra: tuple[str, ...] = getattr(request.module, "SERVE_ARGS", ())
    # Save and Restore may use any of the session's temporary directories.
    root = str(tmp_path_factory.getbasetemp())
    server = start_server(directory, "--max-table-gb", "0.5", "--checkpoint-root", root, *extra)
    try:
        yield server
    finally:
        status = stop_server(server)
        assert status == 0, f"sniper serve exited with {status}; stderr:\n{server.stderr()}"


def run_cli(directory: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``python -m sniper ARGS`` to completion, with its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "sniper", *args],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
