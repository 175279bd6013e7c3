"""Start sniper servers as subprocesses and stop them, whatever happens in between.

A server prints ``listening on HOST:PORT`` as its first line; :func:`server_process` waits for
it (with a timeout), yields the port, and on exit sends SIGTERM, waits, and kills a server that
does not stop, so no process outlives its caller.

Each server runs in a process group of its own: a terminal's Ctrl-C (SIGINT to its foreground
process group) reaches the caller alone, which may still need its servers (``sniper train``
saves the job on a first Ctrl-C) and stops them itself. A caller killed outright (``kill -9``)
cannot stop them: a server started with ``--exit-on-stdin-eof`` (every one ``sniper train``
starts) then sees its standard input, a pipe only the caller held, end, and exits.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import tomli_w

from sniper.cluster._abc import RoleStartError

__all__ = [
    "ServerProcess",
    "ps_command",
    "rank_process",
    "serve_command",
    "serve_config_command",
    "server_process",
    "sniper_command",
]


def sniper_command(*args: str) -> list[str]:
    """The command line of ``sniper ARGS`` with the running interpreter."""
    return [sys.executable, "-m", "sniper", *args]


def serve_command(role: str, *extra: str) -> list[str]:
    """``sniper serve --role ROLE`` on a free loopback port, stopping with its launcher."""
    return sniper_command("serve", "--role", role, "--port", "0", "--exit-on-stdin-eof", *extra)


def serve_config_command(config: object, path: Path) -> list[str]:
    """``sniper serve --config PATH`` with ``config`` (a validated ``ServeConfig``) written
    to ``path`` as TOML: a server gets its config as data, not as flags it parses again."""
    path.write_text(tomli_w.dumps(dataclasses.asdict(config)))  # type: ignore[call-overload]
    return sniper_command("serve", "--config", str(path))


def ps_command(scheduler: str, workers: int, *extra: str) -> list[str]:
    """``sniper serve --role ps`` (see :func:`serve_command`) with ``extra`` flags."""
    return serve_command("ps", "--scheduler", scheduler, "--workers", str(workers), *extra)


class ServerProcess:
    """A started server: its process, port and exit status once stopped."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.returncode: int | None = None
        self.metrics_url: str | None = None
        """Its Prometheus endpoint, when it was started with one."""


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    box: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(
        target=lambda: box.append(process.stdout.readline()),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    reader.join(timeout)
    return box[0].strip() if box else ""


@contextmanager
def server_process(
    command: Sequence[str],
    start_timeout: float = 120.0,
    stop_timeout: float = 45.0,
    *,
    metrics: bool = False,
    role: str = "server",
) -> Iterator[ServerProcess]:
    """Run ``command`` until the block ends; :class:`~sniper.cluster.RoleStartError` naming
    ``role`` (``"ps 1"``) if it exits or does not start listening in time. With ``metrics``,
    the server prints its metrics URL after the listening line.

    The server's stderr goes to a temporary file, quoted when it fails to start. Its stdin is a
    pipe closed on exit, which a server started with ``--exit-on-stdin-eof`` also obeys.
    ``stop_timeout`` exceeds a ps's 30 s drain, so a draining ps is not killed mid-drain.
    """
    with tempfile.TemporaryFile(mode="w+") as stderr:
        yield from _run(command, stderr, start_timeout, stop_timeout, metrics, role)


def _run(
    command: Sequence[str],
    stderr: IO[str],
    start_timeout: float,
    stop_timeout: float,
    metrics: bool,
    role: str,
) -> Iterator[ServerProcess]:
    process = subprocess.Popen(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        process_group=0,
    )
    server = None
    try:
        line = _first_line(process, start_timeout)
        if not line.startswith("listening on "):
            process.kill()
            process.wait()
            stderr.seek(0)
            tail = stderr.read().strip().splitlines()[-1:] or [_exit_status(process.poll())]
            raise RoleStartError(
                role, f"{role} did not start: {tail[0]} ({' '.join(command[3:6])})"
            )
        server = ServerProcess(process, int(line.rsplit(":", 1)[1]))
        if metrics:
            server.metrics_url = _first_line(process, start_timeout).removeprefix("metrics on ")
        yield server
    finally:
        _stop(process, stop_timeout)
        if server is not None:
            server.returncode = process.returncode


@contextmanager
def rank_process(
    command: Sequence[str], stop_timeout: float = 45.0
) -> Iterator[subprocess.Popen[str]]:
    """Run a trainer rank's ``command`` (``sniper train --rank R``) until the block ends, as a
    server runs: in a process group of its own, its standard input a pipe this process holds
    (a rank exits when it ends), stopped with SIGTERM, then killed. It serves no port: it
    joins the job's ranks by itself, and its log lines go to this process's standard error."""
    process = subprocess.Popen(list(command), stdin=subprocess.PIPE, text=True, process_group=0)
    try:
        yield process
    finally:
        _stop(process, stop_timeout)


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name} (exit status {code})"
    return f"exit status {code}"


def _stop(process: subprocess.Popen[str], timeout: float) -> None:
    """SIGTERM, wait, then SIGKILL; a second interrupt while waiting still kills it."""
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        if process.stdin:
            process.stdin.close()
        process.wait(timeout=timeout)
    except BaseException:
        process.kill()
        process.wait()
        if not isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
            raise
    finally:
        if process.stdout:
            process.stdout.close()
