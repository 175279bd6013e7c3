"""Opening a transport by name: the built-ins, then the ``sniper.transports`` entry points.

A plugin registers a :class:`~sniper.transport.Transport` subclass, constructed with no
arguments::

    [project.entry-points."sniper.transports"]
    theirs = "theirpkg.transport:TheirTransport"
"""

from __future__ import annotations

import logging
from typing import Final

from sniper._plugins import Plugins, builtin_classes
from sniper.transport._abc import Transport

__all__ = ["TRANSPORT_NAMES", "open_transport", "transport_names"]

TRANSPORT_NAMES: Final = ("grpc", "inprocess")
_MODULES: Final = {
    "grpc": ("_grpc", "GrpcTransport"),
    "inprocess": ("_inprocess", "InProcessTransport"),
}


PLUGINS: Final[Plugins[type[Transport]]] = Plugins(
    kind="transport",
    group="sniper.transports",
    builtins=TRANSPORT_NAMES,
    load_builtin=builtin_classes("sniper.transport", _MODULES),
    base=Transport,
    log=logging.getLogger("sniper.transport"),
)


def transport_names() -> tuple[str, ...]:
    """Every name :func:`open_transport` accepts: built-ins, then installed plugins."""
    return PLUGINS.names()


def open_transport(name: str) -> Transport:
    """A new transport called ``name`` (``LookupError`` names the valid ones)."""
    return PLUGINS.load(name)()
