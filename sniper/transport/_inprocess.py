"""The in-process transport: roles as actors, each answering calls in its own task group.

A client call is started as a task in the served role's task group and answered through a
one-shot reply, so calls run concurrently as they do on a gRPC server, a caller that gives up
(a cancelled call) does not cancel the role's work half-way, and a role that stops ends the
calls it had not answered (their callers hear UNAVAILABLE). Failures are mapped to the
``GRPCError`` the gRPC transport would raise, by the same table.

Why no mailbox between caller and role: a call used to go through a memory object stream that
the role's loop read, then a reply stream of its own. Each hop is a pass of the event loop;
the one-process job makes seven or eight calls a batch, and a call cost 90 us that way against
40 us started straight into the role's group (CHANGELOG.md, 2026-11-25, 23656ee).

Arrays are passed by reference, not copied: a role keeps the signs it is fed and returns fresh
arrays, and callers must not write into arrays after handing them over (the hub and trainer
never do). Runs on any anyio backend: this is how a whole training job runs in one process on
trio (``sniper.testing.local_cluster``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
from anyio.abc import TaskGroup
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from numpy.typing import NDArray

from sniper._tasks import background
from sniper.placement import Placement
from sniper.roles import HubRole, PsRole
from sniper.rpc import (
    Checkpointed,
    LookupTarget,
    MovedVariable,
    NextLookup,
    Pooled,
    PsStats,
    Sample,
    Signs,
    VariableConfig,
    Weights,
)
from sniper.transport._abc import Transport
from sniper.transport._errors import grpc_error

__all__ = ["InProcessTransport"]

log = logging.getLogger("sniper.inprocess")


class _Served:
    """A role being served: calls are started in its task group, which ends them when the
    role stops."""

    def __init__(self, role: object, group: TaskGroup, address: str) -> None:
        self.role = role
        self.group = group
        self.address = address
        self.stopping = False
        """Set when the role begins to stop: no call starts after it, and the address is not
        served again until the calls it ended have unwound."""


class _Reply:
    """The one-shot answer to a call: ``(True, value)`` or ``(False, error)``, set once."""

    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.outcome: tuple[bool, Any] | None = None


class InProcessTransport(Transport):
    """Roles in this process, called as tasks of their own. Addresses are names; ``""``
    picks one."""

    name = "inprocess"

    def __init__(self) -> None:
        self._served: dict[str, _Served] = {}
        self._numbers = {"ps": itertools.count(), "hub": itertools.count()}

    @asynccontextmanager
    async def serve(self, role: PsRole | HubRole, address: str) -> AsyncIterator[str]:
        kind = "ps" if isinstance(role, PsRole) else "hub"
        address = address or f"{kind}-{next(self._numbers[kind])}"
        if address in self._served:
            raise ValueError(f"the in-process address {address!r} is already served")
        try:
            async with background() as group:
                served = self._served[address] = _Served(role, group, address)
                try:
                    yield address
                finally:
                    # Before the group ends the calls in flight: no call starts after this.
                    served.stopping = True
        finally:
            self._served.pop(address, None)

    def ps_client(self, address: str) -> InProcessPsClient:
        return InProcessPsClient(_Endpoint(self, address))

    def hub_client(self, address: str) -> InProcessHubClient:
        return InProcessHubClient(_Endpoint(self, address))


async def _answer_one(
    served: _Served, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], reply: _Reply
) -> None:
    """Answer one call in the role's group. Ended unanswered (the role stopped): the caller
    hears UNAVAILABLE. A caller that gave up is no longer waiting: the answer is dropped, as a
    server's is after a deadline."""
    try:
        reply.outcome = (True, await getattr(served.role, method)(*args, **kwargs))
    except Exception as exc:
        reply.outcome = (False, grpc_error(exc, f"{served.address} {method}", log))
    finally:
        if reply.outcome is None:  # ended without an answer: the role stopped
            reply.outcome = (
                False,
                GRPCError(
                    Status.UNAVAILABLE, f"{served.address} stopped before answering {method}"
                ),
            )
        reply.done.set()


