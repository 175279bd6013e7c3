"""The lean DATA-frame paths read and write exactly what h2's own do, and refuse what it does."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.exceptions import FrameTooLargeError
from h2.frame_buffer import FrameBuffer
from hyperframe.frame import (
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.rpc import Channel, VariableConfig
from sniper.rpc._frames import (
    Gathered,
    LeanConnection,
    LeanFrameBuffer,
    data_body_repr,
    lean,
)
from sniper.testing import running_ps

MAX_FRAME = 2**14


@st.composite
def data_frames(draw: Any) -> DataFrame:
    frame = DataFrame(draw(st.integers(1, 2**31 - 1)), data=draw(st.binary(max_size=300)))
    if draw(st.booleans()):
        frame.flags.add("END_STREAM")
    if draw(st.booleans()):
        frame.flags.add("PADDED")
        frame.pad_length = draw(st.integers(0, 255))
    return frame


def _other_frame(kind: int, stream_id: int) -> Frame:
    if kind == 0:
        headers = HeadersFrame(stream_id, data=b"\x82\x86")
        headers.flags.add("END_HEADERS")
        return headers
    if kind == 1:
        return SettingsFrame(0, settings={SettingsFrame.MAX_FRAME_SIZE: MAX_FRAME})
    if kind == 2:
        return WindowUpdateFrame(stream_id, window_increment=1000)
    return PingFrame(0, opaque_data=b"12345678")


frames = st.lists(
    st.one_of(
        data_frames(),
        st.builds(_other_frame, st.integers(0, 3), st.integers(1, 2**31 - 1)),
    ),
    min_size=1,
    max_size=6,
)


def _parsed(buffer: FrameBuffer, wire: bytes, cuts: list[int]) -> list[tuple[Any, ...]]:
    """Feed ``wire`` in pieces cut at ``cuts``; each frame read, as what it says."""
    buffer.max_frame_size = MAX_FRAME
    out = []
    start = 0
    for end in [*sorted(cuts), len(wire)]:
        buffer.add_data(wire[start:end])
        start = max(start, end)
        out += _read(buffer)
    return out


def _read(buffer: FrameBuffer) -> list[tuple[Any, ...]]:
    """Each whole frame ``buffer`` holds, as what it says."""
    return [(type(f), f.stream_id, sorted(f.flags), f.body_len, f.serialize()) for f in buffer]


@settings(max_examples=300, deadline=None)
@given(frames, st.lists(st.integers(0, 4000), max_size=8))
def test_the_lean_buffer_reads_every_frame_as_h2_does_however_the_bytes_arrive(
    sent: list[Frame], cuts: list[int]
) -> None:
    wire = b"".join(f.serialize() for f in sent)
    cuts = [min(c, len(wire)) for c in cuts]
    lean_frames = _parsed(LeanFrameBuffer(), wire, cuts)
    assert lean_frames == _parsed(FrameBuffer(), wire, cuts)
    assert len(lean_frames) == len(sent)


def _received_in_place(buffer: LeanFrameBuffer, wire: bytes, cuts: list[int]) -> list[Any]:
    """As :func:`_parsed`, but as a connection's protocol gives the bytes: each piece into
    ``receiving_into()``'s view while a body is received in place, else to ``add_data``."""
    buffer.max_frame_size = MAX_FRAME
    out = []
    start = 0
    for end in [*sorted(cuts), len(wire)]:
        while start < end:
            into = buffer.receiving_into()
            if into is None:
                buffer.add_data(wire[start:end])
                start = end
            else:
                taken = min(len(into), end - start)
                into[:taken] = wire[start : start + taken]
                start += taken
                buffer.received(taken)
            out += _read(buffer)
    return out


