"""``sniper train``: a local cluster (N ps, M hubs, the trainer), trained end to end.

With no arguments it trains the embedded default. ``--config`` takes a TOML file of the same
keys as :class:`TrainConfig` (see ``experiments/configs/``); ``--ps`` and ``--hub`` use servers
started elsewhere instead of starting them.

Order of a local run: start the ps processes; create every variable on its owner
(``ps_for_variable``); start the hub processes, which begin feeding; run the trainer; print the
report and write it as JSON; stop every process. The stop happens on every exit path (end of
data, an error, Ctrl-C), so no server outlives the command.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sniper._bench._report import print_table
from sniper._config import load_config
from sniper._process import ps_command, serve_command, server_process
from sniper._workload import Workload, load_workload
from sniper.roles._serve import parse_addresses
from sniper.roles._trainer import Trainer, TrainerConfig, TrainReport
from sniper.rpc import Channel, PsClient, PsCluster
from sniper.rpc._generated.sniper.v1 import HubStub
from sniper.scheduler import SCHEDULER_NAMES
from sniper.store import SGD, Adagrad, Adam, Ftrl, Optimizer

__all__ = ["TrainConfig", "load_train_config", "run_train"]

_EMBEDDING_OPTIMIZERS: dict[str, type[Optimizer]] = {
    "sgd": SGD,
    "adagrad": Adagrad,
    "adam": Adam,
    "ftrl": Ftrl,
}

log = logging.getLogger("sniper.train")


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Every field is a TOML key; the defaults are ``make demo``'s run."""

    workload: str = "seed_ctr"
    data: str = "synthetic"
    scale: float = 0.02
    num_batches: int = 700
    batch_size: int = 1024
    epochs: int = 1
    seed: int = 0
    num_ps: int = 2
    num_hubs: int = 1
    scheduler: str = "work_stealing"
    workers: int = 1
    embedding_optimizer: str = "adagrad"
    embedding_params: dict[str, float] = dataclasses.field(default_factory=lambda: {"lr": 0.05})
    """Parameters of the embedding optimizer (``lr`` for sgd/adagrad/adam, ``alpha``... for
    ftrl); see ``sniper.store``'s optimizers."""
    hidden: tuple[int, ...] = (64,)
    lr: float = 0.002
    prefetch: int = 4
    eval_every: int = 10
    stats_interval: float = 10.0
    max_steps: int = 0
    blas_threads: int = 1
    """Threads for the trainer's dense-model BLAS (0: one per core); see TrainerConfig."""
    output: str = "train_report.json"

    def __post_init__(self) -> None:
        for name in ("num_batches", "batch_size", "epochs", "num_ps", "num_hubs", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale}")
        if self.scheduler not in SCHEDULER_NAMES:
            raise ValueError(
                f"scheduler must be one of {', '.join(SCHEDULER_NAMES)}, got {self.scheduler!r}"
            )
        if not self.stats_interval > 0:
            raise ValueError(f"stats_interval must be positive, got {self.stats_interval}")
        kind = self.data.split(":", 1)[0]
        if kind not in ("synthetic", "criteo", "parquet") or (kind != "synthetic") != (
            ":" in self.data
        ):
            raise ValueError(
                f"data must be synthetic, parquet:PATH or criteo:PATH, got {self.data!r}"
            )
        if any(width < 1 for width in self.hidden):
            raise ValueError(f"hidden layer sizes must be at least 1, got {list(self.hidden)}")
        self.trainer()  # prefetch, eval_every, lr, max_steps: raises naming the key
        optimizer = _EMBEDDING_OPTIMIZERS.get(self.embedding_optimizer)
        if optimizer is None:
            raise ValueError(
                f"embedding_optimizer must be one of "
                f"{', '.join(_EMBEDDING_OPTIMIZERS)}, got {self.embedding_optimizer!r}"
            )
        try:
            optimizer(**self.embedding_params)
        except TypeError as exc:
            raise ValueError(
                f"embedding_params do not fit {self.embedding_optimizer}: {exc}"
            ) from None
        if not Path(self.output).resolve().parent.is_dir():
            raise ValueError(f"output {self.output!r}: its directory does not exist")
        self.trainer()  # the trainer's own checks (blas_threads...), before any process starts

    def trainer(self) -> TrainerConfig:
        return TrainerConfig(
            hidden=self.hidden,
            lr=self.lr,
            prefetch=self.prefetch,
            eval_every=self.eval_every,
            stats_interval=self.stats_interval,
            max_steps=self.max_steps,
            seed=self.seed,
            blas_threads=self.blas_threads,
        )


def load_train_config(path: Path | None, overrides: dict[str, Any]) -> TrainConfig:
    """Defaults, then the TOML file, then non-None overrides; errors name the key."""
    return load_config(TrainConfig, path, overrides)


