"""A :class:`~sniper.placement.Placement` as the ``Placement`` message and back.

A trainer sends its hubs the next placement (SetPlacement) when auto_shard moves a variable;
the client encodes the table, the server decodes it. One pair of functions, so both ends agree
on every field. The table and its policy are ``sniper.placement``'s; only the wire form is here.
"""

from __future__ import annotations

from sniper.placement import Placement
from sniper.rpc._generated.sniper.v1 import Placement as PlacementMessage

__all__ = ["placement_from_message", "placement_to_message"]


def placement_to_message(placement: Placement) -> PlacementMessage:
    """The message that carries ``placement``."""
    return PlacementMessage(
        version=placement.version, num_ps=placement.num_ps, owners=dict(placement.owners)
    )


def placement_from_message(message: PlacementMessage) -> Placement:
    """The placement a SetPlacement carries; ``ValueError`` names what is wrong."""
    return Placement(message.num_ps, dict(message.owners), message.version)