@settings(max_examples=300, deadline=None)
@given(frames, st.lists(st.integers(0, 4000), max_size=8), st.booleans())
def test_a_body_received_in_place_reads_as_h2_reads_it(
    sent: list[Frame], cuts: list[int], in_place: bool
) -> None:
    """Bodies of 20 bytes or more (64 KiB in a connection) go on in buffers of their own once
    their frame's header has arrived: given through ``receiving_into`` or ``add_data``, every
    frame reads as h2 reads it, in order."""
    wire = b"".join(f.serialize() for f in sent)
    cuts = [min(c, len(wire)) for c in cuts]
    buffer = LeanFrameBuffer()
    buffer.direct_bytes = 20
    lean_frames = (_received_in_place if in_place else _parsed)(buffer, wire, cuts)
    assert lean_frames == _parsed(FrameBuffer(), wire, cuts)
    assert len(lean_frames) == len(sent)


def test_a_large_body_goes_to_its_own_buffer_from_its_header_on() -> None:
    buffer = LeanFrameBuffer()
    buffer.max_frame_size = 2**20
    body = bytes(range(256)) * 1024  # 256 KiB
    wire = DataFrame(3, data=body).serialize()
    buffer.add_data(wire[:1000])
    assert list(buffer) == []
    into = buffer.receiving_into()
    assert into is not None and len(into) == len(body) - (1000 - 9)
    into[:] = wire[1000:]
    assert buffer.received(len(into))
    (frame,) = list(buffer)
    assert isinstance(frame, DataFrame)
    assert frame.data == body and frame.body_len == len(body) and frame.stream_id == 3
    assert buffer.receiving_into() is None and not buffer._data


def _bad_data_frames() -> list[bytes]:
    overlong = DataFrame(1, data=bytes(MAX_FRAME + 1)).serialize()
    on_stream_zero = b"\x00\x00\x01\x00\x00\x00\x00\x00\x00x"
    padding_too_long = b"\x00\x00\x02\x00\x08\x00\x00\x00\x01\x05x"  # PADDED, pad 5 of 2 bytes
    return [overlong, on_stream_zero, padding_too_long]


