"""The in-process transport answers as gRPC does, on asyncio and on trio: the same statuses
and messages for the same mistakes, UNAVAILABLE once a role stops, INTERNAL with an id for a
bug; and transports open by name, plugins included."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper.roles import PsEngine, PsRole
from sniper.rpc import PsApi, VariableConfig
from sniper.scheduler import open_scheduler
from sniper.transport import (
    TRANSPORT_NAMES,
    InProcessTransport,
    Transport,
    open_transport,
    transport_names,
)
from sniper.transport._registry import PLUGINS

pytestmark = pytest.mark.anyio

SIGNS = np.array([1, 2, 3, 1], dtype=np.uint64)
OFFSETS = np.array([0, 2, 4], dtype=np.int64)


class BuggyRole(PsRole):
    """A ps whose Stats has a bug (what an INTERNAL error is for)."""

    async def stats(self) -> object:  # type: ignore[override]
        raise RuntimeError("a bug in Stats")


@asynccontextmanager
async def served(
    role_class: type[PsRole] = PsRole,
) -> AsyncIterator[tuple[InProcessTransport, PsRole, PsApi]]:
    transport = InProcessTransport()
    async with open_scheduler("inline", workers=1) as scheduler:
        role = role_class(PsEngine(scheduler))
        async with transport.serve(role, "") as address:
            assert address == "ps-0"
            yield transport, role, transport.ps_client(address)


async def expect(status: Status, message: str, call: object) -> None:
    with pytest.raises(GRPCError) as info:
        await call  # type: ignore[misc]
    assert (info.value.status, info.value.message) == (status, message)


async def test_a_training_step_and_the_caller_mistakes_of_the_grpc_contract() -> None:
    async with served() as (_, role, client):
        assert await client.create_variable(VariableConfig("emb", 4, 100))
        assert not await client.create_variable(VariableConfig("emb", 4, 100))
        await expect(
            Status.ALREADY_EXISTS,
            "variable 'emb' exists with another configuration",
            client.create_variable(VariableConfig("emb", 8, 100)),
        )
        await client.feed_sample(7, {"emb": (SIGNS, OFFSETS)})
        pooled = await client.embedding_lookup(7, ["emb"])
        assert pooled["emb"].pooled.shape == (2, 4)
        await expect(
            Status.INVALID_ARGUMENT,
            "gradient of 'emb' must be float32 of shape (2, 4), got float32 of shape (3, 4)",
            client.push_grad(7, {"emb": np.ones((3, 4), np.float32)}),
        )
        assert await client.push_grad(7, {"emb": np.ones((2, 4), np.float32)}) == 0
        await expect(  # the refused push changed nothing; the applied one is not repeated
            Status.ALREADY_EXISTS,
            "batch 7 of variable 'emb' was already pushed; a gradient is applied once",
            client.push_grad(7, {"emb": np.ones((2, 4), np.float32)}),
        )
        await expect(  # nor is the pushed batch reopened for a second push
            Status.FAILED_PRECONDITION,
            "batch 7 of variable 'emb' was already pushed; a batch id is never fed again once "
            "pushed: feed the batch under a new id",
            client.feed_sample(7, {"emb": (SIGNS, OFFSETS)}),
        )
        await expect(
            Status.NOT_FOUND,
            "batch 8 of variable 'emb' was not fed to this ps (or was already pushed or expired)",
            client.push_grad(8, {"emb": np.ones((2, 4), np.float32)}),
        )
        await expect(Status.NOT_FOUND, "unknown variable 'nope'", client.pull("nope", SIGNS))
        assert role.engine.pending_batches() == 0


async def test_a_bug_is_internal_with_an_id_in_the_message_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with served(BuggyRole) as (_, _role, client):
        with caplog.at_level(logging.ERROR), pytest.raises(GRPCError) as info:
            await client.stats()
    assert info.value.status == Status.INTERNAL
    found = re.fullmatch(
        r"internal error ([0-9a-f]{12}) in ps-0 stats \(RuntimeError\); this is a bug in "
        r"sniper: the server's log has the traceback under this id",
        info.value.message or "",
    )
    assert found is not None
    (record,) = caplog.records
    assert found.group(1) in record.getMessage() and record.exc_info is not None


async def test_a_stopped_role_is_unavailable_and_its_address_can_be_served_again() -> None:
    async with served() as (transport, _role, client):
        pass
    await expect(Status.UNAVAILABLE, "nothing is served at 'ps-0'", client.stats())
    async with (
        open_scheduler("inline", workers=1) as scheduler,
        transport.serve(PsRole(PsEngine(scheduler)), "ps-0"),
    ):
        assert (await client.stats()).scheduler == "inline"  # the same client reconnects
        with pytest.raises(ValueError, match="'ps-0' is already served"):
            async with transport.serve(PsRole(PsEngine(scheduler)), "ps-0"):
                pass


class GatedRole(PsRole):
    """A ps whose Stats waits for a gate, then records that it finished."""

    gate: anyio.Event
    finished: list[str]

    async def stats(self) -> object:  # type: ignore[override]
        await self.gate.wait()
        self.finished.append("stats")
        return await super().stats()


@asynccontextmanager
async def gated() -> AsyncIterator[tuple[InProcessTransport, GatedRole, PsApi]]:
    async with served(GatedRole) as (transport, role, client):
        assert isinstance(role, GatedRole)
        role.gate, role.finished = anyio.Event(), []
        yield transport, role, client


async def test_a_call_in_flight_when_its_role_stops_is_unavailable() -> None:
    errors: list[GRPCError] = []

    async def call(client: PsApi) -> None:
        try:
            await client.stats()
        except GRPCError as exc:
            errors.append(exc)

    with anyio.fail_after(10):  # an unanswered call must not hang the test
        await _stop_with_a_call_in_flight(call)
    (error,) = errors
    assert (error.status, error.message) == (
        Status.UNAVAILABLE,
        "ps-0 stopped before answering stats",
    )


async def _stop_with_a_call_in_flight(call: Callable[[PsApi], Coroutine[Any, Any, None]]) -> None:
    async with anyio.create_task_group() as group:
        async with gated() as (_transport, role, client):
            group.start_soon(call, client)
            await anyio.wait_all_tasks_blocked()
        # The role stopped with the call waiting at its gate: the call ended, unanswered.
        assert role.finished == []


async def test_a_caller_that_gives_up_leaves_the_roles_work_to_finish() -> None:
    async with gated() as (_transport, role, client):
        with anyio.move_on_after(0.05) as scope:
            await client.stats()
        assert scope.cancelled_caught and role.finished == []
        role.gate.set()
        await anyio.wait_all_tasks_blocked()
        assert role.finished == ["stats"]  # the role answered a caller no longer waiting
        assert (await client.stats()).scheduler == "inline"


async def test_a_caller_cancelled_before_it_calls_sends_nothing() -> None:
    async with gated() as (_transport, role, client):
        role.gate.set()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await client.stats()
        await anyio.wait_all_tasks_blocked()
        assert role.finished == []


class ShieldedRole(GatedRole):
    """A ps whose Stats waits for its gate even when cancelled (a call that unwinds slowly)."""

    async def stats(self) -> object:  # type: ignore[override]
        with anyio.CancelScope(shield=True):
            await self.gate.wait()
        self.finished.append("stats")
        return await PsRole.stats(self)


async def test_an_address_is_not_served_again_until_its_calls_have_unwound() -> None:
    transport = InProcessTransport()
    stop, stopped = anyio.Event(), anyio.Event()
    async with open_scheduler("inline", workers=1) as scheduler:
        role = ShieldedRole(PsEngine(scheduler))
        role.gate, role.finished = anyio.Event(), []
        client = transport.ps_client("ps-0")

        async def serve() -> None:
            async with transport.serve(role, "ps-0"):
                await stop.wait()
            stopped.set()

        async def call() -> None:
            with contextlib.suppress(GRPCError):
                await client.stats()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(serve)
                await anyio.wait_all_tasks_blocked()
                group.start_soon(call)
                await anyio.wait_all_tasks_blocked()
                stop.set()  # the role stops, but its call holds on at the gate
                await anyio.wait_all_tasks_blocked()
                try:
                    assert not stopped.is_set()
                    await expect(Status.UNAVAILABLE, "ps-0 stopped serving", client.stats())
                    with pytest.raises(ValueError, match="'ps-0' is already served"):
                        async with transport.serve(PsRole(PsEngine(scheduler)), "ps-0"):
                            pass
                finally:
                    role.gate.set()  # a shielded call would outlast a failed test's cancel
        assert stopped.is_set() and role.finished == ["stats"]
        async with transport.serve(PsRole(PsEngine(scheduler)), "ps-0"):
            assert (await client.stats()).scheduler == "inline"


def test_transports_open_by_name() -> None:
    assert transport_names()[:2] == TRANSPORT_NAMES == ("grpc", "inprocess")
    assert open_transport("inprocess").name == "inprocess"
    assert open_transport("grpc").name == "grpc"
    with pytest.raises(LookupError, match="no transport named 'carrier-pigeon'; valid names"):
        open_transport("carrier-pigeon")


THEIR_TRANSPORT = '''\
"""A third-party transport: sniper's in-process one under another name."""

