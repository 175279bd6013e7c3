"""grpclib's ``Server`` and ``Channel`` with the HTTP/2 settings a 5 MB tensor message needs.

A seed_ctr lookup answer is 5 MB. Over grpclib's defaults it crossed loopback in about 20 ms
without any codec work, against 8 ms for grpcio; two things in the pure-Python HTTP/2 stack
made most of the difference (measured with ``sniper bench rpc``; see docs/benchmarks.md):

- **Frame size.** grpclib keeps HTTP/2's 16 KiB ``SETTINGS_MAX_FRAME_SIZE``, so 5 MB is 320
  DATA frames, each parsed, flow-controlled and dispatched in Python. Each side here
  advertises ``frame_bytes`` (512 KiB) instead: ten frames. Frames of 2 MiB and more were
  slower again (h2 buffers a frame until it is whole).
- **A frame's repr.** h2 logs every received frame with ``repr(frame)`` built eagerly, and
  hyperframe's repr hex-encodes the whole body before keeping 20 characters of it: about 6 ms
  per 5 MB received. :mod:`sniper.rpc._frames` builds the same string from the first bytes.

Each connection's h2 also copies a DATA frame's bytes fewer times (:mod:`sniper.rpc._frames`),
and grpclib sends a message's frames as views of it (:mod:`sniper.rpc._sending`).

The frame size comes with :class:`Server` and :class:`Channel`, plain subclasses: a user
mounting sniper's services in their own server gets the same numbers by using :class:`Server`
instead of ``grpclib.server.Server``. The repr fix and the sending of frames as views are
process-wide (see :mod:`sniper.rpc._frames` and :mod:`sniper.rpc._sending`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from grpclib import client, server
from grpclib.config import Configuration
from grpclib.protocol import H2Protocol
from h2.events import DataReceived, StreamEnded
from h2.settings import SettingCodes

from sniper.rpc._codec import SniperCodec
from sniper.rpc._frames import LeanFrameBuffer, lean
from sniper.rpc._security import Security
from sniper.rpc._sending import install

_MB = 2**20
FRAME_BYTES = 512 * 1024
WINDOW_BYTES = 16 * _MB
MAX_MESSAGE_BYTES = 256 * _MB
_HTTP2_MAX_FRAME = 2**24 - 1
_READ_BYTES = 256 * 1024
"""The reused receive buffer's size: asyncio's own reads take up to this much."""
_AFTER_BODY_BYTES = 16 * 1024
"""The read after a large frame's body: enough for the next frame's header and the start of
its body, whose rest then goes into the frame's own buffer (:meth:`_Protocol.get_buffer`)."""


def _configuration(window_bytes: int) -> Configuration:
    return Configuration(
        http2_connection_window_size=window_bytes, http2_stream_window_size=window_bytes
    )


def _check_frame_bytes(frame_bytes: int) -> int:
    if not 16384 <= frame_bytes <= _HTTP2_MAX_FRAME:
        raise ValueError(
            f"frame_bytes must be in [16384, {_HTTP2_MAX_FRAME}] (HTTP/2's bounds), "
            f"got {frame_bytes}"
        )
    return frame_bytes


class _Protocol(H2Protocol, asyncio.BufferedProtocol):
    """grpclib's protocol, advertising a larger frame size as soon as the connection opens,
    and receiving through buffers it gives the socket (asyncio's ``BufferedProtocol``): a
    large DATA frame's body straight into the frame's own buffer
    (:meth:`LeanFrameBuffer.receiving_into`), anything else into one reused buffer, which h2
    copies from as it copied asyncio's ``bytes`` before. A 5 MB message arrives copied once
    in user space (grpclib joining its frames), where it was copied three times."""

    frame_bytes = FRAME_BYTES
    _frames: LeanFrameBuffer | None = None
    _into_body = False
    _after_body = False

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._scratch = memoryview(bytearray(_READ_BYTES))
        h2 = lean(self.connection._connection)
        if isinstance(h2.incoming_buffer, LeanFrameBuffer):
            self._frames = h2.incoming_buffer
        h2.update_settings({SettingCodes.MAX_FRAME_SIZE: self.frame_bytes})
        # Accept large frames from now on, not from the peer's ACK: h2 reads its inbound limit
        # once per received chunk, so a chunk holding the ACK and then a large DATA frame would
        # be refused as overlong and the connection dropped. Accepting early is harmless.
        h2.max_inbound_frame_size = self.frame_bytes
        self.connection.flush()
        _skip_empty_data(self.processor.processors)
        if h2.config.client_side:
            _refuse_answers_without_status(self.processor.processors, self.processor.streams)

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the socket's next bytes go: the rest of a large DATA frame's body, or the
        reused buffer."""
        body = self._frames.receiving_into() if self._frames is not None else None
        self._into_body = body is not None
        if body is not None:
            return body
        # Right after a large frame, the next is likely one too: read little beyond its header,
        # so that its body goes straight into its own buffer, not through this one.
        return self._scratch[:_AFTER_BODY_BYTES] if self._after_body else self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` arrived in :meth:`get_buffer`'s view: grpclib's ``data_received`` with
        them, or, once a frame received directly is whole, with nothing (h2 then reads that
        frame)."""
        if not self._into_body:
            self._after_body = False
            with self._scratch[:nbytes] as data:
                # A lean buffer copies what it keeps of a view; h2's own might keep the view.
                received: Any = data if self._frames is not None else bytes(data)
                self.data_received(received)
        elif self._frames is not None and self._frames.received(nbytes):
            self._after_body = True
            self.data_received(b"")