@pytest.mark.parametrize("wire", _bad_data_frames(), ids=["overlong", "stream-0", "padding"])
def test_a_data_frame_h2_refuses_is_refused_the_same_way(wire: bytes) -> None:
    errors = []
    for buffer in (FrameBuffer(), LeanFrameBuffer()):
        buffer.max_frame_size = MAX_FRAME
        buffer.add_data(wire)
        with pytest.raises(Exception) as raised:  # compared below
            next(buffer)
        errors.append((type(raised.value), str(raised.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] is not StopIteration


def test_an_overlong_data_frame_is_refused_from_its_header_alone() -> None:
    buffer = LeanFrameBuffer()
    buffer.max_frame_size = MAX_FRAME
    buffer.add_data(DataFrame(1, data=bytes(MAX_FRAME + 1)).serialize()[:100])
    with pytest.raises(FrameTooLargeError):
        next(buffer)


def _client(kind: type[H2Connection]) -> H2Connection:
    connection = kind(H2Configuration(client_side=True))
    connection.initiate_connection()
    return connection


def _gathered(data: bytes, cuts: list[int]) -> Gathered:
    """``data`` as pieces cut at ``cuts``: bytes and views."""
    bounds = [0, *sorted(min(cut, len(data)) for cut in cuts), len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    return Gathered([memoryview(p) if i % 2 else p for i, p in enumerate(pieces)])


@given(
    st.lists(
        st.tuples(
            st.binary(max_size=2000),
            st.none() | st.integers(0, 255),
            st.none() | st.lists(st.integers(0, 2000), max_size=5),
        ),
        max_size=4,
    )
)
def test_the_lean_connection_writes_the_bytes_h2_writes(chunks: list[Any]) -> None:
    """Whether a frame's data is one view or pieces (:class:`Gathered`), the lean connection
    writes the bytes h2 writes for it."""
    written = []
    for kind in (H2Connection, LeanConnection):
        connection = _client(kind)
        connection.send_headers(
            1, [(":method", "POST"), (":path", "/x"), (":scheme", "http"), (":authority", "a")]
        )
        for data, pad, cuts in chunks:
            lean_data: Any = memoryview(data) if cuts is None else _gathered(data, cuts)
            connection.send_data(1, lean_data if kind is LeanConnection else data, pad_length=pad)
        connection.end_stream(1)
        written.append(bytes(connection.data_to_send()))
    assert written[0] == written[1]


def test_the_lean_connection_hands_out_its_buffer_once() -> None:
    connection = _client(LeanConnection)
    first = connection.data_to_send()
    assert bytes(first) and not bytes(connection.data_to_send())
    connection.ping(b"12345678")
    assert bytes(connection.data_to_send(9)) == bytes(_ping_bytes()[:9])


def _ping_bytes() -> bytes:
    connection = _client(H2Connection)
    connection.data_to_send()
    connection.ping(b"12345678")
    return connection.data_to_send()


@given(data_frames())
def test_a_data_frames_repr_is_the_one_hyperframe_builds(frame: DataFrame) -> None:
    assert data_body_repr(frame) == Frame._body_repr(frame)


@given(data_frames(), st.lists(st.integers(0, 300), max_size=4))
def test_a_frame_being_sent_as_pieces_has_the_same_repr(frame: DataFrame, cuts: list[int]) -> None:
    expected = data_body_repr(frame)
    frame.data = _gathered(frame.data, cuts)  # type: ignore[assignment]
    assert data_body_repr(frame) == expected


def test_an_h2_whose_internals_differ_keeps_its_own_classes() -> None:
    connection = H2Connection()
    kept_as_bytes: Any = b""  # as h2 4.1 kept its buffers
    connection.incoming_buffer._data = kept_as_bytes
    connection._data_to_send = kept_as_bytes
    lean(connection)
    assert type(connection) is H2Connection
    assert type(connection.incoming_buffer) is FrameBuffer


@pytest.mark.anyio
async def test_a_5_mb_lookup_crosses_lean_connections_at_both_ends() -> None:
    async with running_ps() as (_, client):
        names = [f"v{i}" for i in range(76)]
        for name in names:
            await client.create_variable(_variable(name))
        signs = np.arange(1024, dtype=np.uint64)
        offsets = np.arange(1025, dtype=np.int64)
        await client.feed_sample(1, {name: (signs, offsets) for name in names})
        pooled = await client.embedding_lookup(1, names)
        assert {p.pooled.shape for p in pooled.values()} == {(1024, 16)}
        channel = client.channel
        assert isinstance(channel, Channel) and channel._protocol is not None
        h2 = channel._protocol.connection._connection
        assert type(h2) is LeanConnection
        assert type(h2.incoming_buffer) is LeanFrameBuffer


@pytest.mark.anyio
async def test_a_5_mb_answer_is_received_into_its_frames_own_buffers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The socket writes most of a 5 MB lookup answer straight into its frames' bodies."""
    in_place = []
    received = LeanFrameBuffer.received

    def counted(buffer: LeanFrameBuffer, nbytes: int) -> bool:
        in_place.append(nbytes)
        return received(buffer, nbytes)

    monkeypatch.setattr(LeanFrameBuffer, "received", counted)
    async with running_ps() as (_, client):
        names = [f"v{i}" for i in range(76)]
        for name in names:
            await client.create_variable(_variable(name))
        signs = np.arange(1024, dtype=np.uint64)
        await client.feed_sample(1, {name: (signs, np.arange(1025)) for name in names})
        in_place.clear()
        pooled = await client.embedding_lookup(1, names)
    answer_bytes = sum(p.pooled.nbytes for p in pooled.values())
    assert answer_bytes == 76 * 1024 * 16 * 4
    assert sum(in_place) > 0.9 * answer_bytes


def _variable(name: str) -> VariableConfig:
    return VariableConfig(name, 16, capacity=2048, optimizer="sgd", optimizer_params={"lr": 0.1})