from sniper.transport import InProcessTransport


class LoopTransport(InProcessTransport):
    """In process, by another name."""

    name = "loop"
'''


@pytest.fixture
def loop_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``looppkg`` 0.1 installed with a ``sniper.transports`` entry point named ``loop``."""
    (tmp_path / "looppkg").mkdir()
    (tmp_path / "looppkg" / "__init__.py").write_text("")
    (tmp_path / "looppkg" / "transport.py").write_text(THEIR_TRANSPORT)
    info = tmp_path / "looppkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: looppkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[sniper.transports]\nloop = looppkg.transport:LoopTransport\n"
        "inprocess = looppkg.transport:LoopTransport\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(PLUGINS, "warned", set())
    yield
    for module in [m for m in sys.modules if m.startswith("looppkg")]:
        del sys.modules[module]


@pytest.mark.usefixtures("loop_plugin")
async def test_a_plugin_transport_serves_a_ps(caplog: pytest.LogCaptureFixture) -> None:
    assert transport_names() == ("grpc", "inprocess", "loop")
    transport = open_transport("loop")
    assert isinstance(transport, Transport) and transport.name == "loop"
    # The plugin's attempt to take the built-in name is refused, with a warning.
    assert type(open_transport("inprocess")) is InProcessTransport
    assert "'inprocess' is a built-in transport, which always wins" in caplog.text
    async with (
        open_scheduler("inline", workers=1) as scheduler,
        transport.serve(PsRole(PsEngine(scheduler)), "") as address,
    ):
        client = transport.ps_client(address)
        assert await client.create_variable(VariableConfig("emb", 4, 100))
