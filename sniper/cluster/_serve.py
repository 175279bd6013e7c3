"""``sniper serve --role ps``: run a ps until SIGINT or SIGTERM, then shut down gracefully.

It is launch code, beside ``sniper train``'s launchers, which start these servers themselves
(``local`` as ``sniper serve`` processes, ``ray`` in actors); the transport underneath
(``sniper.transport``) only carries calls to a role.

Configuration comes from defaults, then an optional TOML file (``--config``), then command-line
flags, and is validated into a frozen :class:`ServeConfig` whose errors name the field.

Shutdown order on a signal: health turns NOT_SERVING; new calls get UNAVAILABLE; calls in
flight finish (up to ``drain_timeout`` seconds); the server closes its connections; the
scheduler drains and joins its workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from prometheus_client.registry import Collector

from sniper._config import check_positive, load_config
from sniper.data import DataSource
from sniper.monitoring import HubCollector, MetricsServer, PsCollector, serve_metrics
from sniper.roles import HubConfig, PsRole, PsSettings
from sniper.rpc import Security, Server, is_loopback
from sniper.runtime import log_to_stderr
from sniper.scheduler import open_scheduler
from sniper.transport import (
    GrpcSettings,
    GrpcTransport,
    HealthService,
    HubService,
    PsService,
    bound_address,
    split_address,
)

if TYPE_CHECKING:
    from sniper.roles import PsCluster

__all__ = [
    "ServeConfig",
    "hub_cluster",
    "load_serve_config",
    "parse_addresses",
    "run_serve",
    "serve_hub",
    "serve_ps",
]

log = logging.getLogger("sniper.serve")


@dataclass(frozen=True)
class ServeConfig(DataSource, HubConfig, PsSettings, GrpcSettings):
    """Everything ``sniper serve`` takes; each field is also a TOML key and a flag (a hub's
    start placement, ``placement_owners`` and ``placement_version``, is what ``sniper train``
    writes for the hubs it starts).

    The data keys come from :class:`~sniper.data.DataSource`, the hub keys from
    :class:`~sniper.roles.HubConfig`, the ps keys from
    :class:`~sniper.roles.PsSettings`, the HTTP/2 keys from
    :class:`~sniper.transport.GrpcSettings`: ``sniper train`` shares the first two, and hands
    each server it starts a ``ServeConfig`` built from its own values, as a TOML file.
    """

    role: Literal["ps", "hub"] = "ps"
    host: str = "127.0.0.1"
    port: int = 0
    drain_timeout: float = 30.0
    ps: str = ""
    """Comma-separated ``host:port`` of every ps, in cluster order (hub only)."""
    exit_on_stdin_eof: bool = False
    """Also stop when standard input closes: a launcher passes its pipe, so the server ends
    with it even if the launcher is killed outright."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.role not in ("ps", "hub"):
            raise ValueError(f"role must be 'ps' or 'hub', got {self.role!r}")
        if self.role == "hub" and not self.ps:
            raise ValueError("ps must list the ps addresses (host:port,...) for a hub")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        check_positive(self, "drain_timeout")


def load_serve_config(path: Path | None, overrides: dict[str, Any]) -> ServeConfig:
    """Defaults, then the TOML file at ``path``, then the non-None ``overrides``."""
    return load_config(ServeConfig, path, overrides)


def _grpc_server(services: list[Any], config: ServeConfig) -> Server:
    """A grpclib server with the size limit, HTTP/2 windows, frames, TLS and token of
    ``config``; a bind beyond loopback with neither TLS nor a token is logged as a risk."""
    security = Security.of(config)
    if security.ca and not security.cert:
        raise ValueError(
            "tls_ca without tls_cert and tls_key: a server needs its own certificate to speak "
            "TLS (and to require client certificates)"
        )
    if not (security.cert or security.token) and not is_loopback(config.host):
        log.warning(
            "serving on %s without TLS or a token: anyone who reaches this port can read and "
            "overwrite the tables; set tls_cert/tls_key/tls_ca or auth_token_file",
            config.host,
        )
    return GrpcTransport(config, security=security).server(services)


