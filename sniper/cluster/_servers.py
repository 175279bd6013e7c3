"""The ps and hubs of a job as gRPC servers: their configs, and the job run against them.

The ``local`` and ``ray`` launchers start ``sniper serve``'s servers (processes, Ray actors)
from one :class:`~sniper.cluster.ServeConfig` each, built here from the job's config, and run
the job over gRPC at the addresses they report (:func:`train_over_grpc`); ``sniper eval``
starts its ps the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sniper._config import fields_of
from sniper.cluster._checkpoint import JobCheckpoint
from sniper.cluster._config import TrainConfig
from sniper.cluster._job import hub_start, resumed_placement, run_job
from sniper.cluster._plan import TrainPlan
from sniper.cluster._preemption import Preemption
from sniper.cluster._serve import ServeConfig
from sniper.data import DataSource
from sniper.roles import HubSettings, PsCluster, PsSettings, RankMaster, Ranks, TrainReport
from sniper.rpc import HubApi, HubClient, Placement, PsClient, Security

__all__ = ["hub_configs", "ps_cluster", "server_config", "train_over_grpc"]


def server_config(config: TrainConfig, role: str, **extra: Any) -> ServeConfig:
    """A server's config from the job's: the data and ps keys as they are, on a free port,
    stopping with the launcher."""
    return ServeConfig(
        **fields_of(config, DataSource)
        | fields_of(config, HubSettings)
        | fields_of(config, PsSettings)
        | {"role": role, "port": 0, "exit_on_stdin_eof": True}
        | {"workers": config.worker_threads(config.num_ps)}
        | ({"checkpoint_root": str(job)} if (job := config.job_directory()) else {})
        | {"metrics_port": 0 if config.metrics_port >= 0 else -1}
        | extra
    )


def hub_configs(
    config: TrainConfig,
    ps: list[tuple[str, int]],
    resume: JobCheckpoint | None,
    placement: Placement,
) -> list[ServeConfig]:
    """The config of each hub the job starts: its place in the data, and the job's placement,
    so that it feeds every variable to its ps from its first batch."""
    return [
        server_config(
            config,
            "hub",
            ps=",".join(f"{host}:{port}" for host, port in ps),
            hub_index=index,
            **hub_start(resume, index, placement),
        )
        for index in range(config.num_hubs)
    ]


def ps_cluster(
    config: TrainConfig, ps: list[tuple[str, int]], placement: Placement | None
) -> PsCluster:
    """Clients of the ps at these addresses as one cluster (``placement`` None: by hash)."""
    security = Security.of(config)
    return PsCluster(
        [
            PsClient(
                host,
                port,
                timeout=config.rpc_timeout,
                security=security,
                wire_dtype=config.wire_dtype,
            )
            for host, port in ps
        ],
        placement,
    )


async def train_over_grpc(
    config: TrainConfig,
    plan: TrainPlan,
    ps: list[tuple[str, int]],
    hubs: list[tuple[str, int]] | None,
    start_hubs: Callable[[Placement], list[tuple[str, int]]],
    resume: JobCheckpoint | None,
    preemption: Preemption | None = None,
    master: RankMaster | None = None,
) -> TrainReport:
    """The job over gRPC, against ps (and hubs) at these addresses; with ``master``, as rank
    0 of ``num_trainers``, whose other ranks join at ``master`` (``sniper.cluster._rank``)."""
    security = Security.of(config)
    cluster = ps_cluster(config, ps, resumed_placement(resume, len(ps)))
    clients: list[HubClient] = []
    addresses: list[tuple[str, int]] = []

    async def connect_hubs() -> list[tuple[str, HubApi]]:
        addresses.extend(hubs if hubs is not None else start_hubs(cluster.placement))
        clients.extend(HubClient(host, port, security=security) for host, port in addresses)
        return [(client.address, client) for client in clients]

    def join_ranks() -> Ranks:
        """Rank 0 joins the others (once they all have), and tells them where the job's
        servers are, its placement, and the checkpoint it resumes."""
        assert master is not None
        ranks = Ranks(
            0,
            config.num_trainers,
            master,
            config.collective_timeout,
            sync=config.sync,
            sync_every=config.sync_every,
        )
        try:
            ranks.broadcast(
                {
                    "ps": ps,
                    "hubs": addresses,
                    "placement": cluster.placement.to_dict(),
                    "trainer": resume.trainer if resume is not None else None,
                }
            )
        except BaseException:
            ranks.close()
            raise
        return ranks

    try:
        return await run_job(
            config,
            plan,
            cluster,
            connect_hubs,
            resume,
            preemption,
            join_ranks if master is not None else None,
        )
    finally:
        for client in clients:
            client.close()
        cluster.close()