def _variables_spec(workload: Workload, config: TrainConfig) -> list[tuple[str, int, int]]:
    """(name, capacity, shards) of each variable for this run's data."""
    from sniper._local import SHARD_SIGNS

    signs, vocabulary = _data_shape(workload, config)
    return [
        (
            v.name,
            min(max(1024, vocabulary[v.name]), 4_000_000),
            max(1, min(16, signs[v.name] // SHARD_SIGNS)),
        )
        for v in workload.variables
    ]


def _data_shape(workload: Workload, config: TrainConfig) -> tuple[dict[str, int], dict[str, int]]:
    """Signs per batch and vocabulary per variable: the generator's own figures for synthetic
    data (it keeps at least one sign per example) and for Parquet converted from it (recorded
    in the file), the workload's for other files."""
    if config.data == "synthetic":
        from sniper.data import SyntheticCtr

        data = SyntheticCtr(
            workload,
            num_batches=1,
            scale=config.scale,
            seed=config.seed,
            batch_size=config.batch_size,
        )
        return dict(data.signs_per_batch), dict(data.vocabulary)
    if config.data.startswith("parquet:"):
        recorded = _recorded_shape(workload, config)
        if recorded is not None:
            return recorded
    return (
        {v.name: v.signs_per_batch for v in workload.variables},
        {v.name: v.vocabulary for v in workload.variables},
    )


def _recorded_shape(
    workload: Workload, config: TrainConfig
) -> tuple[dict[str, int], dict[str, int]] | None:
    """The shape a Parquet file recorded, its signs rescaled to this run's batch size."""
    from sniper.data import ParquetReader

    reader = ParquetReader(config.data.removeprefix("parquet:"))
    recorded = reader.shape
    if recorded is None:
        return None
    signs, vocabulary = recorded
    missing = sorted({v.name for v in workload.variables} - (signs.keys() & vocabulary.keys()))
    if missing:
        raise ValueError(
            f"{reader.path} records no shape for {', '.join(missing[:3])}: it was written for "
            f"another workload than {workload.name!r}"
        )
    factor = config.batch_size / reader.batch_size
    return {name: max(1, round(count * factor)) for name, count in signs.items()}, vocabulary


async def _create_variables(cluster: PsCluster, workload: Workload, config: TrainConfig) -> None:
    for name, capacity, shards in _variables_spec(workload, config):
        await cluster.owner(name).create_variable(
            name,
            workload.embedding_dim,
            capacity,
            optimizer=config.embedding_optimizer,
            optimizer_params=config.embedding_params,
            shards=shards,
            seed=config.seed,
        )


async def _train(
    config: TrainConfig,
    workload: Workload,
    ps: list[tuple[str, int]],
    hubs: list[tuple[str, int]] | None,
    start_hubs: Any,
) -> TrainReport:
    cluster = PsCluster([PsClient(host, port) for host, port in ps])
    channels: list[Channel] = []
    try:
        await _create_variables(cluster, workload, config)
        hub_addresses = hubs if hubs is not None else start_hubs()
        channels = [Channel(host, port) for host, port in hub_addresses]
        stubs = [
            (f"{host}:{port}", HubStub(channel, timeout=600))
            for (host, port), channel in zip(hub_addresses, channels, strict=True)
        ]
        trainer = Trainer(
            stubs,
            cluster,
            [v.name for v in workload.variables],
            workload.embedding_dim,
            workload.dense_features,
            config.trainer(),
        )
        report = await trainer.run()
        trainer.log_op_statistics()
        return report
    finally:
        for channel in channels:
            channel.close()
        cluster.close()


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


def print_report(report: TrainReport, oracle_auc: float | None) -> None:
    print(
        f"\ntrained {report.steps} batches ({report.examples:,} examples) in "
        f"{report.seconds:.1f} s: {report.examples_per_second:,.0f} examples/s"
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


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run_train(config: TrainConfig, ps: str | None = None, hubs: str | None = None) -> int:
    """Run ``sniper train``; returns the exit status."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    workload = load_workload(config.workload)
    # SIGTERM unwinds like Ctrl-C, so the ExitStack below stops every server it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with ExitStack() as stack:
        if ps:
            ps_addresses = parse_addresses(ps, "--ps")
        else:
            command = ps_command(
                config.scheduler, config.workers, "--stats-interval", str(config.stats_interval)
            )
            servers = [stack.enter_context(server_process(command)) for _ in range(config.num_ps)]
            ps_addresses = [("127.0.0.1", s.port) for s in servers]
            print(
                f"started {len(servers)} ps on 127.0.0.1 ports "
                f"{', '.join(str(s.port) for s in servers)}",
                flush=True,
            )

        def start_hubs() -> list[tuple[str, int]]:
            ps_list = ",".join(f"{h}:{p}" for h, p in ps_addresses)
            started = []
            for index in range(config.num_hubs):
                command = serve_command(
                    "hub",
                    "--ps",
                    ps_list,
                    "--data",
                    config.data,
                    "--workload",
                    config.workload,
                    "--scale",
                    str(config.scale),
                    "--num-batches",
                    str(config.num_batches),
                    "--batch-size",
                    str(config.batch_size),
                    "--epochs",
                    str(config.epochs),
                    "--hub-index",
                    str(index),
                    "--num-hubs",
                    str(config.num_hubs),
                    "--seed",
                    str(config.seed),
                )
                started.append(stack.enter_context(server_process(command)))
            print(
                f"started {len(started)} hub(s) on 127.0.0.1 ports "
                f"{', '.join(str(s.port) for s in started)}",
                flush=True,
            )
            return [("127.0.0.1", s.port) for s in started]

        hub_addresses = parse_addresses(hubs, "--hub") if hubs else None
        report = asyncio.run(_train(config, workload, ps_addresses, hub_addresses, start_hubs))
    # With hubs started elsewhere their data settings are theirs, so there is no oracle to quote.
    oracle = _oracle_auc(config, workload) if not hubs else None
    print_report(report, oracle)
    result = report.to_dict() | {"oracle_auc": oracle, "config": dataclasses.asdict(config)}
    Path(config.output).write_text(json.dumps(result, indent=1, default=str))
    print(f"\nreport written to {config.output}")
    return 0
