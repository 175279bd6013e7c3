"""grpclib's send loop with frames as views (sniper.rpc._sending): the same bytes, frames and
flow control as grpclib's own."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import grpclib.client
import grpclib.server
import numpy as np
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, StreamEnded
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.roles import PsEngine, PsRole
from sniper.rpc import LookupTarget, NextLookup, PsClient, VariableConfig
from sniper.rpc._codec import SniperCodec
from sniper.rpc._frames import Gathered, LeanConnection, lean
from sniper.rpc._generated.sniper.v1 import EmbeddingLookupResponse
from sniper.rpc._sending import send_message
from sniper.rpc._wire import EncodedLookupResponse, lookup_response
from sniper.scheduler import open_scheduler
from sniper.store import Adagrad, EmbeddingTable, uniform
from sniper.transport import GrpcSettings, GrpcTransport


class _Codec:
    def encode(self, message: bytes, message_type: Any) -> bytes:
        return message


@dataclass
class _H2:
    """What the loop asks of h2: windows (the next one each time), the frame size, and the
    DATA frames it is given."""

    windows: list[int]
    max_outbound_frame_size: int
    frames: list[tuple[bytes, bool]] = field(default_factory=list)

    def local_flow_control_window(self, stream_id: int) -> int:
        return self.windows.pop(0) if len(self.windows) > 1 else self.windows[0]

    def send_data(self, stream_id: int, data: Any, end_stream: bool = False) -> None:
        assert len(data) <= self.max_outbound_frame_size
        self.frames.append((bytes(data), end_stream))

    def data_to_send(self) -> bytes:
        return b""


class _Connection:
    def __init__(self) -> None:
        self.write_ready = anyio.Event()
        self.write_ready.set()
        self.data_sent = 0

    def data_send_process(self) -> None:
        pass


class _Transport:
    def write(self, data: bytes) -> None:
        pass


class _Stream:
    """The attributes of a ``grpclib.protocol.Stream`` that its send loop uses."""

    def __init__(self, h2: _H2) -> None:
        self.id = 1
        self._h2_connection = h2
        self._transport = _Transport()
        self.connection = _Connection()
        self.window_updated = anyio.Event()
        self.data_sent = 0


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=300),
    st.lists(st.integers(1, 64), min_size=1, max_size=8),
    st.integers(1, 64),
    st.booleans(),
)
def test_frames_carry_the_prefixed_message_within_each_window(
    body: bytes, windows: list[int], frame: int, end: bool
) -> None:
    """However small the windows and frames (the prefix cut across frames included), the
    frames' bytes are gRPC's prefix and the message, each frame within the window and frame
    size it was sent under, the stream ended by the last frame only when asked."""
    h2 = _H2(list(windows), frame)
    stream = _Stream(h2)
    anyio.run(lambda: send_message(stream, _Codec(), body, bytes, end=end))  # type: ignore[arg-type]
    expected = struct.pack(">?I", False, len(body)) + body
    assert b"".join(data for data, _ in h2.frames) == expected
    assert [ended for _, ended in h2.frames] == [False] * (len(h2.frames) - 1) + [end]
    allowed = [*windows, *[windows[-1]] * len(h2.frames)]
    for (data, _), window in zip(h2.frames, allowed, strict=False):
        assert 0 < len(data) <= min(window, frame)
    assert stream.data_sent == stream.connection.data_sent == len(expected)


class _PiecesCodec:
    """A codec giving its message as pieces cut at ``cuts`` (bytes and views), as
    ``SniperCodec.encode_parts`` gives a prepared message's."""

    def __init__(self, cuts: list[int]) -> None:
        self.cuts = cuts

    def encode(self, message: bytes, message_type: Any) -> bytes:
        raise AssertionError("the send loop asks for the pieces")

    def encode_parts(self, message: bytes, message_type: Any) -> list[bytes | memoryview]:
        bounds = [0, *sorted(min(cut, len(message)) for cut in self.cuts), len(message)]
        pieces = [message[a:b] for a, b in itertools.pairwise(bounds)]
        return [memoryview(p) if i % 2 else p for i, p in enumerate(pieces)]


