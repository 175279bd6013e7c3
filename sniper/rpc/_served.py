"""``DataServed`` on the wire: what a hub answers a ReadSample that asks (``describe``)."""

from __future__ import annotations

from sniper.rpc._api import DataServed
from sniper.rpc._generated.sniper.v1 import DataServed as DataServedMessage

__all__ = ["served_from_message", "served_to_message"]


def served_to_message(served: DataServed) -> DataServedMessage:
    """The ``DataServed`` message a hub answers with."""
    return DataServedMessage(
        data=served.data,
        variables=list(served.variables),
        dense_features=served.dense_features,
        batch_size=served.batch_size,
        digest=served.digest,
    )


def served_from_message(message: DataServedMessage | None) -> DataServed | None:
    """The data a response says its hub serves; None when it says nothing (a hub that does
    not know, or one older than the field)."""
    if message is None or not message.digest:
        return None
    return DataServed(
        message.data,
        tuple(message.variables),
        message.dense_features,
        message.batch_size,
        message.digest,
    )
