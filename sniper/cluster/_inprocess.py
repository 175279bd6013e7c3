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

What the job does is the same as ``local``'s (``sniper.cluster._train._run_job``): checkpoints,
resume, auto_shard and the report. What it cannot do is outlive a crash of one role: a role
that dies takes the process with it, so there is nothing to restart (``max_restarts`` is moot;
resume from the last checkpoint instead).
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AsyncExitStack
from typing import Any

import anyio

from sniper._config import fields_of
from sniper._tasks import background
from sniper.cluster._checkpoint import JobCheckpoint
from sniper.cluster._train import (
    TrainConfig,
    TrainPlan,
    _hub_start,
    _resumed_placement,
    _run_job,
)
from sniper.monitoring import HubCollector, PsCollector, serve_metrics
from sniper.placement import Placement
from sniper.roles import HubConfig, HubRole, HubSettings, PsCluster, PsSettings, TrainReport
from sniper.rpc import HubApi
from sniper.scheduler import open_scheduler
from sniper.transport import InProcessTransport

__all__ = ["run_until_stopped", "train_in_process"]

log = logging.getLogger("sniper.train")


async def train_in_process(
    config: TrainConfig, plan: TrainPlan, resume: JobCheckpoint | None
) -> TrainReport:
    """Run the job with every role in this process; the report."""
    config = dataclasses.replace(config, launcher="inprocess").with_num_ps(resume)
    if config.wire_dtype != "float32":
        log.warning(
            "wire_dtype = %r does nothing with launcher inprocess: its roles pass float32 "
            "arrays without a wire",
            config.wire_dtype,
        )
    transport = InProcessTransport()
    settings = _ps_settings(config)
    stops: list[anyio.CancelScope] = []
    hubs: list[HubRole] = []
    # The task group outside the exit stack: the roles' mailboxes close first, then the
    # stopped hubs' tasks are awaited.
    async with background() as group, AsyncExitStack() as stack:
        # One scheduler for every ps: as many threads as the ps would run between them, and
        # a ps with more of a batch's signs than another (with placement = "hash", ps 0 of
        # seed_ctr has 2.9x ps 1's) keeps all of them busy instead of one.
        workers = config.worker_threads(config.num_ps) * config.num_ps
        scheduler = await stack.enter_async_context(
            open_scheduler(config.scheduler, workers=workers)
        )
        addresses: list[str] = []
        for _ in range(config.num_ps):
            role = await settings.ps_role(scheduler)
            _serve_metrics(stack, config, f"ps {len(addresses)}", PsCollector(role))
            addresses.append(await stack.enter_async_context(transport.serve(role, "")))
        members = [transport.ps_client(address) for address in addresses]
        cluster = PsCluster(members, _resumed_placement(resume, len(members)))

        async def connect_hubs() -> list[tuple[str, HubApi]]:
            clients: list[tuple[str, HubApi]] = []
            for index in range(config.num_hubs):
                hub_config = _hub_config(config, index, resume, cluster.placement)
                hub_cluster = PsCluster(members, hub_config.start_placement(len(members)))
                hub = HubRole(config.open(), hub_cluster, hub_config)
                _serve_metrics(stack, config, f"hub {index}", HubCollector(hub))
                address = await stack.enter_async_context(transport.serve(hub, ""))
                stops.append(anyio.CancelScope())
                group.start_soon(run_until_stopped, hub, stops[-1])
                hubs.append(hub)
                clients.append((address, transport.hub_client(address)))
            return clients

        try:
            report = await _run_job(config, plan, cluster, connect_hubs, resume)
            report.ps_cpu_seconds = []  # each ps would report the whole process's
            return report
        finally:
            for stop in stops:
                stop.cancel()
            for hub in hubs:
                hub.close()


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
        **_hub_start(resume, index, placement),
    )


async def run_until_stopped(hub: HubRole, stop: anyio.CancelScope) -> None:
    """Run a hub until ``stop`` is cancelled (the job is over): its producer ends quietly."""
    with stop:
        await hub.run()
