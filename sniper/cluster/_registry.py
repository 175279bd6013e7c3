"""Opening a launcher by name: the built-ins, then the ``sniper.launchers`` entry points.

As with schedulers and transports (``sniper._plugins``): a built-in's module is imported only
when its name is opened, so choosing ``inprocess`` never imports Ray, and an unknown name raises
``LookupError`` listing the valid ones.
"""

from __future__ import annotations

import logging
from typing import Final

from sniper._plugins import Plugins, builtin_classes
from sniper.cluster._abc import Launcher

__all__ = ["LAUNCHER_NAMES", "launcher_names", "open_launcher"]

LAUNCHER_NAMES: Final = ("local", "inprocess", "ray")
_MODULES: Final = {
    "local": ("_local", "LocalLauncher"),
    "inprocess": ("_inprocess", "InProcessLauncher"),
    "ray": ("_ray", "RayLauncher"),
}


PLUGINS: Final[Plugins[type[Launcher]]] = Plugins(
    kind="launcher",
    group="sniper.launchers",
    builtins=LAUNCHER_NAMES,
    load_builtin=builtin_classes("sniper.cluster", _MODULES),
    base=Launcher,
    log=logging.getLogger("sniper.cluster"),
)


def launcher_names() -> tuple[str, ...]:
    """Every name :func:`open_launcher` accepts: built-ins, then installed plugins."""
    return PLUGINS.names()


def open_launcher(name: str) -> Launcher:
    """A new launcher called ``name`` (``LookupError`` names the valid ones)."""
    return PLUGINS.load(name)()
