"""A peer lost mid-call reaches the caller as ``GRPCError(UNAVAILABLE)`` naming it, never as a
cancellation: the caller's task is not left cancelled, and the anyio task group around it exits
normally (grpclib cancels the task to wake it and never uncancels it; a ``sniper train`` whose
ps was killed died of the ``CancelledError`` that escaped a later scope)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper.rpc import HubClient, PeerError, PsClient
from tests.rpc._grpcio import start_server, stop_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib runs on asyncio only


async def _in_a_task_group(call: Callable[[], Awaitable[object]]) -> GRPCError:
    """``call()`` inside a task group and a cancel scope, as the trainer makes its calls; the
    error it raised, after checking that the task is not left cancelled."""
    errors: list[GRPCError] = []
    async with anyio.create_task_group():
        with anyio.CancelScope():
            try:
                await call()
            except GRPCError as exc:
                errors.append(exc)
            task = asyncio.current_task()
            assert task is not None and task.cancelling() == 0
        await anyio.sleep(0)  # a checkpoint after the call: no CancelledError lands here
    assert len(errors) == 1, "the call did not fail"
    return errors[0]


@contextmanager
def dropping_server() -> Iterator[int]:
    """A TCP server that reads the start of each call, then drops its connection; its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # closed
            with connection:
                connection.recv(65536)  # the HTTP/2 preface, settings and the call's frames

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    try:
        yield port
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        worker.join(timeout=5)


async def _stats_error(client: PsClient) -> GRPCError:
    """The error of ``client``'s Stats call (:func:`_in_a_task_group`), the client closed."""
    try:
        return await _in_a_task_group(client.stats)
    finally:
        client.close()


async def test_a_connection_dropped_mid_call_is_unavailable_naming_the_peer() -> None:
    with dropping_server() as port:
        error = await _stats_error(PsClient("127.0.0.1", port, retries=0))
    assert error.status == Status.UNAVAILABLE
    assert error.message is not None
    assert error.message.startswith(f"ps 127.0.0.1:{port}: connection lost")


async def test_a_retried_call_rides_the_retries_then_is_unavailable() -> None:
    with dropping_server() as port:
        client = PsClient("127.0.0.1", port, retries=2, backoff=0.001)
        try:
            error = await _in_a_task_group(lambda: client.save("nowhere"))
        finally:
            client.close()
    assert error.status == Status.UNAVAILABLE
    assert error.message is not None and f"ps 127.0.0.1:{port}: connection" in error.message


async def test_a_refused_connect_is_unavailable_naming_the_peer() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    # Nothing listens on ``port`` now.
    error = await _stats_error(PsClient("127.0.0.1", port, retries=1, backoff=0.001))
    assert error.status == Status.UNAVAILABLE
    assert error.message is not None
    assert error.message.startswith(f"ps 127.0.0.1:{port}: connection refused")
    hub = HubClient("127.0.0.1", port)
    try:
        error = await _in_a_task_group(hub.read_sample)
    finally:
        hub.close()
    assert (error.status, error.message) == (
        Status.UNAVAILABLE,
        f"hub 127.0.0.1:{port}: connection refused (ConnectionRefusedError: [Errno 111] "
        f"Connect call failed ('127.0.0.1', {port}))",
    )


async def test_a_host_name_that_does_not_resolve_is_said_so() -> None:
    """``.invalid`` never resolves (RFC 6761): a DNS failure, not a lost connection as it was
    called."""
    error = await _stats_error(PsClient("nosuchhost.invalid", 5000, retries=0))
    assert error.status == Status.UNAVAILABLE
    assert error.message is not None
    assert error.message.startswith(
        "ps nosuchhost.invalid:5000: its host name does not resolve (gaierror: "
    )
    assert isinstance(error, PeerError)
    assert error.line.endswith("; no such host here (DNS or /etc/hosts): correct the address")


async def test_a_ps_killed_mid_call_is_unavailable_naming_it(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--workers", "1")
    client = PsClient(server.host, server.port, retries=0)
    try:
        await client.stats()  # connected
        os.kill(server.process.pid, signal.SIGSTOP)  # the next call waits for its answer
        kill = asyncio.get_running_loop().call_later
        kill(0.2, os.kill, server.process.pid, signal.SIGKILL)
        error = await _in_a_task_group(client.stats)
    finally:
        client.close()
        if server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGCONT)
        stop_server(server)
    assert error.status == Status.UNAVAILABLE
    assert error.message is not None
    assert error.message.startswith(f"ps {server.host}:{server.port}: connection lost")


async def test_a_cancel_of_the_callers_own_scope_still_arrives() -> None:
    with dropping_server() as port:
        client = PsClient("127.0.0.1", port, retries=0)
        try:
            with anyio.CancelScope() as scope:
                scope.cancel()
                await client.stats()
            assert scope.cancelled_caught
        finally:
            client.close()


async def test_a_connection_grpclib_closed_under_a_call_is_unavailable_naming_the_peer(
    tmp_path: Path,
) -> None:
    """grpclib drops a closed connection's transport before its channel hears of the loss; a
    call made in between fails inside grpclib with AttributeError (as a ps killed just as
    training started once did), which is a lost connection like any other."""
    server = start_server(tmp_path, "--workers", "1")
    client = PsClient(server.host, server.port, retries=0)
    try:
        await client.stats()  # connected
        protocol = client.channel._protocol
        assert protocol is not None
        protocol.connection.close()  # what grpclib does as the peer goes; the loss comes later
        error = await _in_a_task_group(client.stats)
    finally:
        client.close()
        stop_server(server)
    assert error.status == Status.UNAVAILABLE
    assert error.message == (
        f"ps {server.host}:{server.port}: connection lost (ConnectionResetError: the "
        "connection closed during the call)"
    )


async def test_an_attribute_error_of_sniper_s_own_is_not_taken_for_a_lost_peer() -> None:
    async def broken() -> None:
        raise AttributeError("'Batch' object has no attribute 'signs'", name="signs")

    from sniper.rpc._peer import call_peer

    with pytest.raises(AttributeError, match="signs"):
        await call_peer("ps 127.0.0.1:1", broken)
