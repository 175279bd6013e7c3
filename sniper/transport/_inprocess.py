"""The in-process transport: roles as actors behind anyio memory object streams.

Each served role has a mailbox (a memory object stream). A client call puts the method name,
its arguments and a one-shot reply stream in the mailbox; the role's own task group answers
every call in a task of its own, so calls run concurrently as they do on a gRPC server, and a
caller that gives up (a cancelled call) does not cancel the role's work half-way. Failures are
mapped to the ``GRPCError`` the gRPC transport would raise, by the same table.

Arrays are passed by reference, not copied: a role keeps the signs it is fed and returns fresh
arrays, and callers must not write into arrays after handing them over (the hub and trainer
never do). Runs on any anyio backend: this is how a whole training job runs in one process on
trio (``sniper.testing.local_cluster``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from numpy.typing import NDArray

from sniper._tasks import background
from sniper.roles._hub import HubRole
from sniper.roles._ps import PsRole
from sniper.rpc._api import Checkpointed, LookupTarget, MovedVariable, Pooled, Sample, Signs
from sniper.rpc._generated.sniper.v1 import CreateVariableRequest, StatsResponse
from sniper.rpc._placement import Placement
from sniper.transport._abc import Transport
from sniper.transport._errors import grpc_error

__all__ = ["InProcessTransport"]

log = logging.getLogger("sniper.inprocess")

_MAILBOX_SIZE = 64
"""Calls waiting for the role to pick them up; a fuller mailbox makes callers wait."""


@dataclass(frozen=True)
class _Call:
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reply: MemoryObjectSendStream[tuple[bool, Any]]


class InProcessTransport(Transport):
    """Roles in this process, on anyio memory streams. Addresses are names; ``""`` picks one."""

    name = "inprocess"

    def __init__(self) -> None:
        self._mailboxes: dict[str, MemoryObjectSendStream[_Call]] = {}
        self._numbers = {"ps": itertools.count(), "hub": itertools.count()}

    @asynccontextmanager
    async def serve(self, role: PsRole | HubRole, address: str) -> AsyncIterator[str]:
        kind = "ps" if isinstance(role, PsRole) else "hub"
        address = address or f"{kind}-{next(self._numbers[kind])}"
        if address in self._mailboxes:
            raise ValueError(f"the in-process address {address!r} is already served")
        send, receive = anyio.create_memory_object_stream[_Call](_MAILBOX_SIZE)
        self._mailboxes[address] = send
        try:
            async with background() as group:
                group.start_soon(_answer, role, receive, address)
                yield address
        finally:
            del self._mailboxes[address]
            send.close()

    def _mailbox(self, address: str) -> _Mailbox:
        return _Mailbox(self, address)

    def ps_client(self, address: str) -> InProcessPsClient:
        return InProcessPsClient(self._mailbox(address))

    def hub_client(self, address: str) -> InProcessHubClient:
        return InProcessHubClient(self._mailbox(address))


async def _answer(role: object, receive: MemoryObjectReceiveStream[_Call], address: str) -> None:
    """The role's actor loop: every call answered in a task of the role's task group."""
    try:
        async with anyio.create_task_group() as group:
            async for call in receive:
                group.start_soon(_answer_one, role, call, address)
    finally:
        # Calls still in the mailbox when the role stops are never answered: closing their
        # reply streams tells each caller UNAVAILABLE.
        with receive:
            while True:
                try:
                    receive.receive_nowait().reply.close()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break


async def _answer_one(role: object, call: _Call, address: str) -> None:
    # Closed unanswered (the role stopped): the caller hears UNAVAILABLE. A caller that gave
    # up has closed its end: the answer is dropped, as a server's is after a deadline.
    async with call.reply:
        try:
            outcome = (True, await getattr(role, call.method)(*call.args, **call.kwargs))
        except Exception as exc:
            outcome = (False, grpc_error(exc, f"{address} {call.method}", log))
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            call.reply.send_nowait(outcome)


class _Mailbox:
    """A client's way into one served role; looked up at every call, so a role served again
    at the same address is reached again, as a restarted server is over gRPC."""

    def __init__(self, transport: InProcessTransport, address: str) -> None:
        self.transport = transport
        self.address = address

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        mailbox = self.transport._mailboxes.get(self.address)
        if mailbox is None:
            raise GRPCError(Status.UNAVAILABLE, f"nothing is served at {self.address!r}")
        send_reply, receive_reply = anyio.create_memory_object_stream[tuple[bool, Any]](1)
        async with receive_reply:
            try:
                await mailbox.send(_Call(method, args, kwargs, send_reply))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                send_reply.close()
                raise GRPCError(Status.UNAVAILABLE, f"{self.address} stopped serving") from None
            except BaseException:  # cancelled: the call may never reach the role
                send_reply.close()
                raise
            try:
                ok, value = await receive_reply.receive()
            except anyio.EndOfStream:
                raise GRPCError(
                    Status.UNAVAILABLE, f"{self.address} stopped before answering {method}"
                ) from None
        if not ok:
            raise value
        return value


class InProcessPsClient:
    """:class:`~sniper.rpc.PsApi` of a ps served by :class:`InProcessTransport`."""

    def __init__(self, mailbox: _Mailbox) -> None:
        self._mailbox = mailbox
        self.address = mailbox.address

    async def create_variable(self, request: CreateVariableRequest) -> bool:
        created: bool = await self._mailbox.call("create_variable", request)
        return created

    async def feed_sample(self, batch_id: int, variables: Mapping[str, Signs]) -> None:
        await self._mailbox.call("feed_sample", batch_id, variables)

    async def embedding_lookup(
        self,
        batch_id: int,
        names: Sequence[str],
        *,
        release: bool = False,
        into: LookupTarget | None = None,
    ) -> dict[str, Pooled]:
        pooled: dict[str, Pooled] = await self._mailbox.call(
            "embedding_lookup", batch_id, names, release=release, into=into
        )
        return pooled

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        dropped: int = await self._mailbox.call("push_grad", batch_id, grads)
        return dropped

    async def pull(self, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
        rows: NDArray[np.float32] = await self._mailbox.call("pull", name, signs)
        return rows

    async def push(self, name: str, signs: NDArray[np.uint64], rows: NDArray[np.float32]) -> None:
        await self._mailbox.call("push", name, signs, rows)

    async def save(self, directory: str) -> Checkpointed:
        done: Checkpointed = await self._mailbox.call("save", directory)
        return done

    async def restore(self, directory: str) -> Checkpointed:
        done: Checkpointed = await self._mailbox.call("restore", directory)
        return done

    async def stats(self) -> StatsResponse:
        stats: StatsResponse = await self._mailbox.call("stats")
        return stats

    async def export_variable(self, name: str) -> MovedVariable:
        moved: MovedVariable = await self._mailbox.call("export_variable", name)
        return moved

    async def import_variable(self, moved: MovedVariable) -> int:
        rows: int = await self._mailbox.call("import_variable", moved)
        return rows

    async def drop_variable(self, name: str) -> bool:
        dropped: bool = await self._mailbox.call("drop_variable", name)
        return dropped


class InProcessHubClient:
    """:class:`~sniper.rpc.HubApi` of a hub served by :class:`InProcessTransport`."""

    def __init__(self, mailbox: _Mailbox) -> None:
        self._mailbox = mailbox
        self.address = mailbox.address

    async def read_sample(self) -> Sample | None:
        sample: Sample | None = await self._mailbox.call("read_sample")
        return sample

    async def acknowledge(self, batch_ids: Sequence[int]) -> int:
        settled: int = await self._mailbox.call("acknowledge", list(batch_ids))
        return settled

    async def set_placement(self, placement: Placement) -> int:
        version: int = await self._mailbox.call("set_placement", placement)
        return version
