"""One training job over any transport: create the variables, then train.

``sniper train`` runs it over gRPC against ps and hub processes; ``sniper.testing.local_cluster``
runs it over the in-process transport on asyncio or trio. Both go through these two functions,
so what a test trains is what the command trains.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sniper.cluster._checkpoint import JobCheckpoint
from sniper.cluster._spec import TableSpec
from sniper.data import Reader
from sniper.roles._balance import AutoShard
from sniper.roles._cluster import PsCluster, gather
from sniper.roles._errors import RPC_ERRORS, describe_error
from sniper.roles._evaluate import DataEvaluator
from sniper.roles._trainer import Checkpointer, OpStats, Trainer, TrainerConfig, TrainReport
from sniper.rpc._api import HubApi, variable_request
from sniper.rpc._generated.sniper.v1 import CreateVariableRequest

__all__ = ["Watch", "create_variables", "drop_misplaced", "train"]

log = logging.getLogger("sniper.trainer")

Watch = Callable[[Trainer], AbstractContextManager[Any]]
"""Watches a trainer while it trains (``sniper train``'s progress display and metrics)."""


def variable_requests(
    tables: Mapping[str, TableSpec], seed: int
) -> dict[str, CreateVariableRequest]:
    """The CreateVariable request of every variable."""
    return {
        name: variable_request(
            name,
            table.dim,
            table.capacity,
            optimizer=table.optimizer,
            optimizer_params=table.params,
            initializer=table.initializer_args(),
            shards=table.shards,
            admission_min_count=table.min_count,
            eviction=table.eviction,
            seed=seed,
        )
        for name, table in tables.items()
    }


async def drop_misplaced(cluster: PsCluster, names: Sequence[str]) -> None:
    """Drop every copy of the job's variables held by a ps the placement does not name.

    A job resumed against ps that kept running may find a variable auto_shard moved after
    the checkpoint on its later owner too; left there, the stale copy would hold memory and
    be saved in the next checkpoint beside the restored one.
    """
    wanted = set(names)
    answers = await gather([member.stats for member in cluster.members])
    for index, answer in enumerate(answers):
        for variable in answer.variables:
            name = variable.name
            if name in wanted and cluster.placement.owner(name) != index:
                log.warning("ps %d held a stale copy of %s (moved since); dropped it", index, name)
                await cluster.members[index].drop_variable(name)


async def create_variables(cluster: PsCluster, tables: Mapping[str, TableSpec], seed: int) -> None:
    """Create every variable on the ps that owns it (again is fine: same configuration)."""
    for name, request in variable_requests(tables, seed).items():
        await cluster.owner(name).create_variable(request)


async def _add_ps_figures(cluster: PsCluster, report: TrainReport) -> None:
    """Each ps's latency of every call and stage, and its CPU seconds (left empty if a ps
    no longer answers: the report is still worth writing)."""
    try:
        answers = await gather([member.stats for member in cluster.members])
    except RPC_ERRORS as exc:
        log.warning("could not read the ps' own timings for the report: %s", describe_error(exc))
        return
    report.ps_ops = [
        {s.name: OpStats(s.count, s.p50_us, s.p95_us, s.p99_us, s.max_us) for s in a.latencies}
        for a in answers
    ]
    report.ps_cpu_seconds = [a.cpu_seconds for a in answers]


async def train(
    cluster: PsCluster,
    hubs: Sequence[tuple[str, HubApi]],
    tables: Mapping[str, TableSpec],
    dense_features: int,
    config: TrainerConfig,
    eval_reader: Reader | None = None,
    checkpointer: Checkpointer | None = None,
    resume: JobCheckpoint | None = None,
    watch: Watch | None = None,
) -> TrainReport:
    """Train on ``hubs``' batches until their data ends (or ``max_steps``); the report.

    With ``checkpointer``, the job is checkpointed every ``config.checkpoint_every`` steps;
    with ``resume``, the trainer continues from that checkpoint's model and counters (the ps
    and hubs must have been restored and positioned from it).
    """
    evaluator = DataEvaluator(eval_reader, cluster, list(tables)) if eval_reader else None
    balancer = None
    if config.auto_shard and len(cluster.members) > 1:
        balancer = AutoShard(
            cluster,
            [hub for _, hub in hubs],
            variable_requests(tables, config.seed),
            ratio=config.auto_shard_ratio,
            window=config.auto_shard_window,
            max_moves=config.auto_shard_max_moves,
        )
    trainer = Trainer(
        hubs,
        cluster,
        {name: table.dim for name, table in tables.items()},
        dense_features,
        config,
        evaluator,
        checkpointer,
        balancer,
    )
    if resume is not None:
        trainer.resume_from(resume.trainer)
        trainer.positions.update(resume.positions)
    if balancer is not None:
        await balancer.start()
    with watch(trainer) if watch is not None else contextlib.nullcontext():
        report = await trainer.run()
    report.placement_version = cluster.placement.version
    await _add_ps_figures(cluster, report)
    trainer.log_op_statistics()
    return report
