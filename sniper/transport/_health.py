"""The standard ``grpc.health.v1.Health`` service, so any health probe can check a role."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper.rpc import (
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
        self._changed: anyio.Event | None = None  # made by watch(): it needs a running loop

    def changed(self) -> None:
        """Tell watchers the status may have changed (a drain began, a hub failed)."""
        if self._changed is not None:
            self._changed.set()

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
            if self._changed is None or self._changed.is_set():
                self._changed = anyio.Event()
            await self._changed.wait()
            status = self._status(request.service)
            yield HealthCheckResponse(status=status)
