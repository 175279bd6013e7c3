"""Opening a scheduler by name, importing its backend only when it is asked for.

Like anyio's ``get_async_backend``: ``sniper.scheduler._{name}`` is imported on demand and
must define ``scheduler_class``, so a server started with ``--scheduler=work_stealing`` never
imports the other backends.

**Plugins.** Another distribution adds a backend by declaring an entry point in the
``sniper.schedulers`` group, in its ``pyproject.toml``::

    [project.entry-points."sniper.schedulers"]
    theirs = "theirpkg.scheduler:TheirScheduler"

``TheirScheduler`` is a :class:`Scheduler` subclass that ``open_scheduler`` constructs the way
it constructs the built-ins, ``TheirScheduler(workers, **options)``, and whose ``name`` should
be the entry point's name. Installing the distribution makes ``open_scheduler("theirs")`` and
``--scheduler theirs`` work. Discovery reads installed metadata only; the plugin's module is
imported when its name is opened, so a broken plugin fails that one open (naming the entry
point and its distribution), never ``import sniper`` and never a built-in backend. A plugin
cannot replace a built-in backend: the built-in name wins and a warning is logged, because a
server whose ``--scheduler inline`` silently ran someone else's code would be impossible to
reason about.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Final

from ._abc import Scheduler

__all__ = ["ENTRY_POINT_GROUP", "SCHEDULER_NAMES", "open_scheduler", "scheduler_names"]

log = logging.getLogger("sniper.scheduler")

SCHEDULER_NAMES: Final = ("inline", "per_variable", "thread_pool", "work_stealing")
"""The built-in backends. Every name ``open_scheduler`` accepts is :func:`scheduler_names`."""

ENTRY_POINT_GROUP: Final = "sniper.schedulers"
"""The entry-point group in which other distributions register scheduler backends."""

# Each shadowed plugin is reported once per process, not at every lookup.
_warned_shadowed: set[tuple[str, str]] = set()


def scheduler_names() -> tuple[str, ...]:
    """Every name :func:`open_scheduler` accepts: the built-ins, then installed plugins, sorted.

    Reads the installed distributions' metadata on each call (a few milliseconds), so a plugin
    installed while the process runs is seen; no plugin module is imported.
    """
    return SCHEDULER_NAMES + tuple(sorted(_plugins()))


def open_scheduler(name: str, *, workers: int | None = None, **options: Any) -> Scheduler:
    """Open the scheduler backend called ``name`` with ``workers`` threads.

    ``name`` is a built-in backend or a plugin registered in the ``sniper.schedulers``
    entry-point group (see the module docstring). ``workers`` defaults to the number of CPUs.
    ``options`` go to the backend: ``max_pending`` (every built-in backend), ``max_batch``
    (``per_variable``), ``seed`` (``work_stealing``). The result is a context manager, sync and
    async::

        async with open_scheduler("per_variable", workers=4) as scheduler:
            rows = await scheduler.run(TaskKey("emb", shard), lookup, signs)

    Raises ``LookupError`` for an unknown name or a plugin that cannot be loaded, and
    ``TypeError`` for a plugin entry point that is not a ``Scheduler`` subclass.
    """
    backend: Callable[..., Scheduler]
    if name in SCHEDULER_NAMES:
        backend = importlib.import_module(f"sniper.scheduler._{name}").scheduler_class
    else:
        backend = _load_plugin(name)
    if workers is None:
        workers = os.cpu_count() or 1
    return backend(workers, **options)


def _plugins() -> dict[str, list[EntryPoint]]:
    """The plugin entry points by name, without the ones that built-in names shadow."""
    found: dict[str, list[EntryPoint]] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in SCHEDULER_NAMES:
            _warn_shadowed(entry)
        else:
            found.setdefault(entry.name, []).append(entry)
    return found


def _warn_shadowed(entry: EntryPoint) -> None:
    key = (entry.name, _describe(entry))
    if key not in _warned_shadowed:
        _warned_shadowed.add(key)
        log.warning(
            "ignoring the scheduler plugin %s: %r is a built-in scheduler, which always wins; "
            "register the plugin under another name",
            key[1],
            entry.name,
        )


def _load_plugin(name: str) -> Callable[..., Scheduler]:
    """Import the plugin registered as ``name``; errors name its entry point and distribution."""
    candidates = _plugins().get(name, [])
    if not candidates:
        raise LookupError(
            f"no scheduler named {name!r}; valid names are: {', '.join(scheduler_names())}"
        )
    if len(candidates) > 1:
        raise LookupError(
            f"the scheduler name {name!r} is registered by several plugins: "
            f"{'; '.join(_describe(entry) for entry in candidates)}; uninstall all but one"
        )
    entry = candidates[0]
    try:
        loaded = entry.load()
    except Exception as exc:
        raise LookupError(
            f"the scheduler plugin {_describe(entry)} failed to import: "
            f"{type(exc).__name__}: {exc}; fix or reinstall {_distribution(entry)}, "
            "or choose another scheduler"
        ) from exc
    if not (isinstance(loaded, type) and issubclass(loaded, Scheduler)):
        raise TypeError(
            f"the scheduler plugin {_describe(entry)} points at {loaded!r}, which is not a "
            "sniper.scheduler.Scheduler subclass; the entry point must name the backend class"
        )
    return loaded


def _distribution(entry: EntryPoint) -> str:
    """``name version`` of the distribution that declared ``entry``."""
    dist = entry.dist
    if dist is None:  # only for entry points made by hand, never for installed ones
        return "an unknown distribution"
    return f"{dist.name} {dist.version}"


def _describe(entry: EntryPoint) -> str:
    return f"'{entry.name} = {entry.value}' (from {_distribution(entry)})"
