"""A :class:`~sniper.rpc.MovedVariable` as the ``VariableData`` message and back.

The server encodes what ExportVariable answers and decodes what ImportVariable receives; the
client does the opposite. One pair of functions, so both ends agree on every field.
"""

from __future__ import annotations

from sniper.rpc._api import MovedVariable, PendingFeed
from sniper.rpc._generated.sniper.v1 import PendingBatch, VariableData
from sniper.rpc._tensor import decode, encode, present
from sniper.rpc._variable import config_from_message, config_to_message

__all__ = ["moved_from_message", "moved_to_message"]


def moved_to_message(moved: MovedVariable) -> VariableData:
    """The message that carries ``moved`` from one ps to another (Push)."""
    return VariableData(
        config=config_to_message(moved.config),
        signs=encode(moved.signs),
        weights=encode(moved.weights),
        state=encode(moved.state),
        steps=encode(moved.steps),
        pending=[
            PendingBatch(
                batch_id=p.batch_id,
                signs=encode(p.signs),
                offsets=encode(p.offsets),
                weights=encode(p.weights) if p.weights is not None else None,  # type: ignore[arg-type]
            )
            for p in moved.pending
        ],
    )


def moved_from_message(message: VariableData) -> MovedVariable:
    """The variable a message carries; ``ValueError`` names a malformed field."""
    if message.config is None or not message.config.name:
        raise ValueError("config must name the variable")
    return MovedVariable(
        config=config_from_message(message.config),
        signs=decode(message.signs, "signs", "uint64", 1),
        weights=decode(message.weights, "weights", "float32", 2),
        state=decode(message.state, "state", "float32", 3),
        steps=decode(message.steps, "steps", "int32", 1),
        pending=tuple(
            PendingFeed(
                p.batch_id,
                decode(p.signs, f"pending[{i}].signs", "uint64", 1),
                decode(p.offsets, f"pending[{i}].offsets", "int64", 1),
                decode(p.weights, f"pending[{i}].weights", "float32", 1)
                if present(p.weights)
                else None,
            )
            for i, p in enumerate(message.pending)
        ),
    )
