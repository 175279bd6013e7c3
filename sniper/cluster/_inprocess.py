"""``launcher = "inprocess"``: the whole job in one process, its roles on one event loop.

On one machine every FeedSample, EmbeddingLookup and PushGrad of a ``local`` job still goes
through HTTP/2 framing, protobuf codecs and a socket, and the four processes share the cores
with the kernel's scheduler between them. Here the ps, the hubs and the trainer are actors of
one event loop that pass their arrays to each other as they are (``sniper.transport``'s
in-process transport): no bytes are encoded, copied or sent. The store's kernels release the
GIL and run on the threads of one scheduler that every ps shares, and the dense model runs on
a worker thread whose BLAS releases the GIL too, so the cores still work in parallel (with the
``inline`` scheduler, though, a ps's kernels run on the loop and hold up every role). The hubs
read their data on the loop itself (``HubConfig.read_on_loop``): one thread fewer taking turns
at the GIL. A Parquet reader decodes its next window of batches on a thread of its own
beforehand (pyarrow releases the GIL), so the loop only slices batches out of it.

The shared scheduler has the threads the ps would have had between them: a batch's work is
rarely split evenly between ps (ps 0 of seed_ctr gets 1.7x the signs of ps 1), and a thread
per ps would leave one idle while the other's tasks queue. So each ps's scheduler metrics are
the process's.

``wire_dtype`` has nothing to narrow here (no wire), and the report has no per-ps CPU: the ps
share the process's CPU count with the trainer and hubs. ``metrics_port`` serves every role's
metrics, each on a port of its own, as the local launcher does.

What the job does is the same as ``local``'s (``sniper.cluster._job.run_job``): checkpoints,
resume, auto_shard and the report. What it cannot do is outlive a crash of one role: a role
that dies takes the process with it, so there is nothing to restart (``max_restarts`` is moot;
resume from the last checkpoint instead).

``sniper.testing.local_cluster`` serves its roles the same way (:func:`serve_in_process`), over
any transport, so a test's job is started as this launcher starts one.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
)
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup

from sniper._config import fields_of
from sniper._tasks import background
from sniper.cluster._abc import Attempt, Launch, Launcher
from sniper.cluster._checkpoint import JobCheckpoint
from sniper.cluster._config import TrainConfig
from sniper.cluster._job import hub_start, resumed_placement, run_job
from sniper.cluster._plan import TrainPlan
from sniper.cluster._preemption import Preemption
from sniper.monitoring import HubCollector, PsCollector, serve_metrics
from sniper.placement import Placement
from sniper.roles import HubConfig, HubRole, HubSettings, PsCluster, PsRole, PsSettings, TrainReport
from sniper.rpc import HubApi
from sniper.scheduler import open_scheduler
from sniper.transport import GrpcTransport, InProcessTransport, Transport

__all__ = [
    "InProcessLauncher",
    "InProcessRoles",
    "run_until_stopped",
    "serve_in_process",
    "train_in_process",
]

log = logging.getLogger("sniper.train")

T = TypeVar("T")


class InProcessLauncher(Launcher):
    """Every role an actor of this process's event loop (see the module doc)."""

    @contextmanager
    def start(self, launch: Launch) -> Iterator[Attempt]:
        if launch.ps or launch.hubs:
            raise ValueError(
                "launcher inprocess starts its own ps and hubs: drop --ps, --hub and "
                "--cluster-spec (or use launcher local)"
            )
        config = launch.config
        print(
            f"started {config.num_ps} ps and {config.num_hubs} hub(s) in this process", flush=True
        )
        yield Attempt(
            lambda: train_in_process(config, launch.plan, launch.resume, launch.preemption), None
        )


class InProcessRoles:
    """The roles of one job served in this process over one transport
    (:func:`serve_in_process`): what the in-process launcher and
    ``sniper.testing.local_cluster`` start their jobs with."""

    def __init__(self, transport: Transport, stack: AsyncExitStack, group: TaskGroup) -> None:
        self.transport = transport
        self.stack = stack
        """Closed when :func:`serve_in_process` ends, last in first out: servers, schedulers..."""
        self._group = group
        self.ps: list[PsRole] = []
        self.ps_addresses: list[str] = []
        self.hubs: list[HubRole] = []
        self.hub_clients: list[tuple[str, HubApi]] = []
        self._stops: list[anyio.CancelScope] = []

    async def enter(self, context: AbstractAsyncContextManager[T]) -> T:
        """Enter ``context`` (a scheduler, a metrics server...) for the job's life."""
        return await self.stack.enter_async_context(context)

    async def serve_ps(self, role: PsRole) -> str:
        """Serve ``role`` over the transport until the job ends; its address."""
        address = await self.enter(self.transport.serve(role, self._any_address()))
        self.ps.append(role)
        self.ps_addresses.append(address)
        return address

    def cluster(self, placement: Placement | None = None) -> PsCluster:
        """The served ps as a caller sees them: clients over the transport."""
        return PsCluster(
            [self.transport.ps_client(address) for address in self.ps_addresses], placement
        )

    async def serve_hub(self, hub: HubRole) -> tuple[str, HubApi]:
        """Serve ``hub`` and run its producer until the job ends; its address and a client."""
        address = await self.enter(self.transport.serve(hub, self._any_address()))
        self._stops.append(anyio.CancelScope())
        self._group.start_soon(run_until_stopped, hub, self._stops[-1])
        self.hubs.append(hub)
        client = self.transport.hub_client(address)
        self.stack.callback(getattr(client, "close", lambda: None))
        self.hub_clients.append((address, client))
        return address, client

    def _stop_hubs(self) -> None:
        for stop in self._stops:
            stop.cancel()
        for hub in self.hubs:
            hub.close()

    def _any_address(self) -> str:
        return "127.0.0.1:0" if isinstance(self.transport, GrpcTransport) else ""


