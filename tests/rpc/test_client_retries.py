"""PsClient retries idempotent calls on UNAVAILABLE, gives up after `retries`, never retries
PushGrad. A real grpclib server on loopback whose service fails its first calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from sniper.roles import PsEngine, PsRole
from sniper.rpc import PsClient, SniperCodec
from sniper.rpc._wire import PushGradView
from sniper.rpc.v1 import PushGradRequest, PushGradResponse, StatsRequest, StatsResponse
from sniper.scheduler import open_scheduler
from sniper.transport import PsService, bound_address

pytestmark = pytest.mark.anyio


class FlakyPs(PsService):
    """Answers UNAVAILABLE to the first ``failures`` calls of Stats and PushGrad."""

    def __init__(self, engine: PsEngine, failures: int) -> None:
        super().__init__(PsRole(engine))
        self.failures = failures
        self.calls = {"stats": 0, "push_grad": 0}

    def _maybe_fail(self, name: str) -> None:
        self.calls[name] += 1
        if self.calls[name] <= self.failures:
            raise GRPCError(Status.UNAVAILABLE, "restarting")

    async def stats(self, request: StatsRequest) -> StatsResponse:
        self._maybe_fail("stats")
        return await super().stats(request)

    async def push_grad(self, request: PushGradRequest | PushGradView) -> PushGradResponse:
        self._maybe_fail("push_grad")
        return await super().push_grad(request)


@asynccontextmanager
async def flaky(failures: int, retries: int) -> AsyncIterator[tuple[FlakyPs, PsClient]]:
    async with open_scheduler("inline", workers=1) as scheduler:
        service = FlakyPs(PsEngine(scheduler), failures)
        server = Server([service], codec=SniperCodec(2**20))
        await server.start("127.0.0.1", 0)
        host, port = bound_address(server)
        client = PsClient(host, port, retries=retries, backoff=0.001)
        try:
            yield service, client
        finally:
            client.close()
            server.close()
            await server.wait_closed()


async def test_idempotent_call_rides_over_unavailable() -> None:
    async with flaky(failures=2, retries=3) as (service, client):
        assert (await client.stats()).scheduler == "inline"
        assert service.calls["stats"] == 3


async def test_retries_give_up_with_the_last_status() -> None:
    async with flaky(failures=5, retries=2) as (service, client):
        with pytest.raises(GRPCError) as info:
            await client.stats()
        assert (info.value.status, info.value.message) == (Status.UNAVAILABLE, "restarting")
        assert service.calls["stats"] == 3


async def test_push_grad_is_never_retried() -> None:
    async with flaky(failures=1, retries=5) as (service, client):
        with pytest.raises(GRPCError) as info:
            await client.push_grad(1, {"x": np.zeros((1, 2), np.float32)})
        assert info.value.status == Status.UNAVAILABLE
        assert service.calls["push_grad"] == 1
