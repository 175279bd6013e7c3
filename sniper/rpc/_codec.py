"""The message codec of sniper's servers and clients: betterproto, plus what grpclib leaves out.

The three messages that carry megabytes of tensors go through :mod:`sniper.rpc._wire` instead
of betterproto (3-10x faster, no copies of tensor data); the others through betterproto.

grpclib has no limit on message size and reports a message that does not parse as an internal
error. This codec turns both into the statuses a client can act on: RESOURCE_EXHAUSTED naming
the limit, and INVALID_ARGUMENT naming the message type.
"""

from __future__ import annotations

from typing import Any

import betterproto
from grpclib.const import Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from sniper.rpc._wire import DECODERS, ENCODERS, Encoded, Prepared

__all__ = ["SniperCodec"]


class SniperCodec(ProtoCodec):
    """``ProtoCodec`` with a receive size limit and decode errors mapped to gRPC statuses."""

    def __init__(self, max_message_bytes: int) -> None:
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes}")
        self.max_message_bytes = max_message_bytes

    def encode(self, message: Any, message_type: Any) -> bytes:
        if isinstance(message, Encoded | Prepared):
            return message.wire
        return self._encoded(message, message_type)

    def encode_parts(self, message: Any, message_type: Any) -> list[bytes | memoryview]:
        """:meth:`encode`, as pieces to send one after another: a prepared message's own,
        never joined (:mod:`sniper.rpc._sending`)."""
        if isinstance(message, Encoded | Prepared):
            return message.parts
        return [self._encoded(message, message_type)]

    def _encoded(self, message: Any, message_type: Any) -> bytes:
        fast = ENCODERS.get(message_type)
        if fast is not None and isinstance(message, message_type):
            return fast(message)
        return super().encode(message, message_type)

    def decode(self, data: bytes, message_type: Any) -> Any:
        if len(data) > self.max_message_bytes:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"message of {len(data):,} bytes exceeds this server's limit of "
                f"{self.max_message_bytes:,} bytes (raise it with --max-message-mb)",
            )
        try:
            fast = DECODERS.get(message_type)
            if fast is not None:
                return fast(data)
            message = super().decode(data, message_type)
            _check_shapes(message, message_type.__name__)
        except GRPCError:
            raise
        except Exception as exc:  # betterproto raises many types on garbage
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"request is not a valid {message_type.__name__}: {type(exc).__name__}: {exc}",
            ) from None
        return message


_MAP_KINDS: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "bytes": bytes,
    "bool": bool,
    "double": (float, int),
    "float": (float, int),
    **{
        t: int
        for t in (
            "int32",
            "int64",
            "uint32",
            "uint64",
            "sint32",
            "sint64",
            "fixed32",
            "fixed64",
            "sfixed32",
            "sfixed64",
        )
    },
}
_SCALARS: dict[type, tuple[type, ...]] = {
    int: (int,),
    float: (float, int),
    str: (str,),
    bytes: (bytes,),
    bool: (bool,),
}


def _check_shapes(message: Any, path: str) -> None:
    """Refuse a decoded message whose fields do not have their declared Python shape.

    betterproto 2.0.0b7 decodes some malformed wire data leniently, e.g. a length-delimited
    record for a scalar field becomes a list (``batch_id=[97, 98, 99]``). Checking shapes here
    keeps handlers from ever seeing such values.
    """
    meta: Any = getattr(message, "_betterproto")  # noqa: B009  (private metadata, mistyped)
    for name, field_meta in meta.meta_by_field_name.items():
        value = getattr(message, name)
        where = f"{path}.{name}"
        default = meta.default_gen[name]
        if field_meta.map_types:
            _require(isinstance(value, dict), where)
            key_type, value_type = (_MAP_KINDS.get(t) for t in field_meta.map_types)
            for key, item in value.items():
                _require(_is_kind(key, key_type), f"{where} key")
                _require(_is_kind(item, value_type), f"{where}[{key!r}]")
        elif field_meta.proto_type == "enum" and default is not list:
            _require(_is_kind(value, int), where)
        elif default is list:
            _require(isinstance(value, list), where)
            element = meta.cls_by_field[name]
            for item in value:
                _check_value(item, element, where)
        else:
            _check_value(value, default, where)


def _is_kind(value: Any, kind: type | tuple[type, ...] | None) -> bool:
    """Whether a decoded map key or value has the Python type of its proto type."""
    if kind is None:
        return True
    if kind is bool:
        return isinstance(value, bool)
    return isinstance(value, kind) and not isinstance(value, bool)


def _check_value(value: Any, expected: Any, where: str) -> None:
    if isinstance(expected, type) and issubclass(expected, betterproto.Message):
        _require(isinstance(value, expected), where)
        _check_shapes(value, where)
    elif value is not None:
        allowed = _SCALARS.get(expected, (expected,))
        _require(isinstance(value, allowed) and not isinstance(value, list), where)


def _require(condition: bool, where: str) -> None:
    if not condition:
        raise GRPCError(
            Status.INVALID_ARGUMENT, f"field {where} does not have its declared type on the wire"
        )