async def serve_ps(config: ServeConfig) -> None:
    """Serve until SIGINT or SIGTERM; the first stdout line is ``listening on HOST:PORT``."""
    workers = config.worker_threads()
    async with open_scheduler(config.scheduler, workers=workers) as scheduler:
        role = await config.ps_role(scheduler)
        health = HealthService(("sniper.v1.Ps",), lambda: role.healthy)
        server = _grpc_server([PsService(role, config.max_message_mb), health], config)
        await server.start(config.host, config.port)

        async def drain() -> None:
            log.info("signal received: draining in-flight calls")
            health.changed()
            with anyio.move_on_after(config.drain_timeout) as scope:
                await role.drain()
            if scope.cancelled_caught:
                log.warning(
                    "calls still in flight after %.0f s; closing anyway", config.drain_timeout
                )

        with _metrics(config, PsCollector(role)) as metrics:
            async with anyio.create_task_group() as group:
                group.start_soon(_report, role, config.stats_interval)
                await _serve_until_signal(server, config, drain, metrics)
                group.cancel_scope.cancel()
    role.log_statistics()


@contextlib.contextmanager
def _metrics(config: ServeConfig, collector: Collector) -> Iterator[MetricsServer | None]:
    """The role's Prometheus endpoint while it serves, if ``metrics_port`` asks for one."""
    if config.metrics_port < 0:
        yield None
        return
    server = serve_metrics([collector], config.metrics_port, config.metrics_host)
    try:
        yield server
    finally:
        server.close()


async def _report(role: PsRole, interval: float) -> None:
    while True:
        await anyio.sleep(interval)
        role.log_statistics()


def parse_addresses(text: str, what: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as pairs; ``ValueError`` names ``what`` and the bad entry."""
    addresses = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        try:
            host, port = split_address(entry)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if port == 0:
            raise ValueError(f"{what}: {entry!r} has port 0; give the port it listens on")
        addresses.append((host, port))
    if not addresses:
        raise ValueError(f"{what}: no address given")
    return addresses


async def _serve_until_signal(
    server: Server,
    config: ServeConfig,
    on_stop: Any = None,
    metrics: MetricsServer | None = None,
) -> None:
    """Print the listening line (then the metrics line), wait for SIGINT or SIGTERM, then
    close the server."""
    # Handlers first: a supervisor may signal as soon as it reads the listening line.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    if config.exit_on_stdin_eof:
        threading.Thread(target=_wait_for_eof, args=(loop, stop), daemon=True).start()
    host, port = bound_address(server)
    print(f"listening on {host}:{port}", flush=True)
    if metrics is not None:
        print(f"metrics on {metrics.url}", flush=True)
    try:
        await stop.wait()
        if on_stop is not None:
            await on_stop()
    finally:
        server.close()
        await server.wait_closed()


def _wait_for_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Read standard input to its end, then ask the server to stop."""
    # os.read on the raw descriptor: a daemon thread blocked inside the buffered
    # sys.stdin.buffer.read holds its lock and makes interpreter shutdown abort (SIGABRT).
    with contextlib.suppress(OSError, ValueError):
        while os.read(sys.stdin.fileno(), 65536):
            pass
    with contextlib.suppress(RuntimeError):  # the loop may already be closed
        loop.call_soon_threadsafe(stop.set)


def hub_cluster(config: ServeConfig) -> PsCluster:
    """A hub server's ps: clients of ``config.ps`` in cluster order, fed by the placement the
    job started with (``placement_owners``; a later one comes by SetPlacement)."""
    from sniper.roles import PsCluster
    from sniper.rpc import PsClient

    security = Security.of(config)
    clients = [
        PsClient(host, port, http2_window_mb=config.http2_window_mb, security=security)
        for host, port in parse_addresses(config.ps, "ps")
    ]
    return PsCluster(clients, config.start_placement(len(clients)))


async def serve_hub(config: ServeConfig) -> None:
    """Serve ``sniper.v1.Hub`` (and health) until SIGINT or SIGTERM."""
    from sniper.roles import HubRole

    reader = config.open()
    cluster = hub_cluster(config)
    hub = HubRole(reader, cluster, config, config)
    health = HealthService(("sniper.v1.Hub",), lambda: hub.healthy)
    server = _grpc_server([HubService(hub), health], config)
    await server.start(config.host, config.port)

    async def produce() -> None:
        await hub.run()
        health.changed()  # the data ended or failed: watchers see NOT_SERVING at once

    try:
        with _metrics(config, HubCollector(hub)) as metrics:
            async with anyio.create_task_group() as group:
                group.start_soon(produce)
                await _serve_until_signal(server, config, metrics=metrics)
                group.cancel_scope.cancel()
    finally:
        hub.close()
        cluster.close()


def run_serve(config: ServeConfig) -> int:
    """Entry point of ``sniper serve``: logs to stderr, returns the exit status."""
    log_to_stderr()
    asyncio.run(serve_ps(config) if config.role == "ps" else serve_hub(config))
    return 0