@asynccontextmanager
async def serve_in_process(transport: Transport) -> AsyncIterator[InProcessRoles]:
    """An :class:`InProcessRoles` over ``transport``; on exit the hubs' producers stop, then
    every server, scheduler and client entered is closed, then the producers are awaited."""
    # The task group outside the exit stack: the roles' servers and mailboxes close first,
    # then the stopped hubs' tasks are awaited.
    async with background() as group, AsyncExitStack() as stack:
        roles = InProcessRoles(transport, stack, group)
        try:
            yield roles
        finally:
            roles._stop_hubs()


async def train_in_process(
    config: TrainConfig,
    plan: TrainPlan,
    resume: JobCheckpoint | None,
    preemption: Preemption | None = None,
) -> TrainReport:
    """Run the job with every role in this process; the report."""
    config = dataclasses.replace(config, launcher="inprocess").with_num_ps(resume)
    if config.wire_dtype != "float32":
        log.warning(
            "wire_dtype = %r does nothing with launcher inprocess: its roles pass float32 "
            "arrays without a wire",
            config.wire_dtype,
        )
    settings = _ps_settings(config)
    async with serve_in_process(InProcessTransport()) as roles:
        # One scheduler for every ps: as many threads as the ps would run between them, and
        # a ps with more of a batch's signs than another (with placement = "hash", ps 0 of
        # seed_ctr has 2.9x ps 1's) keeps all of them busy instead of one.
        workers = config.worker_threads(config.num_ps) * config.num_ps
        scheduler = await roles.enter(open_scheduler(config.scheduler, workers=workers))
        for index in range(config.num_ps):
            role = await settings.ps_role(scheduler)
            _serve_metrics(roles.stack, config, f"ps {index}", PsCollector(role))
            await roles.serve_ps(role)
        cluster = roles.cluster(resumed_placement(resume, config.num_ps))
        members = cluster.members

        async def connect_hubs() -> list[tuple[str, HubApi]]:
            for index in range(config.num_hubs):
                hub_config = _hub_config(config, index, resume, cluster.placement)
                hub_cluster = PsCluster(members, hub_config.start_placement(len(members)))
                # The trainer's error line says why a hub stopped: the hub's log would repeat it.
                hub = HubRole(config.open(), hub_cluster, hub_config, config, log_failure=False)
                _serve_metrics(roles.stack, config, f"hub {index}", HubCollector(hub))
                await roles.serve_hub(hub)
            return roles.hub_clients

        report = await run_job(config, plan, cluster, connect_hubs, resume, preemption)
        report.ps_cpu_seconds = []  # each ps would report the whole process's
        return report


def _serve_metrics(stack: AsyncExitStack, config: TrainConfig, role: str, collector: Any) -> None:
    """A role's Prometheus endpoint on a free port, for the job's life (``metrics_port``)."""
    if config.metrics_port < 0:
        return
    server = serve_metrics([collector], 0, config.metrics_host)
    stack.callback(server.close)
    print(f"metrics of {role} on {server.url}", flush=True)


def _ps_settings(config: TrainConfig) -> PsSettings:
    """Every ps's settings: the job's, saving under its checkpoint directory."""
    settings = PsSettings(**fields_of(config, PsSettings))
    job = config.job_directory()
    return dataclasses.replace(settings, checkpoint_root=str(job)) if job else settings


def _hub_config(
    config: TrainConfig, index: int, resume: JobCheckpoint | None, placement: Placement
) -> HubConfig:
    """Hub ``index``'s config: where it starts reading, and the job's placement, so that it
    feeds every variable to its ps from its first batch."""
    return HubConfig(
        **fields_of(config, HubSettings),
        hub_index=index,
        read_on_loop=True,
        **hub_start(resume, index, placement),
    )


async def run_until_stopped(hub: HubRole, stop: anyio.CancelScope) -> None:
    """Run a hub until ``stop`` is cancelled (the job is over): its producer ends quietly."""
    with stop:
        await hub.run()
