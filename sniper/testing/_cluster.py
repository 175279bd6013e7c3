"""An in-process job (:func:`local_cluster`) and a ps on loopback gRPC (:func:`running_ps`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sniper.cluster import TableSpec, create_variables, serve_in_process, train
from sniper.data import Reader
from sniper.models import DenseModel
from sniper.roles import (
    HubConfig,
    HubRole,
    PsCluster,
    PsEngine,
    PsRole,
    PsRoleConfig,
    TrainerConfig,
    TrainReport,
)
from sniper.rpc import HubApi, PsClient
from sniper.scheduler import open_scheduler
from sniper.transport import GrpcSettings, GrpcTransport, Transport, open_transport

__all__ = ["LocalCluster", "local_cluster", "running_ps"]


@asynccontextmanager
async def running_ps(
    scheduler: str = "thread_pool",
    workers: int = 2,
    config: PsRoleConfig | None = None,
    max_message_bytes: int = 64 * 2**20,
) -> AsyncIterator[tuple[PsRole, PsClient]]:
    """A ps on ``127.0.0.1:<free port>`` and a client connected to it; both closed on exit."""
    async with open_scheduler(scheduler, workers=workers) as sched:
        role = PsRole(PsEngine(sched), config)
        transport = GrpcTransport(GrpcSettings(max_message_mb=max_message_bytes / 2**20))
        async with transport.serve(role, "127.0.0.1:0") as address:
            host, _, port = address.rpartition(":")
            client = PsClient(host, int(port), timeout=30.0, retries=0)
            try:
                yield role, client
            finally:
                client.close()


@dataclass
class LocalCluster:
    """A running job of :func:`local_cluster`: its roles, and clients over its transport."""

    transport: Transport
    ps: list[PsRole]
    hubs: list[HubRole]
    cluster: PsCluster
    """The ps as the trainer sees them: clients over the transport."""
    hub_clients: list[tuple[str, HubApi]]
    tables: dict[str, TableSpec]
    dense_features: int
    labels: tuple[str, ...] = ("label",)
    """The data's label names (what the model is built to predict)."""

    async def train(
        self,
        config: TrainerConfig | None = None,
        eval_reader: Reader | None = None,
        model: DenseModel | None = None,
    ) -> TrainReport:
        """Create the variables, start the hubs' data, and train ``model`` (default: the
        numpy MLP of ``config``) until it ends."""
        return await train(
            self.cluster,
            self.hub_clients,
            self.tables,
            self.dense_features,
            config or TrainerConfig(progress=False),
            eval_reader,
            model=model,
            labels=self.labels,
        )


@asynccontextmanager
async def local_cluster(
    reader: Reader,
    tables: Mapping[str, TableSpec],
    dense_features: int,
    *,
    num_ps: int = 2,
    num_hubs: int = 1,
    epochs: int = 1,
    transport: str = "inprocess",
    scheduler: str = "thread_pool",
    workers: int = 2,
    seed: int = 0,
) -> AsyncIterator[LocalCluster]:
    """A whole job in this process; every role stopped on exit.

    ``tables`` sizes each variable of ``reader`` (``sniper.cluster.ModelSpec.resolve`` makes
    them from a config). The variables are created before the hubs start reading. The roles
    are served as the in-process launcher serves them (``sniper.cluster._inprocess``), over
    the transport named, each ps with a scheduler of its own.
    """
    async with serve_in_process(open_transport(transport)) as roles:
        schedulers = [
            await roles.enter(open_scheduler(scheduler, workers=workers)) for _ in range(num_ps)
        ]
        for sched in schedulers:
            await roles.serve_ps(PsRole(PsEngine(sched)))
        cluster = roles.cluster()
        roles.stack.callback(cluster.close)
        await create_variables(cluster, tables, seed)
        for index in range(num_hubs):
            # Each hub its own view of the ps (the same clients): a hub switches placement
            # on its own, as a hub process does.
            view = PsCluster(cluster.members)
            config = HubConfig(hub_index=index, num_hubs=num_hubs, epochs=epochs)
            await roles.serve_hub(HubRole(reader, view, config))
        yield LocalCluster(
            roles.transport,
            roles.ps,
            roles.hubs,
            cluster,
            roles.hub_clients,
            dict(tables),
            dense_features,
            reader.label_names,
        )
