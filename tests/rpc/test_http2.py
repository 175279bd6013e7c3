"""sniper's grpclib Server and Channel: the HTTP/2 settings they promise are on the wire."""

from __future__ import annotations

import asyncio
import os
import struct

import hyperframe.frame
import numpy as np
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, ResponseReceived, StreamEnded, TrailersReceived
from hypothesis import given
from hypothesis import strategies as st

from sniper.rpc import Channel, Server
from sniper.rpc._frames import short_data_repr
from sniper.rpc._generated.grpc.health.v1 import (
    HealthCheckRequest,
    HealthCheckResponse,
    HealthCheckResponseServingStatus,
    HealthStub,
)
from sniper.rpc._http2 import FRAME_BYTES
from sniper.testing import running_ps
from sniper.transport import HealthService, bound_address


@given(st.binary(max_size=64))
def test_short_repr_is_the_string_hyperframe_would_build(data: bytes) -> None:
    frame = hyperframe.frame.DataFrame(1, data=data)
    hexed = data.hex()
    expected = "<hex:" + (hexed[:20] + "..." if len(hexed) > 20 else hexed) + ">"
    assert frame._body_repr() == (expected if data else "None")
    assert short_data_repr(data) == (expected if data else "None")


def test_repr_of_a_large_frame_reads_only_its_first_bytes() -> None:
    frame = hyperframe.frame.DataFrame(1, data=os.urandom(8 * 2**20))
    assert len(repr(frame)) < 200


@pytest.mark.anyio
async def test_both_ends_advertise_the_larger_frame_size() -> None:
    server = Server([HealthService(("sniper.v1.Ps",), lambda: True)])
    await server.start("127.0.0.1", 0)
    host, port = bound_address(server)
    channel = Channel(host, port)
    try:
        response = await HealthStub(channel).check(HealthCheckRequest(service="sniper.v1.Ps"))
        assert response.status == 1  # SERVING
        protocol = channel._protocol
        assert protocol is not None
        h2 = protocol.connection._connection
        # Acknowledged by the server: what this client accepts, and what the server accepts.
        assert h2.local_settings.max_frame_size == FRAME_BYTES
        assert h2.max_outbound_frame_size == FRAME_BYTES
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("frame_bytes", [0, 16383, 2**24])
def test_a_frame_size_outside_http2_bounds_is_refused(frame_bytes: int) -> None:
    with pytest.raises(ValueError, match="frame_bytes must be in"):
        Channel("127.0.0.1", 1, frame_bytes=frame_bytes)
    with pytest.raises(ValueError, match="frame_bytes must be in"):
        Server([], frame_bytes=frame_bytes)


@pytest.mark.anyio
@pytest.mark.parametrize("signs", [12_000, 20_000, 30_000])
async def test_a_large_first_message_on_a_new_connection_gets_through(signs: int) -> None:
    """96-240 KB as the very first call: one DATA frame above HTTP/2's default, read in the same
    chunk as the SETTINGS ACK. h2 would refuse it as overlong, dropping the connection, if the
    larger size applied only from the ACK. The ps answers it (NOT_FOUND: no such variable)."""
    for _ in range(3):  # fresh connections: the race is on each one's first call
        async with running_ps() as (_, client):
            offsets = np.array([0, signs], dtype=np.int64)
            with pytest.raises(GRPCError) as raised:
                await client.feed_sample(1, {"v": (np.arange(signs, dtype=np.uint64), offsets)})
            assert raised.value.status == Status.NOT_FOUND


@pytest.mark.anyio
async def test_an_empty_data_frame_inside_a_message_is_nothing() -> None:
    """HTTP/2 allows a DATA frame of no bytes anywhere in a stream; grpclib's buffer took one
    for the stream's end, so a request cut around it failed as an internal error. A peer of
    plain h2 sends a health check in two halves with an empty frame between."""
    server = Server([HealthService(("sniper.v1.Ps",), lambda: True)])
    await server.start("127.0.0.1", 0)
    host, port = bound_address(server)
    reader, writer = await asyncio.open_connection(host, port)
    peer = H2Connection(H2Configuration(client_side=True))
    peer.initiate_connection()
    peer.send_headers(1, _request_headers(f"{host}:{port}", "/grpc.health.v1.Health/Check"))
    message = bytes(HealthCheckRequest(service="sniper.v1.Ps"))
    body = struct.pack(">?I", False, len(message)) + message
    try:
        writer.write(peer.data_to_send())
        for part, end in ((body[:3], False), (b"", False), (body[3:], True)):
            writer.write(_data_frame(1, part, end))  # h2 sends no empty frame but the last
        answer = await asyncio.wait_for(_answer(reader, peer, writer), timeout=10)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()
    assert answer[0] == ("grpc-status", "0"), answer
    serving = HealthCheckResponse(status=HealthCheckResponseServingStatus(1))
    assert answer[1] == 5 + len(bytes(serving))


def _request_headers(authority: str, path: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


def _data_frame(stream_id: int, body: bytes, end: bool) -> bytes:
    frame = hyperframe.frame.DataFrame(stream_id, body, flags=["END_STREAM"] if end else [])
    return frame.serialize()


async def _answer(
    reader: asyncio.StreamReader, peer: H2Connection, writer: asyncio.StreamWriter
) -> tuple[tuple[str, str], int]:
    """Read until the stream ends: its grpc-status header (in its trailers, or in its only
    headers) and the answer's bytes."""
    received = 0
    headers: list[tuple[str, str]] = []
    while True:
        chunk = await reader.read(65536)
        assert chunk, "the server closed the connection"
        for event in peer.receive_data(chunk):
            if isinstance(event, DataReceived):
                received += len(event.data)
                peer.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if isinstance(event, ResponseReceived | TrailersReceived):
                headers += [(_text(k), _text(v)) for k, v in event.headers]
            if isinstance(event, StreamEnded):
                return next(h for h in headers if h[0] == "grpc-status"), received
        writer.write(peer.data_to_send())


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@pytest.mark.anyio
async def test_an_answer_that_ends_without_a_status_ends_the_call() -> None:
    """A peer that answers with headers and a message and ends the stream without trailers
    (not a gRPC server, or a broken one): the call, given no deadline, waited for them
    forever. It ends with StreamTerminatedError, one line that says why."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = H2Connection(H2Configuration(client_side=False))
        peer.initiate_connection()
        writer.write(peer.data_to_send())
        try:
            while chunk := await reader.read(65536):
                for event in peer.receive_data(chunk):
                    if isinstance(event, StreamEnded):  # the request is in: answer it, no status
                        headers = [(":status", "200"), ("content-type", "application/grpc")]
                        peer.send_headers(event.stream_id, headers)
                        serving = bytes(
                            HealthCheckResponse(status=HealthCheckResponseServingStatus(1))
                        )
                        message = struct.pack(">?I", False, len(serving)) + serving
                        peer.send_data(event.stream_id, message, end_stream=True)
                writer.write(peer.data_to_send())
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    channel = Channel(host, port)
    try:
        check = HealthStub(channel).check(HealthCheckRequest(service="sniper.v1.Ps"))
        with pytest.raises(StreamTerminatedError, match="without a grpc-status"):
            await asyncio.wait_for(check, timeout=10)
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