class _Endpoint:
    """A client's way into one served role; looked up at every call, so a role served again
    at the same address is reached again, as a restarted server is over gRPC."""

    def __init__(self, transport: InProcessTransport, address: str) -> None:
        self.transport = transport
        self.address = address

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        # A caller already cancelled sends nothing, as a gRPC client would not: starting a task
        # is no checkpoint, so without this the role would run a call nobody waits for.
        await anyio.lowlevel.checkpoint_if_cancelled()
        served = self.transport._served.get(self.address)
        if served is None:
            raise GRPCError(Status.UNAVAILABLE, f"nothing is served at {self.address!r}")
        if served.stopping:
            raise GRPCError(Status.UNAVAILABLE, f"{self.address} stopped serving")
        reply = _Reply()
        served.group.start_soon(_answer_one, served, method, args, kwargs, reply)
        await reply.done.wait()
        assert reply.outcome is not None
        ok, value = reply.outcome
        if not ok:
            raise value
        return value


class InProcessPsClient:
    """:class:`~sniper.rpc.PsApi` of a ps served by :class:`InProcessTransport`."""

    def __init__(self, endpoint: _Endpoint) -> None:
        self._endpoint = endpoint
        self.address = endpoint.address

    async def create_variable(self, config: VariableConfig) -> bool:
        created: bool = await self._endpoint.call("create_variable", config)
        return created

    async def feed_sample(
        self, batch_id: int, variables: Mapping[str, Signs], *, weights: Weights | None = None
    ) -> None:
        await self._endpoint.call("feed_sample", batch_id, variables, weights=weights)

    async def embedding_lookup(
        self,
        batch_id: int,
        names: Sequence[str],
        *,
        release: bool = False,
        into: LookupTarget | None = None,
    ) -> dict[str, Pooled]:
        pooled: dict[str, Pooled] = await self._endpoint.call(
            "embedding_lookup", batch_id, names, release=release, into=into
        )
        return pooled

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        dropped: int = await self._endpoint.call("push_grad", batch_id, grads)
        return dropped

    async def push_grad_then_lookup(
        self, batch_id: int, grads: Mapping[str, NDArray[np.float32]], then: NextLookup
    ) -> tuple[int, dict[str, Pooled] | None]:
        answer: tuple[int, dict[str, Pooled] | None] = await self._endpoint.call(
            "push_grad_then_lookup", batch_id, grads, then
        )
        return answer

    async def pull(self, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
        rows: NDArray[np.float32] = await self._endpoint.call("pull", name, signs)
        return rows

    async def push(self, name: str, signs: NDArray[np.uint64], rows: NDArray[np.float32]) -> None:
        await self._endpoint.call("push", name, signs, rows)

    async def save(self, directory: str) -> Checkpointed:
        done: Checkpointed = await self._endpoint.call("save", directory)
        return done

    async def restore(self, directory: str) -> Checkpointed:
        done: Checkpointed = await self._endpoint.call("restore", directory)
        return done

    async def stats(self) -> PsStats:
        stats: PsStats = await self._endpoint.call("stats")
        return stats

    async def export_variable(self, name: str) -> MovedVariable:
        moved: MovedVariable = await self._endpoint.call("export_variable", name)
        return moved

    async def import_variable(self, moved: MovedVariable) -> int:
        rows: int = await self._endpoint.call("import_variable", moved)
        return rows

    async def drop_variable(self, name: str) -> bool:
        dropped: bool = await self._endpoint.call("drop_variable", name)
        return dropped


class InProcessHubClient:
    """:class:`~sniper.rpc.HubApi` of a hub served by :class:`InProcessTransport`."""

    def __init__(self, endpoint: _Endpoint) -> None:
        self._endpoint = endpoint
        self.address = endpoint.address

    async def read_sample(self, *, describe: bool = False) -> Sample | None:
        sample: Sample | None = await self._endpoint.call("read_sample", describe=describe)
        return sample

    async def acknowledge(self, batch_ids: Sequence[int]) -> int:
        settled: int = await self._endpoint.call("acknowledge", list(batch_ids))
        return settled

    async def set_placement(self, placement: Placement) -> int:
        version: int = await self._endpoint.call("set_placement", placement)
        return version
