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
peer (``ps 127.0.0.1:4242: connection lost ...``). A peer's own ``GRPCError`` passes unchanged,
except a refusal of the caller's credentials (UNAUTHENTICATED, PERMISSION_DENIED), which its
server's transport sends before any role sees the call.

grpclib also lets go of a closed connection's parts to break reference cycles (the
connection's transport, h2's frame dispatch table); a call still using the connection when the
peer goes away then fails with ``AttributeError`` naming one of them (grpclib issues 110, 156,
185; CI saw a ps killed as training started end one attempt with "'Connection' object has no
attribute '_transport'"). That is a lost connection too, and is mapped as one.

Each of those is a :class:`PeerError`: besides status and message, it holds whom the call went
to and what the user can do about it, so a command prints it as one line (:attr:`PeerError.line`:
``ps 127.0.0.1:4242: UNAVAILABLE: connection refused (...); nothing listens there: ...``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio.lowlevel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

__all__ = ["PeerError", "call_peer", "peer_error"]

T = TypeVar("T")

_REFUSED_CREDENTIALS = (Status.UNAUTHENTICATED, Status.PERMISSION_DENIED)


class PeerError(GRPCError):
    """A call to ``peer`` failed in its transport: the status, what happened and what to do.

    ``message`` starts with the peer (``ps HOST:PORT: connection lost (...)``), as every
    mapped failure's has; :attr:`line` is the one line a command prints for it.
    """

    def __init__(self, peer: str, status: Status, detail: str, hint: str) -> None:
        super().__init__(status, f"{peer}: {detail}")
        self.peer = peer
        """Whom the call went to (``"ps 127.0.0.1:4242"``)."""
        self.detail = detail
        """What happened, without the peer."""
        self.hint = hint
        """What the user can do about it."""

    @property
    def line(self) -> str:
        """``<role> <address>: <STATUS>: <what happened>; <what to do>``."""
        return f"{self.peer}: {self.status.name}: {self.detail}; {self.hint}"


def peer_error(exc: BaseException | None) -> PeerError | None:
    """The failed call under ``exc``, down its causes (a trainer rank's failure wraps the
    trainer's, which wraps the call's); None if no call failed in its transport."""
    while exc is not None and not isinstance(exc, PeerError):
        exc = exc.__cause__
    return exc


async def call_peer(peer: str, call: Callable[[], Awaitable[T]], *, tls: bool = False) -> T:
    """``await call()``; a lost connection to ``peer`` (``"ps HOST:PORT"``) raises
    :class:`PeerError` (see the module doc), with the caller's task uncancelled as it was.
    ``tls``: whether the call goes over TLS (a lost connection's hint depends on it)."""
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    try:
        return await call()
    except GRPCError as exc:
        await _take_back(task, before)
        if exc.status in _REFUSED_CREDENTIALS and not isinstance(exc, PeerError):
            raise PeerError(
                peer,
                exc.status,
                exc.message or "the call was refused",
                "give this job the auth_token_file its servers use",
            ) from exc
        raise
    except (StreamTerminatedError, OSError) as exc:  # TimeoutError is an OSError
        await _take_back(task, before)
        raise _mapped(peer, exc, tls) from exc
    except AttributeError as exc:
        if exc.name not in _RELEASED_ON_CLOSE:
            raise
        await _take_back(task, before)
        closed = ConnectionResetError("the connection closed during the call")
        raise _mapped(peer, closed, tls) from exc


_RELEASED_ON_CLOSE = frozenset({"_transport", "_frame_dispatch_table"})
"""What grpclib deletes when it closes a connection (see the module doc)."""


async def _take_back(task: asyncio.Task[object] | None, before: int) -> None:
    """Undo the cancellations of ``task`` that grpclib requested during the call; a cancel of
    the caller's own scope (anyio delivers it again at the next checkpoint) still raises."""
    if task is None:
        return
    while task.cancelling() > before:
        task.uncancel()
    await anyio.lowlevel.checkpoint_if_cancelled()


def _mapped(peer: str, exc: StreamTerminatedError | OSError, tls: bool) -> PeerError:
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, TimeoutError):
        return PeerError(
            peer,
            Status.DEADLINE_EXCEEDED,
            f"no answer in time ({cause})",
            "it is overloaded or stuck: see its log",
        )
    if isinstance(exc, ConnectionRefusedError):
        hint = "nothing listens there: start it, or correct the address"
        return PeerError(peer, Status.UNAVAILABLE, f"connection refused ({cause})", hint)
    if isinstance(exc, socket.gaierror):
        hint = "no such host here (DNS or /etc/hosts): correct the address"
        what = f"its host name does not resolve ({cause})"
        return PeerError(peer, Status.UNAVAILABLE, what, hint)
    # A TLS server closes a plaintext connection without a word (and a plaintext server a
    # TLS one): a lost connection is the first thing a mismatch shows.
    if tls:
        hint = (
            "it stopped, or it does not serve TLS with a certificate that tls_ca signs: "
            "give every role the same tls_* keys"
        )
    else:
        hint = (
            "it stopped, or it serves TLS and this job does not: give the job tls_ca "
            "(and tls_cert, tls_key where servers have tls_ca)"
        )
    return PeerError(peer, Status.UNAVAILABLE, f"connection lost ({cause})", hint)
