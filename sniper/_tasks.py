"""A task group for background tasks that leaves the body's exceptions as they are."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup

__all__ = ["background"]


@asynccontextmanager
async def background() -> AsyncIterator[TaskGroup]:
    """A task group whose tasks are cancelled when the ``async with`` body ends.

    anyio wraps whatever leaves a task group in an ``ExceptionGroup``, so a ``ValueError`` in
    the body of ``async with transport.serve(...)`` would reach its caller wrapped, only
    because the transport runs a task in the background. Here the body's exception is taken
    out before the group closes and raised as itself afterwards; a failing background task is
    still reported (as anyio reports it), since that is a bug of the task.
    """
    error: BaseException | None = None
    async with anyio.create_task_group() as group:
        try:
            yield group
        except BaseException as exc:  # re-raised below, outside the group
            error = exc
        finally:
            group.cancel_scope.cancel()
    if error is not None:
        raise error
