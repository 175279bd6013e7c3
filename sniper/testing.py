"""Test helpers for code that embeds or talks to sniper.

``running_ps()`` starts a real ``PsService`` on a free loopback port inside the running asyncio
loop and yields it with a connected :class:`sniper.rpc.PsClient`: real gRPC, no mocks, no
subprocess. grpclib runs on asyncio only, so use it from asyncio tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sniper.roles import HealthService, PsEngine, PsService, PsServiceConfig, bound_address
from sniper.rpc import PsClient, Server
from sniper.scheduler import open_scheduler

__all__ = ["running_ps"]


@asynccontextmanager
async def running_ps(
    scheduler: str = "thread_pool",
    workers: int = 2,
    config: PsServiceConfig | None = None,
    max_message_bytes: int = 64 * 2**20,
) -> AsyncIterator[tuple[PsService, PsClient]]:
    """A ps on ``127.0.0.1:<free port>`` and a client connected to it; both closed on exit."""
    async with open_scheduler(scheduler, workers=workers) as sched:
        service = PsService(PsEngine(sched), config)
        health = HealthService(("sniper.v1.Ps",), lambda: not service.draining)
        server = Server([service, health], max_message_bytes=max_message_bytes)
        await server.start("127.0.0.1", 0)
        _, port = bound_address(server)
        client = PsClient("127.0.0.1", port, timeout=30.0, retries=0)
        try:
            yield service, client
        finally:
            client.close()
            server.close()
            await server.wait_closed()