def _open_stream() -> tuple[H2Connection, H2Connection]:
    """A lean client connection with stream 1 open, and the server it talks to."""
    client = lean(H2Connection(H2Configuration(client_side=True)))
    server = H2Connection(H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    client.send_headers(
        1, [(":method", "POST"), (":path", "/x"), (":scheme", "http"), (":authority", "a")]
    )
    server.receive_data(bytes(client.data_to_send()))
    client.receive_data(server.data_to_send())
    return client, server


class _Written(_Transport):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(bytes(data))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=40_000), st.lists(st.integers(0, 40_000), max_size=6), st.booleans())
def test_a_message_in_pieces_reaches_the_peer_whole_through_a_lean_connection(
    body: bytes, cuts: list[int], end: bool
) -> None:
    """The pieces go to the lean connection as frames of pieces, never joined: the peer's h2
    reads the prefixed message, in DATA frames no larger than the frame size."""
    client, server = _open_stream()
    assert isinstance(client, LeanConnection)
    stream = _Stream(client)  # type: ignore[arg-type]
    stream._transport = written = _Written()
    given_data: list[Any] = []
    send_data = client.send_data

    def recorded(stream_id: int, data: Any, end_stream: bool = False) -> None:
        given_data.append(data)
        send_data(stream_id, data, end_stream=end_stream)

    client.send_data = recorded  # type: ignore[method-assign,assignment]
    anyio.run(lambda: send_message(stream, _PiecesCodec(cuts), body, bytes, end=end))  # type: ignore[arg-type]
    assert all(type(data) is Gathered for data in given_data)
    events = server.receive_data(b"".join(written.chunks))
    received = [e for e in events if isinstance(e, DataReceived)]
    assert b"".join(bytes(e.data) for e in received) == struct.pack(">?I", False, len(body)) + body
    assert all(len(e.data) <= client.max_outbound_frame_size for e in received)
    assert any(isinstance(e, StreamEnded) for e in events) is end


def test_grpclib_sends_through_it() -> None:
    assert grpclib.client.send_message is send_message  # type: ignore[attr-defined]
    assert grpclib.server.send_message is send_message  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_large_messages_cross_small_windows_and_frames_whole() -> None:
    """A 320 KB push and the 320 KB lookup answered in its call, both ways through 64 KiB
    windows in 16 KiB frames (the loop waits for window updates many times a message)."""
    rows, dim = 5000, 16
    signs = np.arange(rows, dtype=np.uint64)
    offsets = np.arange(rows + 1, dtype=np.int64)
    grads = np.linspace(-1, 1, rows * dim, dtype=np.float32).reshape(rows, dim)
    table = EmbeddingTable(
        dim, capacity=2 * rows, optimizer=Adagrad(lr=0.5), initializer=uniform(-1, 1), seed=3
    )
    window_mb, frame_kb = 64 / 1024, 16
    settings = GrpcSettings(http2_window_mb=window_mb, http2_frame_kb=frame_kb)
    async with open_scheduler("thread_pool", workers=2) as scheduler:
        role = PsRole(PsEngine(scheduler))
        async with GrpcTransport(settings).serve(role, "127.0.0.1:0") as address:
            host, _, port = address.rpartition(":")
            async with PsClient(
                host, int(port), http2_window_mb=window_mb, http2_frame_kb=frame_kb
            ) as client:
                config = VariableConfig(
                    "emb",
                    dim,
                    2 * rows,
                    optimizer="adagrad",
                    optimizer_params={"lr": 0.5},
                    initializer=("uniform", -1, 1),
                    seed=3,
                )
                await client.create_variable(config)
                for batch in (1, 2):
                    await client.feed_sample(batch, {"emb": (signs, offsets)})
                matrix = np.zeros((rows, dim), dtype=np.float32)
                then = NextLookup(2, ["emb"], into=LookupTarget(matrix, {"emb": 0}))
                _, answers = await client.push_grad_then_lookup(1, {"emb": grads}, then)
    table.push_grad(signs, offsets, grads)
    assert answers is not None
    np.testing.assert_allclose(matrix, table.lookup_pool(signs, offsets), rtol=1e-6)


@pytest.mark.parametrize("given", ["float32 view", "2-D array", "strided array", "bytearray"])
def test_a_prepared_answer_from_any_buffer_is_sent_as_its_bytes(given: str) -> None:
    """A handler's prepared answer, its bytes given as a view of 4-byte items (whose ``len``
    is a quarter of its bytes), a 2-D array (its rows), a strided array or a bytearray: the
    message goes out whole, under a prefix of its length. The first two were sent with a
    length prefix that short."""
    wire = lookup_response([("a", np.ones((3, 4), np.float32), 0.5)]).wire
    cut = len(wire) - len(wire) % 4
    choices: dict[str, list[Any]] = {
        "float32 view": [
            np.frombuffer(wire[:cut], dtype=np.float32).data,
            np.zeros((0, 4), np.float32),  # nothing, in a shape memoryview cannot cast
            wire[cut:],
        ],
        "2-D array": [np.frombuffer(wire, dtype=np.uint8).reshape(1, -1)],
        "strided array": [np.repeat(np.frombuffer(wire, dtype=np.uint8), 2)[::2]],
        "bytearray": [bytearray(wire)],
    }
    pieces = choices[given]
    answers = [EncodedLookupResponse(pieces)]
    if len(pieces) == 1:
        answers.append(EncodedLookupResponse(pieces[0]))
    for answer in answers:
        h2 = _H2([1 << 20], 1 << 14)
        stream = _Stream(h2)
        codec = SniperCodec(1 << 20)
        anyio.run(partial(send_message, stream, codec, answer, EmbeddingLookupResponse))
        sent = b"".join(data for data, _ in h2.frames)
        assert sent == struct.pack(">?I", False, len(wire)) + wire