def _skip_empty_data(processors: dict[type, Any]) -> None:
    """Leave out of grpclib's stream buffers a DATA frame that carries nothing: no data, no
    padding (HTTP/2 allows one anywhere in a stream). grpclib's buffer takes an entry of no
    flow-controlled bytes for its end of stream, so such a frame in the middle of a message
    failed the call ("Received less data than expected", an internal error to the peer). The
    stream's end is its own event (``StreamEnded``), which a frame with END_STREAM still
    gives."""
    process = processors[DataReceived]

    def process_data(event: DataReceived) -> None:
        if event.flow_controlled_length or event.data:
            process(event)

    processors[DataReceived] = process_data


def _refuse_answers_without_status(processors: dict[type, Any], streams: dict[int, Any]) -> None:
    """End a call whose answer ended with no grpc-status (no trailers, and none in its
    headers) with ``StreamTerminatedError``: a peer that is not a gRPC server, or a broken one.
    grpclib waited for the trailers, and a call without a deadline waited forever."""
    process = processors[StreamEnded]

    def process_ended(event: StreamEnded) -> None:
        stream = streams.get(event.stream_id)
        if stream is not None and not stream.trailers_received.is_set():
            headers = stream.headers or ()
            if not any(name == "grpc-status" for name, _ in headers):
                stream.__terminated__(
                    "the answer ended without a grpc-status (no trailers): is the peer a "
                    "gRPC server?"
                )
        process(event)

    processors[StreamEnded] = process_ended


def _tuned(protocol: H2Protocol, frame_bytes: int) -> _Protocol:
    tuned = _Protocol(protocol.handler, protocol.config, protocol.h2_config)
    tuned.frame_bytes = frame_bytes
    return tuned


class Server(server.Server):
    """A ``grpclib.server.Server`` with sniper's codec, 16 MiB windows and 512 KiB frames;
    with ``security``, TLS and a token check (:class:`~sniper.rpc.Security`)."""

    def __init__(
        self,
        handlers: Collection[Any],
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        window_bytes: int = WINDOW_BYTES,
        frame_bytes: int = FRAME_BYTES,
        security: Security | None = None,
    ) -> None:
        self._frame_bytes = _check_frame_bytes(frame_bytes)
        super().__init__(
            handlers, codec=SniperCodec(max_message_bytes), config=_configuration(window_bytes)
        )
        self._security = security or Security()
        self._ssl = self._security.server_context()
        self._security.guard(self)

    async def start(self, *args: Any, **kwargs: Any) -> None:
        """``grpclib.server.Server.start``, over TLS when this server has a certificate."""
        if self._ssl is not None:
            kwargs.setdefault("ssl", self._ssl)
        self._security.check_cleartext(kwargs.get("host", args[0] if args else None), "server")
        await super().start(*args, **kwargs)

    def _protocol_factory(self) -> H2Protocol:
        return _tuned(super()._protocol_factory(), self._frame_bytes)


class Channel(client.Channel):
    """A ``grpclib.client.Channel`` with sniper's codec, 16 MiB windows and 512 KiB frames."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        window_bytes: int = WINDOW_BYTES,
        frame_bytes: int = FRAME_BYTES,
        security: Security | None = None,
    ) -> None:
        self._frame_bytes = _check_frame_bytes(frame_bytes)
        security = security or Security()
        super().__init__(
            host,
            port,
            codec=SniperCodec(max_message_bytes),
            config=_configuration(window_bytes),
            ssl=security.client_context(),
        )
        security.authorize(self)
        security.check_cleartext(host, "channel")

    def _protocol_factory(self) -> H2Protocol:
        return _tuned(super()._protocol_factory(), self._frame_bytes)


install()  # grpclib's client and server send a message's frames as views of it
