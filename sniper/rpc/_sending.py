"""grpclib's sending of a message, without copies of the whole message on the way.

grpclib's ``send_message`` puts gRPC's 5-byte prefix (compressed flag, length) before the
serialized message by concatenation, a copy of the whole message; ``Stream.send_data`` then
cuts it into DATA frames through a ``BytesIO``, whose ``read`` copies each frame's bytes
again, and h2 copies them once more into ``bytes`` (it does so for a ``memoryview``) before
its outbound buffer. Here a message is the pieces its encoder wrote (the codec's
``encode_parts``: :class:`sniper.rpc._wire.Encoded` and ``Prepared`` keep keys, lengths and
views of the arrays, never joined), each frame is the prefix and those pieces cut where the
frame ends (views, not copies), and a :class:`~sniper.rpc._frames.LeanConnection` appends
them to its outbound buffer one after another (:class:`~sniper.rpc._frames.Gathered`): the
message's bytes are copied once in user space, where grpclib's path copied them four times
(the encoder's join, the prefix, the frame, h2's). An h2 that is not lean is given each
frame joined, as grpclib would.

The loop is grpclib's own (0.4.7 to 0.4.9, the versions ``pyproject.toml`` allows): the same
waits for the connection to be writable and for flow-control window, the same frame sizes,
the same counters. :func:`install` puts it in place of grpclib's for both its client and its
server, process-wide, as :mod:`sniper.rpc._frames` does for hyperframe's repr.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

import grpclib.client
import grpclib.server
from grpclib.encoding.base import CodecBase

from sniper.rpc._frames import Gathered, LeanConnection

__all__ = ["install", "send_message"]

_PREFIX = struct.Struct(">?I")
"""gRPC's message prefix: not compressed, then the length."""

Piece = bytes | memoryview


async def send_message(
    stream: Any, codec: CodecBase, message: Any, message_type: Any, *, end: bool = False
) -> None:
    """grpclib's ``grpclib.stream.send_message``: the message, prefixed, on ``stream`` (a
    ``grpclib.protocol.Stream``), ending the stream with ``end``."""
    encode_parts = getattr(codec, "encode_parts", None)
    if encode_parts is not None:
        parts = encode_parts(message, message_type)
    else:
        parts = [codec.encode(message, message_type)]
    size = sum(map(len, parts))
    await _send(stream, deque([_PREFIX.pack(False, size), *parts]), 5 + size, end)


def _cut(pieces: deque[Piece], size: int, left: int) -> list[Piece]:
    """The first ``size`` bytes of ``pieces`` (which hold ``left``), taken off them: whole
    pieces, and a view of the first part of the piece the cut falls in (its rest stays
    first)."""
    if size == left:  # the last frame (most messages' only one): all of them
        taken = list(pieces)
        pieces.clear()
        return taken
    taken = []
    while size:
        piece = pieces.popleft()
        if len(piece) > size:
            view = memoryview(piece)
            taken.append(view[:size])
            pieces.appendleft(view[size:])
            return taken
        taken.append(piece)
        size -= len(piece)
    return taken


async def _send(stream: Any, pieces: deque[Piece], left: int, end_stream: bool) -> None:
    """``left`` bytes of ``pieces`` as DATA frames: grpclib's ``Stream.send_data`` loop, each
    frame's data the pieces it spans (:func:`_cut`)."""
    h2 = stream._h2_connection
    lean = isinstance(h2, LeanConnection)
    while True:
        await stream.connection.write_ready.wait()
        window = h2.local_flow_control_window(stream.id)
        if not window > 0:  # the window can become negative
            stream.window_updated.clear()
            await stream.window_updated.wait()
            continue  # other streams may have sent meanwhile: look again
        size = min(window, h2.max_outbound_frame_size, left)
        frame = _cut(pieces, size, left)
        left -= size
        data = Gathered(frame) if lean else b"".join(frame)
        h2.send_data(stream.id, data, end_stream=end_stream and not left)
        stream._transport.write(h2.data_to_send())
        stream.data_sent += size
        stream.connection.data_sent += size
        stream.connection.data_send_process()
        if not left:
            return


def install() -> None:
    """Use :func:`send_message` in grpclib's client and server (they call it by this name)."""
    grpclib.client.send_message = send_message  # type: ignore[attr-defined]
    grpclib.server.send_message = send_message  # type: ignore[attr-defined]
