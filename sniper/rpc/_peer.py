"""A call to a peer over grpclib: a lost peer is ``GRPCError(UNAVAILABLE)`` naming it, never a
cancellation of the caller.

grpclib 0.4.9 wakes a call blocked on a connection that dies (or whose deadline passes) by
cancelling the caller's task: ``Wrapper.cancel`` calls ``task.cancel()``, and ``with wrapper:``
turns the ``CancelledError`` into ``StreamTerminatedError`` (``TimeoutError`` for a deadline) on
its way out. It never calls ``task.uncancel()``, so the task's ``cancelling()`` count stays
raised: anyio's cancel scopes and task groups then take the task for one cancelled from outside,
and the next scope to exit lets a ``CancelledError`` escape instead of swallowing its own (a
``sniper train`` whose ps was killed ended in that traceback, exit 1, with no restart).

:func:`call_peer` is where that is undone, around every call the clients make (the connect
included): the cancellations grpclib added during the call are taken back, a cancel of the
caller's own scope still arrives, and the failure is mapped at the boundary to what the rest of
sniper expects of a peer: ``UNAVAILABLE`` for a lost connection, a refused connect or a peer
that reset the stream, ``DEADLINE_EXCEEDED`` for a call not answered in time, each naming the
peer (``ps 127.0.0.1:4242: connection lost ...``). A peer's own ``GRPCError`` passes unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio.lowlevel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

__all__ = ["call_peer"]

T = TypeVar("T")


async def call_peer(peer: str, call: Callable[[], Awaitable[T]]) -> T:
    """``await call()``; a lost connection to ``peer`` (``"ps HOST:PORT"``) raises
    ``GRPCError`` (see the module doc), with the caller's task uncancelled as it was."""
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    try:
        return await call()
    except GRPCError:
        await _take_back(task, before)
        raise
    except (StreamTerminatedError, OSError) as exc:  # TimeoutError is an OSError
        await _take_back(task, before)
        raise _mapped(peer, exc) from exc


async def _take_back(task: asyncio.Task[object] | None, before: int) -> None:
    """Undo the cancellations of ``task`` that grpclib requested during the call; a cancel of
    the caller's own scope (anyio delivers it again at the next checkpoint) still raises."""
    if task is None:
        return
    while task.cancelling() > before:
        task.uncancel()
    await anyio.lowlevel.checkpoint_if_cancelled()


def _mapped(peer: str, exc: StreamTerminatedError | OSError) -> GRPCError:
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, TimeoutError):
        return GRPCError(Status.DEADLINE_EXCEEDED, f"{peer}: no answer in time ({cause})")
    what = "connection refused" if isinstance(exc, ConnectionRefusedError) else "connection lost"
    return GRPCError(Status.UNAVAILABLE, f"{peer}: {what} ({cause})")
