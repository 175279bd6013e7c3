"""The standard ``grpc.health.v1.Health`` service, so any health probe can check a role."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper.rpc._generated.grpc.health.v1 import (
    HealthBase,
    HealthCheckRequest,
    HealthCheckResponse,
    HealthCheckResponseServingStatus,
)

__all__ = ["HealthService"]

SERVING = HealthCheckResponseServingStatus(HealthCheckResponseServingStatus.SERVING)
NOT_SERVING = HealthCheckResponseServingStatus(HealthCheckResponseServingStatus.NOT_SERVING)


class HealthService(HealthBase):
    """Answers SERVING for ``""`` and the named services until ``serving()`` turns False."""

    def __init__(self, services: tuple[str, ...], serving: Callable[[], bool]) -> None:
        self.services = ("", *services)
        self._serving = serving
        self.changed = asyncio.Event()

    def _status(self, service: str) -> HealthCheckResponseServingStatus:
        if service not in self.services:
            raise GRPCError(
                Status.NOT_FOUND,
                f"unknown service {service!r}; this server has "
                f"{', '.join(s for s in self.services if s)}",
            )
        return SERVING if self._serving() else NOT_SERVING

    async def check(self, request: HealthCheckRequest) -> HealthCheckResponse:
        return HealthCheckResponse(status=self._status(request.service))

    async def watch(self, request: HealthCheckRequest) -> AsyncIterator[HealthCheckResponse]:
        status = self._status(request.service)
        yield HealthCheckResponse(status=status)
        while status == SERVING:
            await self.changed.wait()
            status = self._status(request.service)
            yield HealthCheckResponse(status=status)
