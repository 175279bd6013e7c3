"""grpclib's sending of a message, without its two copies of the whole message.

grpclib's ``send_message`` puts gRPC's 5-byte prefix (compressed flag, length) before the
serialized message by concatenation, a copy of the whole message; ``Stream.send_data`` then
cuts it into DATA frames through a ``BytesIO``, whose ``read`` copies each frame's bytes again
before h2 copies them into its outbound buffer. Here each frame's bytes are a view of the
message, and only the first frame's are joined with the prefix. Answering a 5 MB lookup took
the canned ps of ``sniper bench rpc`` 5.02-5.78 ms of CPU a call with grpclib's path and
4.77-5.07 ms with this one (three rounds of 600 calls each, alternated).

The loop is grpclib's own (0.4.7 to 0.4.9, the versions ``pyproject.toml`` allows): the same
waits for the connection to be writable and for flow-control window, the same frame sizes,
the same counters. :func:`install` puts it in place of grpclib's for both its client and its
server, process-wide, as :mod:`sniper.rpc._frames` does for hyperframe's repr.
"""

from __future__ import annotations

import struct
from typing import Any

import grpclib.client
import grpclib.server
from grpclib.encoding.base import CodecBase

__all__ = ["install", "send_message"]

_PREFIX = struct.Struct(">?I")
"""gRPC's message prefix: not compressed, then the length."""


async def send_message(
    stream: Any, codec: CodecBase, message: Any, message_type: Any, *, end: bool = False
) -> None:
    """grpclib's ``grpclib.stream.send_message``: the message, prefixed, on ``stream`` (a
    ``grpclib.protocol.Stream``), ending the stream with ``end``."""
    body = memoryview(codec.encode(message, message_type)).cast("B")
    await _send(stream, _PREFIX.pack(False, len(body)), body, end)


async def _send(stream: Any, prefix: bytes, body: memoryview, end_stream: bool) -> None:
    """``prefix`` and then ``body`` as DATA frames: grpclib's ``Stream.send_data`` loop, the
    frames' bytes taken as views of ``body`` (the first frame's joined with ``prefix``)."""
    h2 = stream._h2_connection
    position, last = -len(prefix), len(body)  # negative: inside the prefix
    while True:
        await stream.connection.write_ready.wait()
        window = h2.local_flow_control_window(stream.id)
        if not window > 0:  # the window can become negative
            stream.window_updated.clear()
            await stream.window_updated.wait()
            continue  # other streams may have sent meanwhile: look again
        size = min(window, h2.max_outbound_frame_size, last - position)
        stop = position + size
        if position < 0:  # what is left of the prefix, then the body's first bytes
            head = prefix[position : stop if stop < 0 else None]
            chunk: bytes | memoryview = head + body[: max(stop, 0)]
        else:
            chunk = body[position:stop]
        position = stop
        done = position == last
        h2.send_data(stream.id, chunk, end_stream=end_stream and done)
        stream._transport.write(h2.data_to_send())
        stream.data_sent += size
        stream.connection.data_sent += size
        stream.connection.data_send_process()
        if done:
            return


def install() -> None:
    """Use :func:`send_message` in grpclib's client and server (they call it by this name)."""
    grpclib.client.send_message = send_message  # type: ignore[attr-defined]
    grpclib.server.send_message = send_message  # type: ignore[attr-defined]
