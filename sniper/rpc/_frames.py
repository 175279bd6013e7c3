"""HTTP/2 DATA frames with fewer copies of their bytes: h2's connection and frame buffer, leaner.

A seed_ctr batch moves 5 MB of pooled embeddings and 5 MB of gradients between the trainer and
its ps, in DATA frames of up to 512 KiB (:mod:`sniper.rpc._http2`). h2 copies every byte of a
frame several times on its way, each copy a pass over megabytes that the four processes of a
job on two cores pay for in CPU (``perf`` over the 0.02 processes job: ``memmove`` was a tenth
of its busy CPU; a client reading 5 MB answers spent most of its ``memmove`` in h2):

- **Sending**, h2 copies a frame's data given as a ``memoryview`` into ``bytes`` (one copy),
  joins the frame's padding, data and padding (two), prepends its header (three), appends
  the frame to its outbound buffer (four) and hands that buffer out as new ``bytes``
  (five); asyncio then copies what the socket did not take (``data[n:]``, six) before
  buffering it. :class:`LeanConnection` appends a DATA frame's header and data to the
  outbound buffer directly and hands the buffer out as a view: one copy, and asyncio's slice
  of a view copies nothing. Its data may be :class:`Gathered` pieces, each appended in turn:
  a message is never joined on its way out (:mod:`sniper.rpc._sending`).
- **Receiving**, h2 appends each read to its buffer (one copy), slices the frame's body out
  of it (two), then copies that into the frame (three), and logs every frame with
  ``repr(frame)``, built eagerly, whose DATA branch serializes the whole body again (four)
  to hex-encode its first 11 bytes. :class:`LeanFrameBuffer` parses a whole DATA frame's
  body from a view of the buffer (one copy). A DATA frame of 64 KiB or more whose body has
  not all arrived gets a buffer of its own, which the rest of the body is received into
  (:meth:`LeanFrameBuffer.receiving_into`: the socket writes there, so its bytes are not
  copied at all) and which becomes the frame's data. Most reads end inside a 512 KiB frame;
  h2 built the frame's object from its header on each of them before finding the body
  incomplete, where the lean buffer reads three bytes. :func:`data_body_repr` gives the
  same repr from the body's first bytes, as :func:`short_data_repr` does for other frames'
  data (hyperframe hex-encoded all of it to keep 20 characters). Both repr fixes are
  process-wide: importing ``sniper.rpc`` replaces hyperframe's private ``_raw_data_repr``
  and ``DataFrame._body_repr`` with functions of the same output.

Everything else, and every check h2 makes, is h2's: the lean paths take only DATA frames on a
stream other than 0, with no header block open, and leave the rest (headers, settings, a
frame h2 must refuse) to h2's own code. Both classes are h2's with methods replaced;
:func:`lean` gives an ``H2Connection`` that grpclib made their behaviour.
"""

from __future__ import annotations

import binascii
import struct
from typing import Any

import hyperframe.frame
from h2.connection import H2Connection
from h2.frame_buffer import FrameBuffer
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import DataFrame, Frame

__all__ = [
    "Gathered",
    "LeanConnection",
    "LeanFrameBuffer",
    "data_body_repr",
    "lean",
    "short_data_repr",
]

_HEADER = struct.Struct(">HBBBL")
"""A frame's 9-byte header: its length as 16 + 8 bits, type, flags, stream id (hyperframe's)."""
_DATA = DataFrame.type
_PADDED = 0x08
_HEADER_BYTES = 9
_REPR_BYTES = 11
"""hyperframe's repr hex-encodes a body's first 11 bytes (22 hex digits, cut to 20 + "...")."""


def _flag_byte(frame: Frame) -> int:
    byte = 0
    for flag, bit in frame.defined_flags:
        if flag in frame.flags:
            byte |= bit
    return byte


