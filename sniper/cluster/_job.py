"""One training job over any transport: restore or place, create the variables, then train.

``sniper train`` runs it (:func:`run_job`) on whatever its launcher started: ps and hub
processes over gRPC, Ray actors, or roles of its own process; ``sniper.testing.local_cluster``
runs :func:`create_variables` and :func:`train` over the in-process transport on asyncio or
trio. Every launcher goes through these functions, so what a test trains is what the command
trains.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import shutil
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypedDict

import anyio

from sniper.cluster._checkpoint import JobCheckpoint, save_job
from sniper.cluster._config import TrainConfig
from sniper.cluster._plan import TrainPlan, recorded_capacity
from sniper.cluster._preemption import Preemption
from sniper.cluster._progress import show_progress, trainer_metrics
from sniper.cluster._reshard import reshard
from sniper.cluster._resume import job_config
from sniper.cluster._spec import TableSpec, model_inputs
from sniper.data import Reader
from sniper.models import DenseModel, ModelConfig
from sniper.roles import (
    RPC_ERRORS,
    AutoShard,
    Checkpointer,
    CorruptCheckpointError,
    DataEvaluator,
    PsCluster,
    Ranks,
    Trainer,
    TrainerConfig,
    TrainingError,
    TrainReport,
    data_served,
    describe_error,
    gather,
)
from sniper.rpc import DataServed, HubApi, Placement, VariableConfig

__all__ = [
    "HubConnector",
    "HubStart",
    "Watch",
    "create_variables",
    "drop_misplaced",
    "hub_start",
    "restore_ps",
    "resumed_placement",
    "run_job",
    "train",
]

log = logging.getLogger("sniper.trainer")
job_log = logging.getLogger("sniper.train")
"""The job's own lines (restores, reshards) under ``sniper train``'s name."""

Watch = Callable[[Trainer], AbstractContextManager[Any]]
"""Watches a trainer while it trains (``sniper train``'s progress display and metrics)."""


def variable_configs(tables: Mapping[str, TableSpec], seed: int) -> dict[str, VariableConfig]:
    """The configuration every variable is created with."""
    return {
        name: VariableConfig(
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
            pooling=table.pooling,
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


async def grow_tables(
    cluster: PsCluster, tables: Mapping[str, TableSpec], resume: JobCheckpoint, seed: int
) -> None:
    """Each restored table that ``tables`` size larger than the checkpoint did, made that
    large on its ps: its rows exported, the table dropped, and the rows imported into one of
    the new size (by sign: where a row lands depends on the table's size). The checkpoint on
    disk is untouched, so a failure part way loses nothing: a restart restores it again."""
    recorded = resume.config.get("variables") or {}
    configs = variable_configs(tables, seed)
    for name, table in tables.items():
        before = recorded_capacity(recorded, name)
        if before is None or table.capacity <= before:
            continue
        owner = cluster.owner(name)
        moved = await owner.export_variable(name)
        await owner.drop_variable(name)
        await owner.import_variable(dataclasses.replace(moved, config=configs[name]))
        job_log.info("variables.%s grew from %d to %d rows", name, before, table.capacity)


async def create_variables(cluster: PsCluster, tables: Mapping[str, TableSpec], seed: int) -> None:
    """Create every variable on the ps that owns it (again is fine: same configuration)."""
    for name, config in variable_configs(tables, seed).items():
        await cluster.owner(name).create_variable(config)


async def _add_ps_figures(cluster: PsCluster, report: TrainReport) -> None:
    """Each ps's latency of every call and stage, its CPU seconds and its tables that evicted
    (left empty if a ps no longer answers: the report is still worth writing)."""
    try:
        answers = await gather([member.stats for member in cluster.members])
    except RPC_ERRORS as exc:
        log.warning("could not read the ps' own timings for the report: %s", describe_error(exc))
        return
    report.ps_ops = [dict(a.latencies) for a in answers]
    report.ps_cpu_seconds = [a.cpu_seconds for a in answers]
    report.evicted = {
        table.name: [table.capacity, table.evictions]
        for answer in answers
        for table in answer.variables
        if table.evictions
    }


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
    model: DenseModel | None = None,
    model_config: ModelConfig | None = None,
    labels: Sequence[str] = ("label",),
    ranks: Ranks | None = None,
    expected_data: DataServed | None = None,
) -> TrainReport:
    """Train on ``hubs``' batches until their data ends (or ``max_steps``); the report.
    ``expected_data``: the data the job is configured for, which each hub must say it serves.

    With ``checkpointer``, the job is checkpointed at its end and every
    ``config.checkpoint_every`` steps (0: only at its end); with ``resume``, the trainer
    continues from that checkpoint's model and counters (the ps and hubs must have been
    restored and positioned from it). ``model`` (built by ``model_config``) is the dense model
    to train, for the data's ``labels``; None: the numpy MLP of ``config``. With ``ranks``,
    this is rank 0 of several: it trains on its own hubs of ``hubs`` (hub ``h`` is rank
    ``h % size``'s), and checkpoints, scores and reports for them all.
    """
    regression = model.inputs.regression if model is not None else ()
    evaluator = (
        DataEvaluator(eval_reader, cluster, list(tables), regression) if eval_reader else None
    )
    balancer = None
    if config.auto_shard and len(cluster.members) > 1:
        balancer = AutoShard(
            cluster,
            [hub for _, hub in hubs],
            variable_configs(tables, config.seed),
            ratio=config.auto_shard_ratio,
            window=config.auto_shard_window,
            max_moves=config.auto_shard_max_moves,
        )
    inputs = model_inputs(tables, dense_features, tuple(labels))
    own = list(hubs) if ranks is None else list(hubs)[ranks.rank :: ranks.size]
    trainer = Trainer(
        own,
        cluster,
        inputs.dims,
        dense_features,
        config,
        evaluator,
        checkpointer,
        balancer,
        model,
        model_config,
        labels,
        sequences=inputs.sequences,
        ranks=ranks,
        num_hubs=len(hubs),
    )
    trainer.reader.expected = expected_data
    if resume is not None:
        trainer.resume_from(resume.trainer)
        trainer.positions.update(resume.positions)
    if balancer is not None:
        with _failing_as("starting auto_shard"):
            await balancer.start()
    with watch(trainer) if watch is not None else contextlib.nullcontext():
        report = await trainer.run()
    report.placement_version = cluster.placement.version
    await _add_ps_figures(cluster, report)
    trainer.log_op_statistics()
    return report


HubConnector = Callable[[], Awaitable[list[tuple[str, HubApi]]]]
"""Starts (or reaches) the job's hubs once the variables exist: their addresses and clients."""


async def run_job(
    config: TrainConfig,
    plan: TrainPlan,
    cluster: PsCluster,
    connect_hubs: HubConnector,
    resume: JobCheckpoint | None,
    preemption: Preemption | None = None,
    join_ranks: Callable[[], Ranks] | None = None,
) -> TrainReport:
    """The job on ps already running, whatever carries the calls: restore them (resuming),
    create the variables, start the hubs, then train with checkpoints and progress; while it
    trains with checkpoints, ``preemption`` reaches its trainer. ``join_ranks`` (blocking:
    it waits for the other ranks): this trainer is rank 0 of the ranks it joins, once the
    job's servers are ready.

    A ps or hub that fails a call before training is a :class:`TrainingError` naming what
    the job was doing, as it is during training."""
    with _failing_as("restoring the ps" if resume is not None else "placing the variables"):
        if resume is not None:
            await restore_ps(cluster, resume, config.job_directory())
            await grow_tables(cluster, plan.tables, resume, config.seed)
        elif config.placement == "balanced":
            await cluster.switch(plan.placement(len(cluster.members)))
    with _failing_as("creating the variables"):
        await drop_misplaced(cluster, list(plan.tables))
        await create_variables(cluster, plan.tables, config.seed)
    hubs = await connect_hubs()
    if cluster.placement.version:
        # The hubs this job started have the placement already (their config); hubs started
        # by hand (--hub) feed by hashing until now: a feed to a moved variable's hashed ps
        # answers NOT_FOUND and is retried, by this placement once the hub has it.
        with _failing_as("giving the hubs the placement"):
            await gather([functools.partial(h.set_placement, cluster.placement) for _, h in hubs])
    job = config.job_directory()
    recorded = job_config(config, plan)

    async def checkpoint(trainer: Trainer, report: TrainReport) -> None:
        assert job is not None
        await save_job(job, cluster, trainer, report, keep=config.keep_checkpoints, config=recorded)

    @contextlib.contextmanager
    def watch(trainer: Trainer) -> Iterator[None]:
        with trainer_metrics(trainer, config.metrics_port, config.metrics_host) as url:
            if url is not None:
                print(f"metrics of the trainer on {url}", flush=True)
            with show_progress(trainer, quiet=not config.progress, interval=config.stats_interval):
                if preemption is None or job is None:
                    yield
                else:
                    with preemption.attached(trainer):
                        yield

    ranks = await anyio.to_thread.run_sync(join_ranks) if join_ranks is not None else None
    try:
        return await train(
            cluster,
            hubs,
            plan.tables,
            plan.data.dense_features,
            config.trainer(),
            plan.eval_reader,
            checkpoint if job is not None else None,
            resume,
            watch,
            plan.model(),
            plan.model_config,
            plan.data.labels,
            ranks,
            data_served(config, list(plan.tables), plan.data.dense_features),
        )
    finally:
        if ranks is not None:
            ranks.close()


@contextlib.contextmanager
def _failing_as(what: str) -> Iterator[None]:
    """A failed call to a ps or hub while doing ``what``, as :class:`TrainingError`."""
    try:
        yield
    except RPC_ERRORS as exc:
        raise TrainingError(f"{what} failed: {describe_error(exc)}") from exc


def resumed_placement(resume: JobCheckpoint | None, num_ps: int) -> Placement | None:
    """The checkpoint's placement, if it has one for this many ps (resharding to another
    number of ps regroups variables by name hash)."""
    if resume is None or resume.placement is None or resume.placement.num_ps != num_ps:
        return None
    return resume.placement


async def restore_ps(cluster: PsCluster, resume: JobCheckpoint, root: Path | None) -> None:
    """Every ps restored from the checkpoint; resharded first when the number of ps changed."""
    assert root is not None
    sources = [resume.ps_directory(i) for i in range(resume.num_ps)]
    count = len(cluster.members)
    if count == resume.num_ps:
        targets = sources
    else:
        base = root / f".reshard-{resume.directory.name}-{count}"
        targets = [base / f"ps-{j}" for j in range(count)]
        await anyio.to_thread.run_sync(reshard, sources, targets)
        job_log.info("resharded the checkpoint of %d ps for %d ps", resume.num_ps, count)
    for index, (member, target) in enumerate(zip(cluster.members, targets, strict=True)):
        done = await member.restore(str(target.relative_to(root)))
        if targets is sources and done.manifest_sha256 != resume.ps_manifests[index]:
            raise CorruptCheckpointError(
                f"job checkpoint {resume.directory}: ps {index} restored a part whose manifest "
                "is not the one it saved (another job's, or a stale copy, under its "
                "checkpoint_root); give each ps the checkpoint_root it saved under"
            )
    if targets is not sources:
        await anyio.to_thread.run_sync(shutil.rmtree, targets[0].parent)
    job_log.info("restored every ps from %s (step %d)", resume.directory, resume.step)


class HubStart(TypedDict):
    """Where a hub starts reading and the placement it feeds by (ServeConfig and HubConfig keys)."""

    start_epoch: int
    start_index: int
    placement_owners: dict[str, int]
    placement_version: int


def hub_start(resume: JobCheckpoint | None, hub: int, placement: Placement) -> HubStart:
    """How hub ``hub`` starts, whatever runs it: reading after what the checkpoint trained,
    and feeding by the job's placement from its first batch."""
    epoch, index = resume.start_of(hub) if resume is not None else (0, 0)
    return {
        "start_epoch": epoch,
        "start_index": index,
        "placement_owners": dict(placement.owners),
        "placement_version": placement.version,
    }
