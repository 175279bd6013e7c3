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
from typing import Any, Final

from sniper._plugins import Plugins

from ._abc import Scheduler

__all__ = ["ENTRY_POINT_GROUP", "SCHEDULER_NAMES", "open_scheduler", "scheduler_names"]

SCHEDULER_NAMES: Final = ("adaptive", "inline", "per_variable", "thread_pool", "work_stealing")
"""The built-in backends. Every name ``open_scheduler`` accepts is :func:`scheduler_names`."""

ENTRY_POINT_GROUP: Final = "sniper.schedulers"
"""The entry-point group in which other distributions register scheduler backends."""

PLUGINS: Final[Plugins[Callable[..., Scheduler]]] = Plugins(
    kind="scheduler",
    group=ENTRY_POINT_GROUP,
    builtins=SCHEDULER_NAMES,
    load_builtin=lambda name: importlib.import_module(f"sniper.scheduler._{name}").scheduler_class,
    base=Scheduler,
    log=logging.getLogger("sniper.scheduler"),
)


def scheduler_names() -> tuple[str, ...]:
    """Every name :func:`open_scheduler` accepts: the built-ins, then installed plugins, sorted.

    Reads the installed distributions' metadata on each call (a few milliseconds), so a plugin
    installed while the process runs is seen; no plugin module is imported.
    """
    return PLUGINS.names()


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
    backend = PLUGINS.load(name)
    if workers is None:
        workers = os.cpu_count() or 1
    return backend(workers, **options)