class Gathered:
    """A DATA frame's data as pieces (``bytes`` or byte ``memoryview`` s), for a
    :class:`LeanConnection` to append one after another: h2 takes anything with a length as a
    frame's data, and copies a ``memoryview`` into ``bytes`` first, where this is copied
    only into the outbound buffer."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes | memoryview]) -> None:
        self.parts = parts
        self.size = sum(map(len, parts))

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


def _append_data_frame(out: bytearray, frame: DataFrame) -> None:
    """Append ``frame`` as its wire bytes to ``out``: its data copied once, into ``out``."""
    padding = frame.serialize_padding_data()
    data: Any = frame.data
    body_len = len(padding) + len(data) + frame.pad_length
    frame.body_len = body_len
    out += _HEADER.pack(
        (body_len >> 8) & 0xFFFF, body_len & 0xFF, _DATA, _flag_byte(frame), frame.stream_id
    )
    out += padding
    if type(data) is Gathered:
        for part in data.parts:
            out += part
    else:
        out += data
    if frame.pad_length:
        out += bytes(frame.pad_length)


class LeanConnection(H2Connection):
    """h2's ``H2Connection``, writing DATA frames into its outbound buffer in one copy and
    handing that buffer out without another."""

    def _prepare_for_sending(self, frames: list[Frame]) -> None:
        out = self._data_to_send
        for frame in frames:
            if type(frame) is DataFrame:
                _append_data_frame(out, frame)
            else:
                out += frame.serialize()
            if frame.body_len > self.max_outbound_frame_size:
                raise AssertionError(
                    f"frame of {frame.body_len} bytes over the peer's maximum of "
                    f"{self.max_outbound_frame_size}"
                )

    def data_to_send(self, amount: int | None = None) -> Any:
        """What h2's gives, as a ``memoryview`` of a buffer no one writes to again (where all
        of it is asked for): a socket's ``send`` and asyncio's slices take it as it is."""
        if amount is not None:
            return super().data_to_send(amount)
        data = self._data_to_send
        self._data_to_send = bytearray()
        return memoryview(data)


class LeanFrameBuffer(FrameBuffer):
    """h2's ``FrameBuffer``, parsing a whole DATA frame's body in one copy instead of two, and
    receiving a large one's body where it stays (:meth:`receiving_into`).

    The body of a DATA frame being received directly is out of h2's buffer, which holds
    nothing meanwhile: every byte that arrives belongs to that body until it is whole, and
    the frame is then the next one read, before any byte after it.
    """

    direct_bytes = 64 * 1024
    """A DATA frame's length from which its body is received into a buffer of its own."""
    _frame: DataFrame | None = None
    """The DATA frame whose body is being received directly (class defaults: :func:`lean`
    changes the class of a buffer h2 made, so no ``__init__`` of this class runs)."""
    _body = bytearray()
    _filled = 0
    _whole: DataFrame | None = None
    """A DATA frame received directly and whole: the next frame read."""

    def add_data(self, data: Any) -> None:
        """h2's, except that bytes of a body being received directly go into it."""
        if self._frame is None:
            super().add_data(data)
            return
        with memoryview(data) as view:
            taken = min(len(view), len(self._body) - self._filled)
            self._body[self._filled : self._filled + taken] = view[:taken]
            self.received(taken)
            if taken < len(view):
                super().add_data(view[taken:])

    def receiving_into(self) -> memoryview | None:
        """Where the next bytes received belong: the rest of a DATA frame's body, a view to
        receive into (then call :meth:`received`); None: give them to ``add_data``."""
        if self._frame is None:
            return None
        return memoryview(self._body)[self._filled :]

    def received(self, nbytes: int) -> bool:
        """``nbytes`` more of the body were written into :meth:`receiving_into`'s view; True
        once it is whole, its frame the next one read."""
        self._filled += nbytes
        frame = self._frame
        if frame is None or self._filled < len(self._body):
            return False
        frame.data = memoryview(self._body)  # type: ignore[assignment]
        frame.body_len = len(self._body)
        self._whole, self._frame, self._body, self._filled = frame, None, bytearray(), 0
        return True

    def __next__(self) -> Frame:
        whole = self._whole
        if whole is not None:
            self._whole = None
            return whole
        data = self._data
        if len(data) < _HEADER_BYTES or data[3] != _DATA or self._headers_buffer:
            return super().__next__()
        high, low, _, flags, stream_id = _HEADER.unpack_from(data)
        length = (high << 8) + low
        stream_id &= 0x7FFFFFFF
        if not stream_id:
            return super().__next__()  # h2 refuses it
        self._validate_frame_length(length)  # before the body arrives: it would be refused
        if len(data) < _HEADER_BYTES + length:
            # Most reads end inside a large frame: h2 would build the frame's object from its
            # header each time before finding its body incomplete.
            if length >= self.direct_bytes and not flags & _PADDED:
                self._receive_directly(length, flags, stream_id)
            raise StopIteration
        frame = self._data_frame(length, flags, stream_id)
        return frame if frame is not None else super().__next__()

    def _receive_directly(self, length: int, flags: int, stream_id: int) -> None:
        """Take the unpadded DATA frame at the buffer's start, whose body is incomplete, out
        of the buffer: its body goes on in a buffer of its own (:meth:`receiving_into`)."""
        frame = DataFrame(stream_id)
        frame.parse_flags(flags)
        data = self._data
        body = bytearray(length)
        with memoryview(data) as view:
            body[: len(data) - _HEADER_BYTES] = view[_HEADER_BYTES:]
        self._frame, self._body, self._filled = frame, body, len(data) - _HEADER_BYTES
        del data[:]

    def _data_frame(self, length: int, flags: int, stream_id: int) -> DataFrame | None:
        """The whole DATA frame at the buffer's start, taken out of it; None where h2's own
        ``__next__`` must parse it, to refuse it as h2 does."""
        data = self._data
        frame = DataFrame(stream_id)
        frame.parse_flags(flags)
        with memoryview(data) as view, view[_HEADER_BYTES : _HEADER_BYTES + length] as body:
            try:
                frame.parse_body(body)
            except HyperframeError:
                return None  # h2's own path raises the error it names
        del data[: _HEADER_BYTES + length]
        return frame


