"""Protobuf wire encoding of the messages of every batch, without betterproto's copies.

FeedSampleRequest (the signs), PushGradRequest (the gradients) and EmbeddingLookupResponse
(the pooled rows) carry megabytes of tensor bytes. betterproto 2.0.0b7 serializes and parses
them with pure-Python byte slicing: 11 ms to serialize and 14 ms to parse the 5 MB seed_ctr
lookup answer, where grpcio moves the whole call in 17 ms. Here the protobuf wire format is
read through ``memoryview`` slices (tensor data is never copied) and written as a list of
pieces (:class:`Encoded`, :class:`Prepared`): keys, lengths and views of the arrays, which the
send path writes into HTTP/2's outbound buffer one after another, the arrays' bytes copied
there once (:mod:`sniper.rpc._sending`).
EmbeddingLookupRequest carries only a batch's variable names, but its ps reads it before it
starts the lookup: betterproto took 0.4 ms to parse 38 names and 0.3 ms to write them; and
ReadSampleResponse's labels and dense features (57 KB) took it 0.5 ms to write and 0.8 ms to
parse, on the trainer's event loop.

The bytes on the wire are standard protobuf that any client reads. What the decoders return:
an EmbeddingLookupResponse is the generated betterproto class; the FeedSample, PushGrad and
EmbeddingLookup requests and a ReadSampleResponse are plain views with the same attribute
names (``FeedSampleView``, ``PushGradView``, ``LookupRequestView``, ``SampleView``:
``.to_message()`` gives the betterproto message), because building and reading betterproto
objects cost more CPU in a training run than the kernels. A handler mounted behind
``SniperCodec`` that calls ``bytes(request)`` must convert first.

Malformed input raises :class:`WireError` (mapped to INVALID_ARGUMENT by the codec):
truncation, a wrong wire type for a known field, or a varint longer than 10 bytes. Unknown
fields are skipped, as proto3 requires.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Self, cast

import betterproto
import numpy as np
from numpy.typing import NDArray

from sniper.rpc._generated.sniper.v1 import (
    DataServed,
    EmbeddingLookupRequest,
    EmbeddingLookupResponse,
    FeedSampleRequest,
    PooledEmbedding,
    PushGradRequest,
    PushGradResponse,
    ReadSampleResponse,
    Tensor,
    VariableGradient,
    VariableSigns,
)
from sniper.rpc._tensor import decode_floats, narrow, present, wire_array

__all__ = [
    "DECODERS",
    "ENCODERS",
    "Encoded",
    "EncodedLookupResponse",
    "EncodedPushResponse",
    "EncodedSample",
    "FeedSampleView",
    "LookupAnswer",
    "LookupArrays",
    "LookupItem",
    "LookupRequestView",
    "Prepared",
    "PushAnswer",
    "PushArrays",
    "PushGradView",
    "RawTensor",
    "SampleView",
    "WireError",
    "decode_gradient",
    "feed_sample_wire",
    "lookup_response",
    "push_grad_wire",
    "push_response",
    "read_sample_wire",
]

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_DOUBLE = struct.Struct("<d")
Buffer = bytes | memoryview


class WireError(ValueError):
    """The bytes are not a valid encoding of the expected message."""


# -- reading ---------------------------------------------------------------------------------


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    # Most varints are one byte (every key, most names' and shapes' lengths): a message of 76
    # variables reads about 1,700 of them, and the loop below cost twice as long for those.
    if pos < end and buf[pos] < 0x80:
        return buf[pos], pos + 1
    if pos + 1 < end and buf[pos + 1] < 0x80:  # two bytes: shapes' dimensions, most lengths
        return (buf[pos] & 0x7F) | buf[pos + 1] << 7, pos + 2
    result = 0
    for shift in range(0, 70, 7):
        if pos >= end:
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
    raise WireError("varint longer than 10 bytes")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of each record: an int, or a memoryview slice.

    A one-byte key or length is read here, not by :func:`_varint`: nearly every key and most
    lengths are one byte, and the call cost a third of decoding a 76-variable message."""
    pos, end = 0, len(buf)
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos, end)
        number, wire_type = key >> 3, key & 7
        value: Any
        if number == 0:
            raise WireError("field number 0")
        if wire_type == LEN:
            size = buf[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = _varint(buf, pos, end)
            if pos + size > end:
                raise WireError(f"field {number} claims {size} bytes past the end")
            value, pos = buf[pos : pos + size], pos + size
        elif wire_type == VARINT:
            value, pos = _varint(buf, pos, end)
        elif wire_type in (I64, I32):
            size = 8 if wire_type == I64 else 4
            if pos + size > end:
                raise WireError("truncated fixed-width field")
            value, pos = buf[pos : pos + size], pos + size
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        yield number, wire_type, value


def _expect(wire_type: int, expected: int, what: str) -> None:
    if wire_type != expected:
        raise WireError(f"{what} has wire type {wire_type}, expected {expected}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _shape(wire_type: int, value: Any, into: list[int]) -> None:
    if wire_type == VARINT:
        into.append(_signed(value))
        return
    _expect(wire_type, LEN, "Tensor.shape")
    pos, end = 0, len(value)
    while pos < end:
        dim, pos = _varint(value, pos, end)
        into.append(_signed(dim))


class RawTensor(NamedTuple):
    """A parsed Tensor before (or instead of) its betterproto object: ``data`` is a view."""

    dtype: str
    shape: list[int]
    data: memoryview


def _tensor(buf: memoryview, earlier: RawTensor | None = None) -> RawTensor:
    """Parse a Tensor; a second occurrence merges into ``earlier`` as protobuf requires:
    scalars present again replace, repeated ``shape`` entries append."""
    if earlier is None:
        tensor = _written_in_order(buf)
        if tensor is not None:
            return tensor
    dtype, data = (earlier.dtype, earlier.data) if earlier is not None else ("", memoryview(b""))
    shape: list[int] = list(earlier.shape) if earlier is not None else []
    for number, wire_type, value in _fields(buf):
        if number == 1:
            _expect(wire_type, LEN, "Tensor.dtype")
            dtype = _text(value)
        elif number == 2:
            _shape(wire_type, value, shape)
        elif number == 3:
            _expect(wire_type, LEN, "Tensor.data")
            data = value
    return RawTensor(dtype, shape, data)


_DTYPE_KEY, _SHAPE_KEY, _DATA_KEY = 1 << 3 | LEN, 2 << 3 | LEN, 3 << 3 | LEN


def _written_in_order(buf: memoryview) -> RawTensor | None:
    """A Tensor whose fields come at most once each and in order, its dtype and shape shorter
    than 128 bytes (as this module and betterproto write every tensor), read without the
    field loop; None for any other, which :func:`_tensor` reads field by field (and refuses
    as it refuses it). Why: a batch's messages hold about 300 tensors, and the loop's three
    turns were most of reading one."""
    end = len(buf)
    pos = 0
    dtype = ""
    if end > 1 and buf[0] == _DTYPE_KEY:
        size = buf[1]
        pos = 2 + size
        if size >= 0x80 or pos > end:
            return None
        dtype = _text(buf[2:pos])
    shape: list[int] = []
    if pos + 1 < end and buf[pos] == _SHAPE_KEY:
        size = buf[pos + 1]
        at, pos = pos + 2, pos + 2 + size
        if size >= 0x80 or pos > end:
            return None
        _shape(LEN, buf[at:pos], shape)
    data = buf[0:0]
    if pos < end and buf[pos] == _DATA_KEY:
        size, at = _varint(buf, pos + 1, end)
        pos = at + size
        if pos > end:
            return None
        data = buf[at:pos]
    return RawTensor(dtype, shape, data) if pos == end else None


def _text(value: memoryview) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("a string field is not valid UTF-8") from None


def _named_tensors(
    buf: memoryview, tensor_fields: dict[int, str], double_field: int | None = None
) -> dict[str, Any]:
    """A message of a name (field 1), tensors, and optionally one double."""
    out: dict[str, Any] = {"name": ""}
    for number, wire_type, value in _fields(buf):
        if number == 1:
            _expect(wire_type, LEN, "name")
            out["name"] = _text(value)
        elif number in tensor_fields:
            _expect(wire_type, LEN, tensor_fields[number])
            out[tensor_fields[number]] = _tensor(value, out.get(tensor_fields[number]))
        elif number == double_field:
            _expect(wire_type, I64, "double")
            out["double"] = _DOUBLE.unpack(value)[0]
    return out


def _betterproto(raw: RawTensor | None) -> Tensor:
    """The betterproto Tensor, or None when absent (betterproto leaves unset messages None)."""
    if raw is None:
        return cast(Tensor, None)
    return Tensor(dtype=raw.dtype, shape=raw.shape, data=raw.data)  # type: ignore[arg-type]


class Field(NamedTuple):
    """How a message reader takes one known field: its name in the .proto (the key it is
    read into, and what a refusal calls it), its wire type, and how a value read merges with
    what the field held before (its default at first)."""

    name: str
    wire_type: int
    merge: Callable[[Any, Any], Any]


def _message_fields(data: Buffer, fields: Mapping[int, Field], **read: Any) -> dict[str, Any]:
    """``read`` (each field's default) updated with the known fields of a message, by name;
    unknown fields are skipped, a known one of another wire type is a :class:`WireError`.

    One loop for every message decoded here: protobuf's merge rules (a scalar sent again
    replaces, a repeated field appends, a message sent again merges) are each field's own."""
    for number, wire_type, value in _fields(memoryview(data)):
        field = fields.get(number)
        if field is not None:
            _expect(wire_type, field.wire_type, field.name)
            read[field.name] = field.merge(read[field.name], value)
    return read


def _replaced(_: Any, value: Any) -> Any:
    return value


def _flag(_: Any, value: int) -> bool:
    return bool(value)


def _string(_: Any, value: memoryview) -> str:
    return _text(value)


def _appended(item: Callable[[memoryview], Any]) -> Callable[[list[Any], memoryview], list[Any]]:
    """A repeated field's merge: ``item`` of each value, appended to the list read so far."""

    def merge(items: list[Any], value: memoryview) -> list[Any]:
        items.append(item(value))
        return items

    return merge


def _merged_tensor(earlier: RawTensor | None, value: memoryview) -> RawTensor:
    return _tensor(value, earlier)


def _embedded(parts: list[memoryview], read: Callable[[Buffer], Any]) -> Any:
    """An embedded message sent as ``parts`` (see :data:`_PARTS`), read by ``read``; None
    when it was not sent. Parts sent more than once merge as protobuf says: as one message of
    their bytes joined (only then are they copied)."""
    if not parts:
        return None
    return read(parts[0] if len(parts) == 1 else b"".join(parts))


_PARTS = _appended(lambda value: value)
"""An embedded message's merge, before it is read: its parts kept (:func:`_embedded`)."""


_BATCH_ID = Field("batch_id", VARINT, _replaced)


# Decoded FeedSample and PushGrad requests are plain views, not betterproto messages: every
# attribute read of a betterproto message runs a Python ``__getattribute__``, and building and
# reading 150 of them per batch cost more CPU in a training run than the kernels did. The views
# carry the same attribute names, so a handler reads either; ``to_message()`` converts.


@dataclass(frozen=True, slots=True)
class VariableSignsView:
    name: str
    signs: RawTensor | None
    offsets: RawTensor | None
    weights: RawTensor | None = None


@dataclass(frozen=True, slots=True)
class FeedSampleView:
    """A decoded ``FeedSampleRequest``; tensor data are views of the received bytes."""

    batch_id: int
    variables: list[VariableSignsView]

    def to_message(self) -> FeedSampleRequest:
        return FeedSampleRequest(
            batch_id=self.batch_id,
            variables=[
                VariableSigns(
                    name=v.name,
                    signs=_betterproto(v.signs),
                    offsets=_betterproto(v.offsets),
                    weights=_betterproto(v.weights),
                )
                for v in self.variables
            ],
        )


@dataclass(frozen=True, slots=True)
class VariableGradientView:
    name: str
    grad: RawTensor | None
    grad_transposed: RawTensor | None = None


@dataclass(frozen=True, slots=True)
class PushGradView:
    """A decoded ``PushGradRequest``; tensor data are views of the received bytes."""

    batch_id: int
    grads: list[VariableGradientView]
    then_lookup: LookupRequestView | None = None
    """The lookup to answer once the gradients are applied; None where none was sent."""

    def to_message(self) -> PushGradRequest:
        message = PushGradRequest(
            batch_id=self.batch_id,
            grads=[
                VariableGradient(
                    name=g.name,
                    grad=_betterproto(g.grad),
                    grad_transposed=_betterproto(g.grad_transposed),
                )
                for g in self.grads
            ],
        )
        if self.then_lookup is not None:
            message.then_lookup = self.then_lookup.to_message()
        return message


def decode_feed_sample(data: Buffer) -> FeedSampleView:
    def variable(buf: memoryview) -> VariableSignsView:
        parts = _named_tensors(buf, {2: "signs", 3: "offsets", 4: "weights"})
        return VariableSignsView(
            parts["name"], parts.get("signs"), parts.get("offsets"), parts.get("weights")
        )

    fields = {1: _BATCH_ID, 2: Field("variables", LEN, _appended(variable))}
    return FeedSampleView(**_message_fields(data, fields, batch_id=0, variables=[]))


def decode_push_grad(data: Buffer) -> PushGradView:
    def gradient(buf: memoryview) -> VariableGradientView:
        parts = _named_tensors(buf, {2: "grad", 3: "grad_transposed"})
        return VariableGradientView(parts["name"], parts.get("grad"), parts.get("grad_transposed"))

    fields = {
        1: _BATCH_ID,
        2: Field("grads", LEN, _appended(gradient)),
        3: Field("then_lookup", LEN, _PARTS),
    }
    read = _message_fields(data, fields, batch_id=0, grads=[], then_lookup=[])
    read["then_lookup"] = _embedded(read["then_lookup"], decode_lookup_request)
    return PushGradView(**read)


@dataclass(frozen=True, slots=True)
class LookupRequestView:
    """A decoded ``EmbeddingLookupRequest``, with the message's attribute names."""

    batch_id: int
    names: list[str]
    release: bool
    pooled_dtype: str

    def to_message(self) -> EmbeddingLookupRequest:
        return EmbeddingLookupRequest(
            batch_id=self.batch_id,
            names=self.names,
            release=self.release,
            pooled_dtype=self.pooled_dtype,
        )


_LOOKUP_REQUEST = {
    1: _BATCH_ID,
    2: Field("names", LEN, _appended(_text)),
    3: Field("release", VARINT, _flag),
    4: Field("pooled_dtype", LEN, _string),
}


def decode_lookup_request(data: Buffer) -> LookupRequestView:
    read = _message_fields(
        data, _LOOKUP_REQUEST, batch_id=0, names=[], release=False, pooled_dtype=""
    )
    return LookupRequestView(**read)


@dataclass(frozen=True, slots=True)
class SampleView:
    """A decoded ``ReadSampleResponse``; tensor data are views of the received bytes."""

    batch_id: int
    labels: RawTensor | None
    dense: RawTensor | None
    end_of_data: bool
    served: DataServed | None
    """None where the hub sent none (betterproto's message gives a default one instead)."""

    def to_message(self) -> ReadSampleResponse:
        message = ReadSampleResponse(
            batch_id=self.batch_id,
            labels=_betterproto(self.labels),
            dense=_betterproto(self.dense),
            end_of_data=self.end_of_data,
        )
        if self.served is not None:
            message.served = self.served
        return message


_READ_SAMPLE = {
    1: _BATCH_ID,
    2: Field("labels", LEN, _merged_tensor),
    3: Field("dense", LEN, _merged_tensor),
    4: Field("end_of_data", VARINT, _flag),
    5: Field("served", LEN, _PARTS),
}


def _served(data: Buffer) -> DataServed:
    """Rare (a first read asks for it), so betterproto's reader is fast enough."""
    return DataServed().parse(bytes(data))


def decode_read_sample(data: Buffer) -> SampleView:
    read = _message_fields(
        data, _READ_SAMPLE, batch_id=0, labels=None, dense=None, end_of_data=False, served=[]
    )
    read["served"] = _embedded(read["served"], _served)
    return SampleView(**read)


class LookupArrays:
    """Reply type for the EmbeddingLookup fast path: :func:`decode_lookup_answer`'s answer.

    ``PsClient`` asks grpclib for this type instead of ``EmbeddingLookupResponse``, so a 5 MB
    answer becomes 76 array views without building 152 betterproto objects (6 ms).
    """


LookupItem = tuple[str, RawTensor | None, float, RawTensor | None]


class LookupAnswer(NamedTuple):
    """An EmbeddingLookupResponse as the fast path reads it."""

    items: list[LookupItem]
    """``(name, pooled tensor or None, kernel seconds, offsets tensor or None)`` of each
    embedding (offsets: an unpooled variable's)."""
    reads_grad_transposed: bool
    """The ps reads ``VariableGradient.grad_transposed`` (see :func:`push_grad_wire`)."""


def _lookup_item(value: memoryview) -> LookupItem:
    parts = _named_tensors(value, {2: "pooled", 4: "offsets"}, double_field=3)
    return (parts["name"], parts.get("pooled"), parts.get("double", 0.0), parts.get("offsets"))


_LOOKUP_ANSWER = {
    1: Field("embeddings", LEN, _appended(_lookup_item)),
    2: Field("reads_grad_transposed", VARINT, _flag),
}


def decode_lookup_answer(data: Buffer) -> LookupAnswer:
    """An EmbeddingLookupResponse's embeddings and flag, tensor data as views of ``data``."""
    read = _message_fields(data, _LOOKUP_ANSWER, embeddings=[], reads_grad_transposed=False)
    return LookupAnswer(read["embeddings"], read["reads_grad_transposed"])


class PushArrays:
    """Reply type for PushGrad on the fast path: :func:`decode_push_answer`'s answer, whose
    ``looked_up`` is read as :func:`decode_lookup_answer` reads a lookup's."""


class PushAnswer(NamedTuple):
    """A PushGradResponse as the fast path reads it."""

    dropped_nonfinite: int
    looked_up: LookupAnswer | None
    """The answer to the request's ``then_lookup``; None where the ps sent none."""


_PUSH_ANSWER = {
    1: Field("dropped_nonfinite", VARINT, _replaced),
    2: Field("looked_up", LEN, _PARTS),
}


def decode_push_answer(data: Buffer) -> PushAnswer:
    read = _message_fields(data, _PUSH_ANSWER, dropped_nonfinite=0, looked_up=[])
    read["looked_up"] = _embedded(read["looked_up"], decode_lookup_answer)
    return PushAnswer(**read)


def decode_lookup_response(data: Buffer) -> EmbeddingLookupResponse:
    answer = decode_lookup_answer(data)
    return EmbeddingLookupResponse(
        embeddings=[
            PooledEmbedding(
                name=name,
                pooled=_betterproto(pooled),
                kernel_seconds=seconds,
                offsets=_betterproto(offsets),
            )
            for name, pooled, seconds, offsets in answer.items
        ],
        reads_grad_transposed=answer.reads_grad_transposed,
    )


# -- writing ---------------------------------------------------------------------------------


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]
"""The encoding of each varint below 128, made once: a message of 76 variables writes about
1,700 varints, most of them keys and small lengths."""


def _put_varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_LEN_KEYS = [_put_varint(number << 3 | LEN) for number in range(16)]
"""Each length-delimited field's key, by field number (every message here numbers below 16)."""


def _len_field(number: int, parts: list[Buffer]) -> list[Buffer]:
    size = sum(map(len, parts))
    return [_LEN_KEYS[number], _ONE_BYTE[size] if size < 0x80 else _put_varint(size), *parts]


@functools.lru_cache(maxsize=4096)
def _text_field(number: int, text: str) -> tuple[Buffer, ...]:
    """A string field's pieces, made once per field and text: names and dtypes repeat in
    every message of a job."""
    return tuple(_len_field(number, [text.encode()])) if text else ()


@functools.lru_cache(maxsize=4096)
def _shape_field(shape: tuple[int, ...]) -> tuple[Buffer, ...]:
    """A Tensor's packed ``shape`` field, made once per shape: a job's shapes repeat (a
    batch's pooled ``(1024, 16)``, its offsets'), where a signs tensor's varies by batch."""
    packed = b"".join(_put_varint(d) for d in shape)
    return tuple(_len_field(2, [packed])) if packed else ()


def _tensor_fields(dtype: str, shape: Sequence[int], data: Buffer) -> list[Buffer]:
    parts: list[Buffer] = [*_text_field(1, dtype), *_shape_field(tuple(shape))]
    if len(data):
        parts += _len_field(3, [data])
    return parts


def _tensor_parts(tensor: Tensor | None) -> list[Buffer]:
    if tensor is None:
        return []
    return _tensor_fields(tensor.dtype, tensor.shape, tensor.data)


def _pooled_parts(
    name: str,
    dtype: str,
    shape: Sequence[int],
    data: Buffer,
    seconds: float,
    offsets: list[Buffer] | None = None,
) -> list[Buffer]:
    """A PooledEmbedding; ``offsets``: an unpooled variable's, as Tensor fields."""
    inner = [*_text_field(1, name), *_len_field(2, _tensor_fields(dtype, shape, data))]
    if seconds:
        inner += [_put_varint(3 << 3 | I64), _DOUBLE.pack(seconds)]
    if offsets is not None:
        inner += _len_field(4, offsets)
    return _len_field(1, inner)


def encode_lookup_response(message: EmbeddingLookupResponse) -> bytes:
    parts: list[Buffer] = []
    for e in message.embeddings:
        pooled = e.pooled or Tensor()
        offsets = _tensor_parts(e.offsets) if present(e.offsets) else None
        parts += _pooled_parts(
            e.name, pooled.dtype, pooled.shape, pooled.data, e.kernel_seconds, offsets
        )
    if message.reads_grad_transposed:
        parts += _READS_GRAD_TRANSPOSED
    return b"".join(parts)


_READS_GRAD_TRANSPOSED = [_put_varint(2 << 3 | VARINT), _put_varint(1)]
"""EmbeddingLookupResponse's ``reads_grad_transposed = true``, as betterproto writes it."""


class _Pieces:
    """A message's wire bytes as the pieces its encoder wrote (``parts``), joined only where
    one ``bytes`` is asked for (``wire``). Why: a 5 MB message joined is a copy the send
    path does not need; it writes each piece into its frames (:mod:`sniper.rpc._sending`).
    The arrays the pieces view must stay as they are until the message is sent: every
    encoder here views arrays that no one writes to again."""

    __slots__ = ()
    parts: list[Buffer]

    @property
    def wire(self) -> bytes:
        """The message's bytes, joined."""
        return b"".join(self.parts)


class Prepared(_Pieces):
    """A response already in wire form (``parts``): :class:`SniperCodec` sends it as it is.

    A handler's answer must be its method's message type to type checkers and to grpclib, so
    each prepared response subclasses that type as well; its fields are not filled in.
    """

    def __init__(self, parts: Buffer | list[Buffer]) -> None:
        """``parts``: the message's bytes, or its pieces in order: anything that gives a
        buffer (``bytes``, a ``memoryview``, a numpy array), each sent as its bytes."""
        pieces = parts if isinstance(parts, list) else [parts]
        object.__setattr__(self, "parts", [_byte_piece(piece) for piece in pieces])

    @classmethod
    def _of(cls, parts: list[Buffer]) -> Self:
        """The prepared answer of an encoder here, whose pieces are bytes or flat byte views
        already: not checked again (a lookup answer has hundreds)."""
        prepared = cls.__new__(cls)
        object.__setattr__(prepared, "parts", parts)
        return prepared

    def __getattribute__(self, name: str) -> Any:
        return object.__getattribute__(self, name)


def _byte_piece(piece: Any) -> Buffer:
    """``piece`` as ``bytes`` or a flat view of bytes. A view of wider items (a float32
    array's) or of several dimensions has a ``len`` of items or rows, not bytes, and the
    message's lengths are counted with ``len``: sent as it was, its length prefix was wrong.
    An empty one is ``b""``, as in :func:`_byte_view` (memoryview cannot cast it)."""
    if isinstance(piece, bytes):
        return piece
    view = memoryview(piece)
    if not view.c_contiguous:
        return view.tobytes()
    if view.format == "B" and view.ndim == 1:
        return view
    return view.cast("B") if view.nbytes else b""


class EncodedLookupResponse(Prepared, EmbeddingLookupResponse):
    """An EmbeddingLookupResponse already in wire form: what a ps handler returns.

    Building 76 betterproto messages for a 5 MB answer costs more than sending it (10 ms,
    mostly betterproto's attribute machinery), so the handler writes the bytes directly.
    """


class EncodedPushResponse(Prepared, PushGradResponse):
    """A PushGradResponse already in wire form, its ``looked_up`` a prepared lookup answer
    (:func:`push_response`)."""


def push_response(dropped: int, looked_up: EncodedLookupResponse | None) -> PushGradResponse:
    """A ps's answer to a PushGrad: a plain message without a lookup, else the lookup's
    prepared bytes nested as they are."""
    if looked_up is None:
        return PushGradResponse(dropped_nonfinite=dropped)
    parts: list[Buffer] = []
    if dropped:
        parts += [_put_varint(1 << 3 | VARINT), _put_varint(dropped)]
    parts += _len_field(2, looked_up.parts)
    return EncodedPushResponse._of(parts)


class EncodedSample(Prepared, ReadSampleResponse):
    """A ReadSampleResponse already in wire form: what a hub handler returns (betterproto took
    0.5 ms to write the labels and dense features of a batch of 1,024)."""


def lookup_response(
    items: Sequence[tuple[str, np.ndarray, float] | tuple[str, np.ndarray, float, Any]],
    dtype: str = "float32",
) -> EncodedLookupResponse:
    """Encode ``(name, pooled float32 array, kernel seconds[, offsets])`` items without
    betterproto, the arrays as ``dtype`` (see :func:`sniper.rpc._tensor.narrow`); an item's
    int64 ``offsets`` (an unpooled variable's; None: a pooled one) go as they are. The answer
    says that this ps reads ``grad_transposed`` (:func:`decode_gradient`)."""
    parts: list[Buffer] = []
    for name, pooled, seconds, *rest in items:
        array = narrow(pooled, dtype)
        offsets = rest[0] if rest else None
        fields = None if offsets is None else _array_fields(np.ascontiguousarray(offsets))
        parts += _pooled_parts(name, dtype, array.shape, _byte_view(array), seconds, fields)
    parts += _READS_GRAD_TRANSPOSED
    return EncodedLookupResponse._of(parts)


def _batch_id_parts(batch_id: int) -> list[Buffer]:
    return [_put_varint(1 << 3 | VARINT), _put_varint(batch_id)] if batch_id else []


def encode_lookup_request(message: EmbeddingLookupRequest) -> bytes:
    parts = _batch_id_parts(message.batch_id)
    for name in message.names:  # a repeated string keeps its empty entries
        parts += _len_field(2, [name.encode()])
    if message.release:
        parts += [_put_varint(3 << 3 | VARINT), _put_varint(1)]
    parts += _text_field(4, message.pooled_dtype)
    return b"".join(parts)


def _sample_parts(
    batch_id: int,
    labels: list[Buffer] | None,
    dense: list[Buffer] | None,
    end_of_data: bool,
    served: DataServed | None,
) -> list[Buffer]:
    """A ReadSampleResponse; ``labels`` and ``dense``: Tensor fields, None where unset."""
    parts = _batch_id_parts(batch_id)
    if labels is not None:
        parts += _len_field(2, labels)
    if dense is not None:
        parts += _len_field(3, dense)
    if end_of_data:
        parts += [_put_varint(4 << 3 | VARINT), _put_varint(1)]
    if served is not None:
        parts += _len_field(5, [bytes(served)])
    return parts


def encode_read_sample(message: ReadSampleResponse) -> bytes:
    return b"".join(
        _sample_parts(
            message.batch_id,
            _tensor_parts(message.labels) if present(message.labels) else None,
            _tensor_parts(message.dense) if present(message.dense) else None,
            message.end_of_data,
            message.served if betterproto.serialized_on_wire(message.served) else None,
        )
    )


def read_sample_wire(
    batch_id: int, labels: NDArray[Any], dense: NDArray[Any], served: DataServed | None
) -> EncodedSample:
    """A hub's ReadSampleResponse of a batch, its arrays copied once, as it is sent
    (``served``: with a ReadSample that asks for it)."""
    return EncodedSample._of(
        _sample_parts(
            batch_id,
            _array_fields(wire_array(labels)),
            _array_fields(wire_array(dense)),
            False,
            served,
        )
    )


def _batch_parts(
    batch_id: int, items: list[list[Buffer]], then: EmbeddingLookupRequest | None = None
) -> list[Buffer]:
    """A FeedSample or PushGrad request; ``then``: a PushGrad's ``then_lookup``."""
    parts = _batch_id_parts(batch_id)
    for inner in items:
        parts += _len_field(2, inner)
    if then is not None:
        parts += _len_field(3, [encode_lookup_request(then)])
    return parts


def encode_feed_sample(message: FeedSampleRequest) -> bytes:
    return _joined(
        message.batch_id,
        [
            [
                *_text_field(1, v.name),
                *_len_field(2, _tensor_parts(v.signs)),
                *_len_field(3, _tensor_parts(v.offsets)),
                *(_len_field(4, _tensor_parts(v.weights)) if present(v.weights) else []),
            ]
            for v in message.variables
        ],
    )


def encode_push_grad(message: PushGradRequest) -> bytes:
    then = message.then_lookup
    return _joined(
        message.batch_id,
        [
            [
                *_text_field(1, g.name),
                *(_len_field(2, _tensor_parts(g.grad)) if present(g.grad) else []),
                *(
                    _len_field(3, _tensor_parts(g.grad_transposed))
                    if present(g.grad_transposed)
                    else []
                ),
            ]
            for g in message.grads
        ],
        then if then is not None and betterproto.serialized_on_wire(then) else None,
    )


def _joined(
    batch_id: int, items: list[list[Buffer]], then: EmbeddingLookupRequest | None = None
) -> bytes:
    return b"".join(_batch_parts(batch_id, items, then))


class Encoded(_Pieces):
    """A request already in wire form; :class:`SniperCodec` sends its ``parts`` as they are.

    Clients build the heavy requests straight from arrays with :func:`feed_sample_wire` and
    :func:`push_grad_wire` and send them through a grpclib method whose request type is this.
    """

    __slots__ = ("parts",)

    def __init__(self, parts: list[Buffer]) -> None:
        self.parts = parts


def _byte_view(array: np.ndarray) -> Buffer:
    """The bytes of a C-contiguous array, without a copy (memoryview cannot cast empty ones)."""
    return array.data.cast("B") if array.size else b""


def _array_fields(array: np.ndarray) -> list[Buffer]:
    """A Tensor's fields for an array already checked to be a contiguous wire dtype."""
    return _tensor_fields(_dtype_name(array.dtype), array.shape, _byte_view(array))


_DTYPE_NAMES = {np.dtype(name): name for name in ("float32", "float16", "uint64", "int64", "int32")}
"""The wire dtypes' names by dtype: numpy computes ``dtype.name`` in Python each time (a few
microseconds, twice per variable of a FeedSample)."""


def _dtype_name(dtype: np.dtype[Any]) -> str:
    return _DTYPE_NAMES.get(dtype) or dtype.name


def feed_sample_wire(
    batch_id: int,
    items: Sequence[tuple[str, np.ndarray, np.ndarray]],
    weights: Mapping[str, np.ndarray] | None = None,
) -> Encoded:
    """A FeedSampleRequest of ``(name, signs, offsets)``, with the ``weights`` of the variables
    named there; arrays as from ``wire_array``."""
    weights = weights or {}

    def fields(name: str, signs: np.ndarray, offsets: np.ndarray) -> list[Buffer]:
        parts = [
            *_text_field(1, name),
            *_len_field(2, _array_fields(signs)),
            *_len_field(3, _array_fields(offsets)),
        ]
        if name in weights:
            parts += _len_field(4, _array_fields(weights[name]))
        return parts

    return Encoded(_batch_parts(batch_id, [fields(*item) for item in items]))


def push_grad_wire(
    batch_id: int,
    items: Iterable[tuple[str, np.ndarray]],
    dtype: str = "float32",
    *,
    transposed: bool = False,
    then: EmbeddingLookupRequest | None = None,
) -> Encoded:
    """A PushGradRequest of ``(name, float32 gradient)``, the gradients sent as ``dtype`` (see
    :func:`sniper.rpc._tensor.narrow`), with ``then`` as its ``then_lookup``.

    With ``transposed`` (the ps's lookup answers said ``reads_grad_transposed``), a gradient
    whose transpose is C-contiguous goes as that transpose (``grad_transposed``), without a
    copy; every other one goes as ``grad``, laid out C-contiguous first. Why: the numpy MLP's
    gradients are blocks of one transposed product (see
    :meth:`sniper.models.Mlp.backward_input`), and laying each out as ``[batch, dim]`` was a
    transposing copy on the trainer's event loop, on the way to the push: 1.2 ms of a seed_ctr
    batch's 5 MB (``benchmarks/push_layout.py``). The ps reads a gradient in any layout with
    positive strides.
    """

    def fields(grad: np.ndarray) -> list[Buffer]:
        as_transpose = (
            transposed
            and grad.ndim == 2
            and not grad.flags.c_contiguous
            and grad.T.flags.c_contiguous
        )
        array = narrow(grad.T if as_transpose else grad, dtype)
        tensor = _tensor_fields(dtype, array.shape, _byte_view(array))
        return _len_field(3 if as_transpose else 2, tensor)

    return Encoded(
        _batch_parts(
            batch_id, [[*_text_field(1, name), *fields(grad)] for name, grad in items], then
        )
    )


def decode_gradient(
    variable: VariableGradient | VariableGradientView, index: int
) -> NDArray[np.float32]:
    """Variable ``index`` of a PushGrad: its 2-D gradient as float32 (a view of the message
    where it was sent as float32), whichever of ``grad`` and ``grad_transposed`` carried it.
    A message with both or neither, or a tensor that is not 2-D float data, is a
    ``ValueError`` naming the variable; its ``[batch, dim]`` shape is the store's to check."""
    where = f"grads[{index}]"
    name = f"({variable.name!r})"
    if present(variable.grad_transposed):
        if present(variable.grad):
            raise ValueError(f"{where} {name} sets both grad and grad_transposed; send one")
        transposed = decode_floats(variable.grad_transposed, f"{where}.grad_transposed {name}", 2)
        return transposed.T
    if not present(variable.grad):
        raise ValueError(f"{where} {name} sets neither grad nor grad_transposed")
    return decode_floats(variable.grad, f"{where}.grad {name}", 2)


DECODERS: dict[type, Callable[[Buffer], Any]] = {
    EmbeddingLookupRequest: decode_lookup_request,
    ReadSampleResponse: decode_read_sample,
    FeedSampleRequest: decode_feed_sample,
    PushGradRequest: decode_push_grad,
    EmbeddingLookupResponse: decode_lookup_response,
    LookupArrays: decode_lookup_answer,
    PushArrays: decode_push_answer,
}
ENCODERS: dict[type, Callable[[Any], bytes]] = {
    EmbeddingLookupRequest: encode_lookup_request,
    ReadSampleResponse: encode_read_sample,
    FeedSampleRequest: encode_feed_sample,
    PushGradRequest: encode_push_grad,
    EmbeddingLookupResponse: encode_lookup_response,
}
