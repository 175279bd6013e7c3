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
from sniper.roles._cluster import PsCluster, gather
from sniper.roles._errors import RPC_ERRORS, describe_error
from sniper.roles._evaluate import DataEvaluator
from sniper.roles._trainer import Checkpointer, OpStats, Trainer, TrainerConfig, TrainReport
from sniper.rpc._api import HubApi, variable_request

__all__ = ["Watch", "create_variables", "train"]

log = logging.getLogger("sniper.trainer")

Watch = Callable[[Trainer], AbstractContextManager[Any]]
"""Watches a trainer while it trains (``sniper train``'s progress display and metrics)."""


async def create_variables(cluster: PsCluster, tables: Mapping[str, TableSpec], seed: int) -> None:
    """Create every variable on the ps that owns it (again is fine: same configuration)."""
    for name, table in tables.items():
        await cluster.owner(name).create_variable(
            variable_request(
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
        )


async def _ps_timings(cluster: PsCluster) -> list[dict[str, OpStats]]:
    """Each ps's latency of every call and stage (empty if a ps no longer answers: the
    report is still worth writing)."""
    try:
        answers = await gather([member.stats for member in cluster.members])
    except RPC_ERRORS as exc:
        log.warning("could not read the ps' own timings for the report: %s", describe_error(exc))
        return []
    return [
        {s.name: OpStats(s.count, s.p50_us, s.p95_us, s.p99_us, s.max_us) for s in a.latencies}
        for a in answers
    ]


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
    trainer = Trainer(
        hubs,
        cluster,
        {name: table.dim for name, table in tables.items()},
        dense_features,
        config,
        evaluator,
        checkpointer,
    )
    if resume is not None:
        trainer.resume_from(resume.trainer)
        trainer.positions.update(resume.positions)
    with watch(trainer) if watch is not None else contextlib.nullcontext():
        report = await trainer.run()
    report.ps_ops = await _ps_timings(cluster)
    trainer.log_op_statistics()
    return report