def short_data_repr(data: bytes | None) -> str:
    """hyperframe's ``_raw_data_repr``, hex-encoding only the bytes it keeps."""
    if not data:
        return "None"
    text = binascii.hexlify(bytes(memoryview(data)[:_REPR_BYTES])).decode("ascii")
    if len(text) > 20:
        text = text[:20] + "..."
    return "<hex:" + text + ">"


def data_body_repr(frame: DataFrame) -> str:
    """hyperframe's repr of a DATA frame's body, from its first bytes: hyperframe's own
    serializes the whole body (a copy of up to a frame's 512 KiB) to show 11 bytes of it."""
    data: Any = frame.data
    if type(data) is Gathered:  # a frame being sent (h2 logs received ones): joined to show
        data = bytes(data)
    head = frame.serialize_padding_data() + bytes(memoryview(data)[:_REPR_BYTES])
    head += bytes(max(0, min(frame.pad_length, _REPR_BYTES - len(head))))
    return short_data_repr(head)


def lean(connection: H2Connection) -> H2Connection:
    """``connection`` (made by grpclib, not yet used) with :class:`LeanConnection`'s and
    :class:`LeanFrameBuffer`'s behaviour. Both add methods only, no state, so the objects
    grpclib made are kept and their classes changed. Each is changed only where h2 keeps
    its bytes as the lean class reads them (a ``bytearray``, as h2 4.2 and later do); an h2
    that keeps them otherwise stays as it is."""
    if type(connection) is H2Connection and isinstance(connection._data_to_send, bytearray):
        connection.__class__ = LeanConnection
    buffer = connection.incoming_buffer
    if type(buffer) is FrameBuffer and isinstance(getattr(buffer, "_data", None), bytearray):
        buffer.__class__ = LeanFrameBuffer
    return connection


hyperframe.frame._raw_data_repr = short_data_repr
DataFrame._body_repr = data_body_repr  # type: ignore[method-assign,assignment]
