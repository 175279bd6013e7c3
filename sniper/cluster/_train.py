"""``sniper train``: a local cluster (N ps, M hubs, the trainer), trained end to end.

With no arguments it trains the embedded default. ``--config`` takes a TOML file of the same
keys as :class:`TrainConfig` (see ``experiments/configs/``); ``--ps`` and ``--hub`` use servers
started elsewhere instead of starting them.

Order of a local run: read the data's shape (variables, dense features, the first batch) and
resolve the ``[variables]`` model spec against it, so that a config that does not fit the data
fails before any process starts; start the ps processes; create every variable on its owner
(the ``placement`` key: balanced by default, or ``ps_for_variable``); start the hub processes,
which begin feeding; run the trainer (scoring ``eval_data`` as it goes); print the report and
write it as JSON; stop every process. The stop happens on every exit path (end of data, an
error, Ctrl-C), so no server outlives the command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

import anyio

from sniper._config import check_at_least, fields_of, load_config
from sniper._table import print_table
from sniper.cluster._checkpoint import LATEST, JobCheckpoint, load_job, save_job
from sniper.cluster._data import check_same_schema, probe_data
from sniper.cluster._job import create_variables, drop_misplaced, train
from sniper.cluster._process import ServerProcess, serve_config_command, server_process
from sniper.cluster._progress import show_progress, trainer_metrics
from sniper.cluster._ray import check_resources
from sniper.cluster._reshard import reshard
from sniper.cluster._spec import DataShape, ModelSpec, TableSpec
from sniper.data import DataSource, Reader
from sniper.data._source import check_data_value
from sniper.data._workload import Workload, load_workload
from sniper.placement import Placement
from sniper.roles import (
    HubSettings,
    OpStats,
    PsCluster,
    PsSettings,
    Trainer,
    TrainerConfig,
    TrainingError,
    TrainReport,
)
from sniper.roles._checkpoint import CorruptCheckpointError
from sniper.roles._cluster import gather
from sniper.rpc import HubApi, HubClient, PsClient
from sniper.runtime import log_to_stderr
from sniper.transport._grpc import split_address
from sniper.transport._serve import ServeConfig, parse_addresses

__all__ = ["TrainConfig", "TrainPlan", "load_train_config", "plan_training", "run_train"]

log = logging.getLogger("sniper.train")


@dataclass(frozen=True)
class TrainConfig(DataSource, HubSettings, PsSettings, TrainerConfig):
    """One training run. Every field is a TOML key; the defaults are ``make demo``'s run.

    The data keys are :class:`~sniper.data.DataSource`'s, the hub keys
    :class:`~sniper.roles.HubSettings`', the ps keys
    :class:`~sniper.roles.PsSettings`' and the trainer's :class:`~sniper.roles.TrainerConfig`'s:
    each declared and checked once, and handed to the hub, ps and trainer as they are.
    """

    eval_data: str = ""
    """Held-out ``criteo:PATH`` or ``parquet:PATH`` scored at the end of training ("": none)."""
    num_ps: int = 0
    """How many ps hold the variables. 0 (the default): the resumed checkpoint's number, else
    1 for a job in one process (``launcher = "inprocess"``) and 2 for ps of their own. In one
    process the ps share one event loop and one scheduler, so a second ps adds a call to each
    fan-out and no parallelism (criteo ran 8-15% faster on one; docs/benchmarks.md); set
    ``num_ps = 2`` to split the variables there as they would be across machines."""
    variables: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """The model spec: ``[variables.default]`` and ``[variables.NAME]`` tables of
    :class:`~sniper.cluster.TableSpec` keys (dim, capacity, shards, optimizer, params,
    initializer, init, min_count, eviction). The variables themselves come from the data."""
    output: str = "train_report.json"
    checkpoint_dir: str = ""
    """Checkpoint the job here every ``checkpoint_every`` steps ("": no checkpoints)."""
    keep_checkpoints: int = 3
    """Complete checkpoints kept; older ones are removed."""
    max_restarts: int = 3
    """When a ps or hub this command started dies, restart every process and resume from the
    latest checkpoint, at most this many times (needs ``checkpoint_dir``)."""
    resume: str = ""
    """Continue from this job checkpoint: a ``checkpoint_dir`` (its latest step) or one of its
    ``step-N`` directories; checkpoints then go on in that directory."""
    placement: Literal["balanced", "hash"] = "balanced"
    """Which ps holds each variable when a job starts afresh: ``balanced`` spreads the
    variables' signs per batch (then their rows) evenly over the ps
    (:meth:`~sniper.rpc.Placement.balanced`); ``hash`` puts each on
    ``ps_for_variable(name, num_ps)``, as the seed system did, which evens out their number
    but not their work (on seed_ctr one of 2 ps gets 74% of the signs). Balancing signs can
    leave one ps more rows than hashing would (seed_ctr: 66% against 57% of 2 ps' rows): a ps
    near its ``max_table_gb`` may need ``hash``. A resumed job keeps its checkpoint's placement
    either way; one resumed on another number of ps regroups its variables by hash (then
    auto_shard may move them). auto_shard moves variables from either start."""
    launcher: Literal["auto", "local", "inprocess", "ray"] = "auto"
    """Where the ps and hubs run: actors of this process passing arrays without encoding them
    (``inprocess``: ``sniper.cluster._inprocess``), processes on this machine or servers named
    by ``--ps``/``--hub``/``--cluster-spec``, over gRPC (``local``), or Ray actors placed on a
    Ray cluster (``ray``: ``sniper[ray]``, ``sniper.cluster._ray``). ``auto`` (the default):
    ``local`` when servers are named, else ``inprocess``: a job on one machine does not pay
    for a network it does not cross. ``local`` isolates each role in a process of its own,
    and restarts them from the last checkpoint when one dies (``max_restarts``)."""
    ray_address: str = ""
    """The Ray cluster to use ("": start a local Ray; "auto": the one this machine is in)."""
    ray_strategy: Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"] = "SPREAD"
    """How the ps (and, apart, the hubs) are placed on Ray's nodes."""
    resources: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    """What each ps and hub asks of Ray: ``[resources.ps] num_cpus = 2`` (default 0.5 for a
    ps, 0.25 for a hub), ``memory`` (bytes), ``num_gpus``, or a custom resource such as a node
    label (``ps_node = 1``)."""

    def with_num_ps(self, resume: JobCheckpoint | None) -> TrainConfig:
        """This config with ``num_ps = 0`` replaced by the number it stands for (see
        :attr:`num_ps`), for its launcher ("auto" counts as ps of their own)."""
        if self.num_ps:
            return self
        if resume is not None:
            return dataclasses.replace(self, num_ps=resume.num_ps)
        return dataclasses.replace(self, num_ps=1 if self.launcher == "inprocess" else 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_at_least(self, 1, "keep_checkpoints")
        check_at_least(self, 0, "num_ps", "max_restarts")
        if self.checkpoint_every and not self.job_directory():
            raise ValueError("checkpoint_every needs checkpoint_dir (or resume)")
        if self.resume and self.checkpoint_dir:
            raise ValueError(
                "give checkpoint_dir or resume, not both: a resumed job checkpoints where it "
                "resumed from"
            )
        if self.eval_data:
            check_data_value("eval_data", self.eval_data, synthetic=False)
        elif self.eval_every_steps:
            raise ValueError("eval_every_steps needs eval_data (criteo:PATH or parquet:PATH)")
        if self.placement not in ("balanced", "hash"):
            raise ValueError(f"placement must be 'balanced' or 'hash', got {self.placement!r}")
        if self.launcher not in ("auto", "local", "inprocess", "ray"):
            raise ValueError(
                f"launcher must be 'auto', 'local', 'inprocess' or 'ray', got {self.launcher!r}"
            )
        if self.ray_strategy not in ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"):
            raise ValueError(
                "ray_strategy must be SPREAD, PACK, STRICT_SPREAD or STRICT_PACK, "
                f"got {self.ray_strategy!r}"
            )
        check_resources(self.resources)
        self.model_spec()  # every [variables] key, named when wrong
        if not Path(self.output).resolve().parent.is_dir():
            raise ValueError(f"output {self.output!r}: its directory does not exist")

    def job_directory(self) -> Path | None:
        """Where this job's checkpoints go (the ps's checkpoint_root), if anywhere."""
        if self.checkpoint_dir:
            return Path(self.checkpoint_dir).resolve()
        if self.resume:
            path = Path(self.resume).resolve()
            return path.parent if path.name.startswith("step-") else path
        return None

    def trainer(self) -> TrainerConfig:
        """The trainer's part of this config."""
        return TrainerConfig(**fields_of(self, TrainerConfig))

    def model_spec(self, default_dim: int = 16) -> ModelSpec:
        """``[variables]`` parsed; ``default_dim`` is the width it does not set."""
        return ModelSpec.parse(self.variables, default_dim=default_dim)


def load_train_config(path: Path | None, overrides: dict[str, Any]) -> TrainConfig:
    """Defaults, then the TOML file, then non-None overrides; errors name the key."""
    return load_config(TrainConfig, path, overrides)


@dataclass(frozen=True)
class TrainPlan:
    """What a run will build, resolved before any process starts."""

    data: DataShape
    tables: dict[str, TableSpec]
    """Every variable of the data with its sized table, in the data's order."""
    eval_reader: Reader | None

    def placement(self, num_ps: int) -> Placement:
        """The balanced placement of these tables on ``num_ps`` ps: by the data's signs per
        batch, then the tables' rows (``placement = "balanced"``)."""
        costs = {
            name: (self.data.signs_per_batch.get(name, 0), table.capacity)
            for name, table in self.tables.items()
        }
        return Placement.balanced(costs, num_ps)


def plan_training(config: TrainConfig, workload: Workload) -> TrainPlan:
    """Read the data's shape and resolve the model spec against it; errors name the key."""
    probe = functools.partial(
        probe_data,
        workload=workload,
        scale=config.scale,
        batch_size=config.batch_size,
        seed=config.seed,
    )
    shape, _ = probe(config.data)
    tables = config.model_spec(workload.embedding_dim).resolve(shape)
    eval_reader = None
    if config.eval_data:
        eval_shape, eval_reader = probe(config.eval_data)
        check_same_schema(eval_shape, shape)
    return TrainPlan(shape, tables, eval_reader)


HubConnector = Callable[[], Awaitable[list[tuple[str, HubApi]]]]
"""Starts (or reaches) the job's hubs once the variables exist: their addresses and clients."""


async def _run_job(
    config: TrainConfig,
    plan: TrainPlan,
    cluster: PsCluster,
    connect_hubs: HubConnector,
    resume: JobCheckpoint | None,
) -> TrainReport:
    """The job on ps already running, whatever carries the calls: restore them (resuming),
    create the variables, start the hubs, then train with checkpoints and progress."""
    if resume is not None:
        await _restore_ps(cluster, resume, config.job_directory())
    elif config.placement == "balanced":
        await cluster.switch(plan.placement(len(cluster.members)))
    await drop_misplaced(cluster, list(plan.tables))
    await create_variables(cluster, plan.tables, config.seed)
    hubs = await connect_hubs()
    if cluster.placement.version:
        # The hubs this job started have the placement already (their config); hubs started
        # by hand (--hub) feed by hashing until now: a feed to a moved variable's hashed ps
        # answers NOT_FOUND and is retried, by this placement once the hub has it.
        await gather([functools.partial(h.set_placement, cluster.placement) for _, h in hubs])
    job = config.job_directory()

    async def checkpoint(trainer: Trainer, report: TrainReport) -> None:
        assert job is not None
        await save_job(job, cluster, trainer, report, keep=config.keep_checkpoints)

    @contextlib.contextmanager
    def watch(trainer: Trainer) -> Iterator[None]:
        with trainer_metrics(trainer, config.metrics_port, config.metrics_host) as url:
            if url is not None:
                print(f"metrics of the trainer on {url}", flush=True)
            with show_progress(trainer, quiet=not config.progress, interval=config.stats_interval):
                yield

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
    )


async def _train(
    config: TrainConfig,
    plan: TrainPlan,
    ps: list[tuple[str, int]],
    hubs: list[tuple[str, int]] | None,
    start_hubs: Callable[[Placement], list[tuple[str, int]]],
    resume: JobCheckpoint | None,
) -> TrainReport:
    """The job over gRPC, against ps (and hubs) at these addresses."""
    security = config.security()
    cluster = PsCluster(
        [
            PsClient(host, port, security=security, wire_dtype=config.wire_dtype)
            for host, port in ps
        ],
        _resumed_placement(resume, len(ps)),
    )
    clients: list[HubClient] = []

    async def connect_hubs() -> list[tuple[str, HubApi]]:
        addresses = hubs if hubs is not None else start_hubs(cluster.placement)
        clients.extend(HubClient(host, port, security=security) for host, port in addresses)
        return [(client.address, client) for client in clients]

    try:
        return await _run_job(config, plan, cluster, connect_hubs, resume)
    finally:
        for client in clients:
            client.close()
        cluster.close()


def _resumed_placement(resume: JobCheckpoint | None, num_ps: int) -> Placement | None:
    """The checkpoint's placement, if it has one for this many ps (resharding to another
    number of ps regroups variables by name hash)."""
    if resume is None or resume.placement is None or resume.placement.num_ps != num_ps:
        return None
    return resume.placement


async def _restore_ps(cluster: PsCluster, resume: JobCheckpoint, root: Path | None) -> None:
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
        log.info("resharded the checkpoint of %d ps for %d ps", resume.num_ps, count)
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
    log.info("restored every ps from %s (step %d)", resume.directory, resume.step)


def _oracle_auc(config: TrainConfig, workload: Workload) -> float | None:
    if config.data != "synthetic":
        return None
    from sniper.data import SyntheticCtr

    data = SyntheticCtr(
        workload,
        num_batches=config.num_batches,
        scale=config.scale,
        seed=config.seed,
        batch_size=config.batch_size,
    )
    return float(data.oracle_auc(min(config.num_batches, 100)))


def print_report(report: TrainReport, oracle_auc: float | None, eval_data: str = "") -> None:
    print(
        f"\ntrained {report.steps} batches ({report.examples:,} examples) in "
        f"{report.seconds:.1f} s: {report.examples_per_second:,.0f} examples/s"
    )
    if report.resumed_from_step:
        print(f"resumed from the checkpoint of step {report.resumed_from_step}")
    if report.restarts:
        print(
            f"restarted {report.restarts} time(s) after a server died; "
            f"{report.lost_steps} step(s) were trained again"
        )
    if report.checkpoints:
        pauses = report.checkpoint_pause_seconds
        print(
            f"{report.checkpoints} checkpoint(s); training paused {sum(pauses):.2f} s in all "
            f"(longest {max(pauses):.2f} s)"
        )
    lines = [
        ["train", f"{report.train_auc:.4f}", f"{report.train_logloss:.4f}"],
        [
            "held-out, second half of the run",
            f"{report.eval_auc:.4f}",
            f"{report.eval_logloss:.4f}",
        ],
        ["held-out, whole run", f"{report.eval_auc_whole_run:.4f}", "-"],
    ]
    if report.eval_batches == 0:
        lines = lines[:1]  # nothing was held out (eval_every = 0)
    if report.eval_data_auc is not None and report.eval_data_logloss is not None:
        lines.append(
            [
                f"eval data, {report.eval_data_examples:,} examples ({eval_data})",
                f"{report.eval_data_auc:.4f}",
                f"{report.eval_data_logloss:.4f}",
            ]
        )
    if oracle_auc is not None:
        lines.append(["planted model (oracle)", f"{oracle_auc:.4f}", "-"])
    print_table(["", "AUC", "logloss"], lines)
    if oracle_auc is not None and oracle_auc > 0.5 and report.eval_batches:
        lift = (report.eval_auc - 0.5) / (oracle_auc - 0.5)
        print(f"held-out AUC (second half) reaches {lift:.0%} of the oracle's lift over 0.5")
    print()
    print_table(
        ["op", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [
            [op, str(s.count)]
            + [f"{v / 1e3:.2f}" for v in (s.p50_us, s.p95_us, s.p99_us, s.max_us)]
            for op, s in report.ops.items()
        ],
    )
    if report.ps_ops:
        print("\nwhere the ps calls' time goes (each ps's own timings of the same calls)")
        print_table(["op", "layer", "count", "p50 ms", "p99 ms"], path_rows(report))


_STAGES = ("decode", "dispatch", "wait", "kernel", "apply", "encode")


def path_rows(report: TrainReport) -> list[list[str]]:
    """The trainer's EmbeddingLookup and PushGrad beside each ps's timing of them and of
    their stages, and what neither side's work explains: transport and codecs (about: a
    difference of medians)."""
    rows = []
    for op in ("EmbeddingLookup", "PushGrad"):
        whole = report.ops.get(op)
        if whole is None or not whole.count:
            continue
        rows.append([op, "trainer: the whole call", *_figures(whole)])
        slowest = 0.0
        for index, ps in enumerate(report.ps_ops):
            if op not in ps:
                continue
            slowest = max(slowest, ps[op].p50_us)
            rows.append(["", f"ps {index}: call", *_figures(ps[op])])
            for stage in _STAGES:
                if (timing := ps.get(f"{op}.{stage}")) is not None:
                    label = "kernel (each task)" if stage == "kernel" else stage
                    rows.append(["", f"ps {index}:   {label}", *_figures(timing)])
        rows.append(
            ["", "transport and codecs (about)", "", f"{(whole.p50_us - slowest) / 1e3:.2f}", ""]
        )
    return rows


def _figures(s: OpStats) -> list[str]:
    return [str(s.count), f"{s.p50_us / 1e3:.2f}", f"{s.p99_us / 1e3:.2f}"]


class _ServerDied(Exception):
    """Training failed and a process this launcher started had exited: worth a restart."""

    def __init__(self, error: TrainingError, steps: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.steps = steps


def _run_once(
    config: TrainConfig,
    plan: TrainPlan,
    ps: str | None,
    hubs: str | None,
    resume: JobCheckpoint | None,
) -> TrainReport:
    """Start the servers (unless given), train, stop them; :class:`_ServerDied` when training
    failed because one of the started servers died."""
    with ExitStack() as stack:
        configs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sniper-train-")))
        started: list[ServerProcess] = []
        metrics = config.metrics_port >= 0
        if ps:
            ps_addresses = parse_addresses(ps, "--ps")
        else:
            command = serve_config_command(_server_config(config, "ps"), configs / "ps.toml")
            servers = [
                stack.enter_context(server_process(command, metrics=metrics))
                for _ in range(config.num_ps)
            ]
            started += servers
            ps_addresses = [("127.0.0.1", s.port) for s in servers]
            print(
                f"started {len(servers)} ps on 127.0.0.1 ports "
                f"{', '.join(str(s.port) for s in servers)}",
                flush=True,
            )
            _print_metrics("ps", servers)

        def start_hubs(placement: Placement) -> list[tuple[str, int]]:
            hub_servers = []
            for index, hub in enumerate(_hub_configs(config, ps_addresses, resume, placement)):
                command = serve_config_command(hub, configs / f"hub-{index}.toml")
                hub_servers.append(stack.enter_context(server_process(command, metrics=metrics)))
            started.extend(hub_servers)
            print(
                f"started {len(hub_servers)} hub(s) on 127.0.0.1 ports "
                f"{', '.join(str(s.port) for s in hub_servers)}",
                flush=True,
            )
            _print_metrics("hub", hub_servers)
            return [("127.0.0.1", s.port) for s in hub_servers]

        hub_addresses = parse_addresses(hubs, "--hub") if hubs else None
        return _run_training(
            lambda: _train(config, plan, ps_addresses, hub_addresses, start_hubs, resume),
            lambda: any(server.process.poll() is not None for server in started),
        )


EXIT_GRACE = 2.0
"""Seconds a failed job waits for one of its servers to have exited before it gives up."""


def _exited_soon(died: Callable[[], bool], grace: float = EXIT_GRACE) -> bool:
    """Whether ``died()`` becomes true within ``grace`` seconds.

    A killed server's sockets close before its exit can be collected, so the trainer may hear
    "connection lost" while the process still polls as running (CI saw a job with a ps killed
    by -9 fail instead of restarting). A failure with every server alive costs ``grace``.
    """
    deadline = time.monotonic() + grace
    while not died():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _run_training(
    job: Callable[[], Awaitable[TrainReport]], died: Callable[[], bool] | None
) -> TrainReport:
    """Run ``job`` (one attempt at training); :class:`_ServerDied` when it failed and
    ``died()`` says a server this launcher started is gone (worth a restart). ``None``: no
    server runs apart from the job (one process), so a failure is never a restart."""
    try:
        # grpclib runs on asyncio: the gRPC transport picks the backend.
        report, signum = anyio.run(_until_signalled, job, backend="asyncio")
    except TrainingError as exc:
        if died is not None and _exited_soon(died):
            raise _ServerDied(exc, exc.steps) from exc
        raise
    except BaseExceptionGroup as group:
        # SIGTERM (SystemExit) or Ctrl-C landing in a task comes out of its task group
        # wrapped; the command must still exit as the signal asks.
        interrupt = _interrupt_in(group)
        if interrupt is not None:
            raise interrupt from None
        raise
    finally:
        # The loop's signal handling is gone with it; SIGTERM unwinds the launcher again.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if report is None:
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)
    return report


async def _until_signalled(
    job: Callable[[], Awaitable[TrainReport]],
) -> tuple[TrainReport | None, int]:
    """Run ``job``; a SIGTERM or SIGINT meanwhile cancels it: ``(None, the signal)``.

    Why not let the signal raise where it lands: an exception thrown into whatever bytecode
    the main thread runs can stop the event loop before it runs the callbacks that stop
    anyio's worker threads, and the process then waits for them forever (CI saw a
    SIGTERMed ``sniper train`` hang so). Cancelling unwinds every task at an ``await``.
    """
    outcome: list[TrainReport | Exception] = []
    received: list[int] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    received.append(signum)
                    break
            # A second signal while the job unwinds raises where it lands, as before.
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            outcome.append(await job())
        except Exception as exc:  # raised below as it is, not wrapped in the group's
            outcome.append(exc)
        finally:
            group.cancel_scope.cancel()
    if received:
        return None, received[0]
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0], 0


def _run_on_ray(config: TrainConfig, plan: TrainPlan, resume: JobCheckpoint | None) -> TrainReport:
    """One attempt with every ps and hub a Ray actor (``sniper.cluster._ray``)."""
    from sniper.cluster._ray import RayPlacement, ray_runtime

    with ray_runtime(config.ray_address) as ray:
        placement = RayPlacement(ray, config.resources, config.ray_strategy)
        try:
            ps = [
                split_address(a)
                for a in placement.start("ps", [_server_config(config, "ps")] * config.num_ps)
            ]
            print(f"started {len(ps)} ps on Ray: {_placed(placement, 'ps', ps)}", flush=True)

            def start_hubs(at_start: Placement) -> list[tuple[str, int]]:
                configs = _hub_configs(config, ps, resume, at_start)
                hubs = [split_address(a) for a in placement.start("hub", configs)]
                print(
                    f"started {len(hubs)} hub(s) on Ray: {_placed(placement, 'hub', hubs)}",
                    flush=True,
                )
                return hubs

            return _run_training(
                lambda: _train(config, plan, ps, None, start_hubs, resume), placement.any_died
            )
        finally:
            placement.close()


def _run_in_process(
    config: TrainConfig, plan: TrainPlan, resume: JobCheckpoint | None
) -> TrainReport:
    """The job with every role in this process (``sniper.cluster._inprocess``)."""
    from sniper.cluster._inprocess import train_in_process

    print(f"started {config.num_ps} ps and {config.num_hubs} hub(s) in this process", flush=True)
    return _run_training(lambda: train_in_process(config, plan, resume), None)


def _placed(placement: Any, role: str, addresses: list[tuple[str, int]]) -> str:
    return ", ".join(
        f"{host}:{port} (node {placement.nodes[f'{role} {i}'][:12]})"
        for i, (host, port) in enumerate(addresses)
    )


def _hub_configs(
    config: TrainConfig,
    ps: list[tuple[str, int]],
    resume: JobCheckpoint | None,
    placement: Placement,
) -> list[ServeConfig]:
    """The config of each hub the job starts: its place in the data, and the job's placement,
    so that it feeds every variable to its ps from its first batch."""
    return [
        _server_config(
            config,
            "hub",
            ps=",".join(f"{host}:{port}" for host, port in ps),
            hub_index=index,
            **_hub_start(resume, index, placement),
        )
        for index in range(config.num_hubs)
    ]


class _HubStart(TypedDict):
    start_epoch: int
    start_index: int
    placement_owners: dict[str, int]
    placement_version: int


def _hub_start(resume: JobCheckpoint | None, hub: int, placement: Placement) -> _HubStart:
    """How hub ``hub`` starts, whatever runs it: reading after what the checkpoint trained,
    and feeding by the job's placement from its first batch."""
    epoch, index = resume.start_of(hub) if resume is not None else (0, 0)
    return {
        "start_epoch": epoch,
        "start_index": index,
        "placement_owners": dict(placement.owners),
        "placement_version": placement.version,
    }


def _print_metrics(role: str, servers: list[ServerProcess]) -> None:
    for index, server in enumerate(servers):
        if server.metrics_url:
            print(f"metrics of {role} {index} on {server.metrics_url}", flush=True)


def _interrupt_in(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    for exc in group.exceptions:
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (inner := _interrupt_in(exc)) is not None:
            return inner
    return None


def _server_config(config: TrainConfig, role: str, **extra: Any) -> ServeConfig:
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


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run_train(config: TrainConfig, ps: str | None = None, hubs: str | None = None) -> int:
    """Run ``sniper train``; returns the exit status."""
    log_to_stderr()
    if config.launcher == "auto":
        named = bool(ps or hubs)
        config = dataclasses.replace(config, launcher="local" if named else "inprocess")
    workload = load_workload(config.workload)
    plan = plan_training(config, workload)  # before any process: a bad config starts nothing
    resume = load_job(Path(config.resume).resolve()) if config.resume else None
    config = config.with_num_ps(resume)
    if resume is not None and resume.num_hubs != config.num_hubs:
        raise ValueError(
            f"resume: the checkpoint was taken with {resume.num_hubs} hub(s) and this run has "
            f"num_hubs = {config.num_hubs}; hubs split the data, so keep their number"
        )
    # SIGTERM unwinds like Ctrl-C, so the ExitStack below stops every server it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    restarts = lost_steps = 0
    while True:
        try:
            if config.launcher == "ray":
                report = _run_on_ray(config, plan, resume)
            elif config.launcher == "inprocess":
                report = _run_in_process(config, plan, resume)
            else:
                report = _run_once(config, plan, ps, hubs, resume)
            break
        except _ServerDied as died:
            job = config.job_directory()
            if job is None or restarts >= config.max_restarts:
                raise died.error from None
            restarts += 1
            resume = load_job(job) if (job / LATEST).is_file() else None
            lost = died.steps - (resume.step if resume is not None else 0)
            lost_steps += lost
            log.warning(
                "%s; restarting every process (restart %d of %d) from %s, %d step(s) lost",
                died.error,
                restarts,
                config.max_restarts,
                f"the checkpoint of step {resume.step}" if resume else "the start",
                lost,
            )
    report.restarts = restarts
    report.lost_steps = lost_steps
    # With hubs started elsewhere their data settings are theirs, so there is no oracle to quote.
    oracle = _oracle_auc(config, workload) if not hubs else None
    print_report(report, oracle, config.eval_data)
    result = report.to_dict() | {"oracle_auc": oracle, "config": dataclasses.asdict(config)}
    Path(config.output).write_text(json.dumps(result, indent=1, default=str))
    print(f"\nreport written to {config.output}")
    return 0
