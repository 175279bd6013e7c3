"""Backends by name: built-ins imported on demand, plugins from an entry-point group.

Schedulers (``sniper.schedulers``) and transports (``sniper.transports``) are both chosen by
name, so both use one :class:`Plugins` registry. Discovery reads installed metadata only; a
plugin's module is imported when its name is opened, so a broken plugin fails that one open
(naming the entry point and its distribution), never ``import sniper`` and never a built-in. A
plugin cannot replace a built-in: the built-in name wins and a warning is logged once, because
a server whose ``--scheduler inline`` silently ran someone else's code would be impossible to
reason about.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

__all__ = ["PluginTypeError", "Plugins", "builtin_classes"]

T = TypeVar("T")


class PluginTypeError(TypeError, LookupError):
    """A plugin's entry point names something that is not a backend class.

    A ``TypeError`` (the entry point has the wrong type) that is also a ``LookupError`` (the
    name could not be opened), so the command line reports it as one line like any other name
    it cannot open, instead of a traceback.
    """


class Plugins(Generic[T]):
    """The ``kind`` backends: ``builtins`` (loaded by ``load_builtin``), then ``group``'s."""

    def __init__(
        self,
        *,
        kind: str,
        group: str,
        builtins: tuple[str, ...],
        load_builtin: Callable[[str], T],
        base: type,
        log: logging.Logger,
    ) -> None:
        self.kind = kind
        self.group = group
        self.builtins = builtins
        self.load_builtin = load_builtin
        self.base = base
        self.log = log
        self.warned: set[tuple[str, str]] = set()
        """Shadowed plugins already reported: once per process, not at every lookup."""

    def names(self) -> tuple[str, ...]:
        """The built-ins, then installed plugins, sorted (metadata only: nothing imported)."""
        return self.builtins + tuple(sorted(self._plugins()))

    def load(self, name: str) -> T:
        """The backend called ``name``: ``LookupError`` for an unknown or broken one,
        ``TypeError`` for a plugin entry point that is not a ``base`` subclass."""
        if name in self.builtins:
            return self.load_builtin(name)
        candidates = self._plugins().get(name, [])
        if not candidates:
            raise LookupError(
                f"no {self.kind} named {name!r}; valid names are: {', '.join(self.names())}"
            )
        if len(candidates) > 1:
            raise LookupError(
                f"the {self.kind} name {name!r} is registered by several plugins: "
                f"{'; '.join(_describe(entry) for entry in candidates)}; uninstall all but one"
            )
        return self._import(candidates[0])

    def _import(self, entry: EntryPoint) -> T:
        try:
            loaded = entry.load()
        except Exception as exc:
            raise LookupError(
                f"the {self.kind} plugin {_describe(entry)} failed to import: "
                f"{type(exc).__name__}: {exc}; fix or reinstall {_distribution(entry)}, "
                f"or choose another {self.kind}"
            ) from exc
        if not (isinstance(loaded, type) and issubclass(loaded, self.base)):
            raise PluginTypeError(
                f"the {self.kind} plugin {_describe(entry)} points at {loaded!r}, which is not "
                f"a {self.base.__module__.replace('._abc', '')}.{self.base.__name__} subclass; "
                "the entry point must name the backend class"
            )
        return loaded  # type: ignore[return-value]

    def _plugins(self) -> dict[str, list[EntryPoint]]:
        """The plugin entry points by name, without the ones that built-in names shadow."""
        found: dict[str, list[EntryPoint]] = {}
        for entry in entry_points(group=self.group):
            if entry.name in self.builtins:
                self._warn_shadowed(entry)
            else:
                found.setdefault(entry.name, []).append(entry)
        return found

    def _warn_shadowed(self, entry: EntryPoint) -> None:
        key = (entry.name, _describe(entry))
        if key not in self.warned:
            self.warned.add(key)
            self.log.warning(
                "ignoring the %s plugin %s: %r is a built-in %s, which always wins; "
                "register the plugin under another name",
                self.kind,
                key[1],
                entry.name,
                self.kind,
            )


def builtin_classes(package: str, classes: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A ``load_builtin`` for built-ins that are classes: ``classes`` maps each name to its
    module in ``package`` and its class there, imported when that name is opened (the
    registry checks nothing of a built-in: it is sniper's own)."""

    def load(name: str) -> Any:
        module, cls = classes[name]
        return getattr(importlib.import_module(f"{package}.{module}"), cls)

    return load


def _distribution(entry: EntryPoint) -> str:
    """``name version`` of the distribution that declared ``entry``."""
    dist = entry.dist
    if dist is None:  # only for entry points made by hand, never for installed ones
        return "an unknown distribution"
    return f"{dist.name} {dist.version}"


def _describe(entry: EntryPoint) -> str:
    return f"'{entry.name} = {entry.value}' (from {_distribution(entry)})"
