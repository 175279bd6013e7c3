"""Start sniper servers as subprocesses and stop them, whatever happens in between.

A server prints ``listening on HOST:PORT`` as its first line; :func:`server_process` waits for
it (with a timeout), yields the port, and on exit sends SIGTERM, waits, and kills a server that
does not stop, so no process outlives its caller.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["ServerProcess", "ps_command", "server_process", "sniper_command"]


def sniper_command(*args: str) -> list[str]:
    """The command line of ``sniper ARGS`` with the running interpreter."""
    return [sys.executable, "-m", "sniper", *args]


def ps_command(scheduler: str, workers: int, *extra: str) -> list[str]:
    """``sniper serve --role ps`` on a free loopback port, with ``extra`` flags."""
    return sniper_command(
        "serve",
        "--role",
        "ps",
        "--port",
        "0",
        "--scheduler",
        scheduler,
        "--workers",
        str(workers),
        *extra,
    )


class ServerProcess:
    """A started server: its process, port and exit status once stopped."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.returncode: int | None = None


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
    command: Sequence[str], start_timeout: float = 120.0, stop_timeout: float = 30.0
) -> Iterator[ServerProcess]:
    """Run ``command`` until the block ends; raise if it does not start listening in time."""
    process = subprocess.Popen(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    server = None
    try:
        line = _first_line(process, start_timeout)
        if not line.startswith("listening on "):
            raise RuntimeError(
                f"{' '.join(command[1:4])} did not start "
                f"(first line {line!r}, exit status {process.poll()})"
            )
        server = ServerProcess(process, int(line.rsplit(":", 1)[1]))
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        if process.stdin:
            process.stdin.close()
        try:
            process.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()
        if server is not None:
            server.returncode = process.returncode
