"""The ``sniper`` command line.

Every subcommand's implementation is imported lazily, so ``sniper --help`` and ``sniper hash``
stay fast and never pay for numba or torch. Errors a user can fix (a bad flag value, an unknown
workload or scheduler) print one line ``sniper: error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from sniper.runtime._gc import collect_less
from sniper.runtime._malloc import reuse_freed_memory

__all__ = ["main"]

EXIT_FAILED = 1
EXIT_USAGE = 2

WIRE_DTYPES = ("float32", "bfloat16", "float16")
"""``sniper.rpc._tensor.FLOAT_DTYPES``, named here so that parsing a command line does not
import the gRPC stack (a test keeps the two equal)."""

Command = Callable[[argparse.Namespace], int]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _cmd_hash(args: argparse.Namespace) -> int:
    from sniper.hashing import ps_for_variable, string_to_u64

    for name in args.names:
        line = f"{name}\t{string_to_u64(name)}"
        if args.num_ps:
            line += f"\tps {ps_for_variable(name, args.num_ps)}"
        print(line)
    return 0


def _cmd_placement(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sniper.cluster import _placement, parse_addresses

    if args.ps:
        _placement.print_live_placement(parse_addresses(args.ps, "--ps"))
    elif args.checkpoint:
        from sniper.cluster._checkpoint import load_job

        job = load_job(Path(args.checkpoint).resolve())
        _placement.print_checkpoint_placement(job.placement, job.step)
    else:
        from sniper.data._workload import load_workload

        _placement.print_placement(
            load_workload(args.workload), args.num_ps, args.policy, args.scale
        )
    return 0


def _cmd_bench_ps(args: argparse.Namespace) -> int:
    from sniper._bench._ps import PsBenchConfig, run
    from sniper.data._workload import load_workload
    from sniper.scheduler import scheduler_names

    if args.scheduler not in scheduler_names():
        raise LookupError(
            f"unknown scheduler {args.scheduler!r}; valid names: {', '.join(scheduler_names())}"
        )
    config = PsBenchConfig(
        scheduler=args.scheduler,
        workers=args.workers,
        steps=args.steps,
        num_ps=args.num_ps,
        seed=args.seed,
        transport=args.transport,
    )
    run(load_workload(args.workload), config)
    return 0


def _flags_of(config_class: type, args: argparse.Namespace) -> dict[str, object]:
    """The flags of ``args`` that name a field of ``config_class`` (None when not given)."""
    import dataclasses

    return {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(config_class)
        if hasattr(args, f.name)
    }


def _cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sniper.cluster import ServeConfig, load_serve_config, run_serve

    flags = _flags_of(ServeConfig, args)
    if args.cluster_spec:
        from sniper.cluster._hosts import load_cluster_spec

        if args.index is None or args.role is None:
            raise ValueError("--cluster-spec needs --role and --index: which server this is")
        # The spec says where this server listens and what it feeds; flags cannot disagree.
        flags |= load_cluster_spec(Path(args.cluster_spec)).server(args.role, args.index)
    elif args.index is not None:
        raise ValueError("--index picks a server of --cluster-spec; give the spec too")
    config = load_serve_config(Path(args.config) if args.config else None, flags)
    return run_serve(config)


def _cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sniper.cluster import load_train_config
    from sniper.cluster._eval import run_eval

    # Only the model's shape is read from it: checkpointing keys do not apply here.
    overrides = {"checkpoint_every": 0, "resume": "", "checkpoint_dir": ""}
    config = load_train_config(Path(args.config) if args.config else None, overrides)
    return run_eval(args.checkpoint, args.data, config)


def _cmd_reshard(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sniper.cluster import reshard

    out = Path(args.out)
    targets = [out / f"ps-{index}" for index in range(args.num_ps)]
    rows = reshard([Path(source) for source in args.sources], targets)
    for target, count in zip(targets, rows, strict=True):
        print(f"{target}: {count:,} rows")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sniper.cluster import TrainConfig, load_train_config, run_train
    from sniper.roles._trainer import TrainingError

    flags = _flags_of(TrainConfig, args)
    if args.quiet:
        flags["progress"] = False
    ps, hubs = args.ps, args.hub
    if args.cluster_spec:
        from sniper.cluster._hosts import load_cluster_spec

        if ps or hubs:
            raise ValueError("give --cluster-spec or --ps/--hub, not both")
        spec = load_cluster_spec(Path(args.cluster_spec))
        ps, hubs = spec.ps_addresses, spec.hub_addresses
        flags |= {"num_ps": len(spec.ps), "num_hubs": len(spec.hubs)}
    config = load_train_config(Path(args.config) if args.config else None, flags)
    if config.launcher in ("ray", "inprocess") and (ps or hubs):
        raise ValueError(
            f"launcher {config.launcher} starts its own ps and hubs: drop --ps, --hub and "
            "--cluster-spec (or use launcher local)"
        )
    try:
        return run_train(config, ps=ps, hubs=hubs)
    except TrainingError as exc:
        print(f"sniper: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _cmd_data_convert(args: argparse.Namespace) -> int:
    from sniper.data import convert

    rows = convert(
        args.kind,
        args.source,
        args.out,
        batch_size=args.batch_size,
        num_batches=args.num_batches,
        scale=args.scale,
        seed=args.seed,
    )
    print(f"wrote {rows:,} examples to {args.out}")
    return 0


def _cmd_experiment_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sniper.experiment import load_experiment, run_experiment

    # A bad experiment file raises ValueError before any point runs: exit status 2.
    experiment = load_experiment(Path(args.file))
    return run_experiment(experiment, quick=args.quick, out=Path(args.out) if args.out else None)


def _cmd_experiment_list(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sniper.experiment import print_experiments

    print_experiments(Path(args.directory))
    return 0


def _workload_bench(module: str, *options: str) -> Command:
    """A ``sniper bench`` command: ``sniper._bench.<module>.run(workload, **options)``.

    The bench module is imported only when its command runs: some import torch or grpcio.
    """

    def command(args: argparse.Namespace) -> int:
        from sniper.data._workload import load_workload

        bench = importlib.import_module(f"sniper._bench.{module}")
        bench.run(load_workload(args.workload), **{name: getattr(args, name) for name in options})
        return 0

    return command


def _cmd_conformance(args: argparse.Namespace) -> int:
    from sniper._contracts._hash import conformance_main

    return conformance_main(args.argv)


def _cmd_bench_compile(args: argparse.Namespace) -> int:
    from sniper._bench import _compile

    _compile.run()
    return 0


def _add_workload(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload",
        default="seed_ctr",
        help="built-in workload (seed_ctr, criteo) or a workload JSON file (default: seed_ctr)",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sniper",
        description="A Python parameter server for CTR models with huge sparse embeddings.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    hash_cmd = commands.add_parser("hash", help="print string_to_u64 of variable names")
    hash_cmd.add_argument("names", nargs="+", metavar="NAME")
    hash_cmd.add_argument(
        "--num-ps",
        type=_positive_int,
        default=0,
        help="also print the ps that owns each name in a cluster of N",
    )
    hash_cmd.set_defaults(run=_cmd_hash)

    placement = commands.add_parser(
        "placement",
        help="show which ps owns each variable: of a workload as a fresh job places it, of a "
        "running job (--ps) or of a job checkpoint (--checkpoint)",
    )
    _add_workload(placement)
    placement.add_argument("--num-ps", type=_positive_int, default=4)
    placement.add_argument(
        "--policy",
        choices=("balanced", "hash"),
        default="balanced",
        help="the train config's placement key: balanced (its default) or hash",
    )
    placement.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="the train config's scale: the synthetic data's signs per batch and vocabulary",
    )
    where = placement.add_mutually_exclusive_group()
    where.add_argument(
        "--ps", metavar="HOST:PORT,...", help="ask these running ps (in job order) instead"
    )
    where.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the placement a job checkpoint (DIR or DIR/step-N) recorded",
    )
    placement.set_defaults(run=_cmd_placement)

    evaluation = commands.add_parser(
        "eval", help="score a data file with a job checkpoint's model (no training)"
    )
    evaluation.add_argument("--checkpoint", required=True, help="a --checkpoint-dir or step-N")
    evaluation.add_argument("--data", required=True, help="criteo:PATH or parquet:PATH")
    evaluation.add_argument(
        "--config", default=None, help="the training TOML (for the model's hidden layers)"
    )
    evaluation.set_defaults(run=_cmd_eval)

    resharding = commands.add_parser(
        "reshard",
        help="regroup the ps checkpoints of one job (one directory per ps) for --num-ps ps",
    )
    resharding.add_argument("sources", nargs="+", help="each old ps's checkpoint directory")
    resharding.add_argument("--num-ps", type=_positive_int, required=True)
    resharding.add_argument("--out", required=True, help="writes OUT/ps-0 .. OUT/ps-(N-1)")
    resharding.set_defaults(run=_cmd_reshard)

    train = commands.add_parser(
        "train", help="train end to end on a local cluster (embedded default without --config)"
    )
    train.add_argument("--config", default=None, help="TOML file (experiments/configs/*.toml)")
    train.add_argument("--ps", default=None, help="use these ps (host:port,...) instead")
    train.add_argument("--hub", default=None, help="use these hubs (host:port,...) instead")
    train.add_argument(
        "--cluster-spec", default=None, help="TOML of every ps and hub (started elsewhere)"
    )
    train.add_argument(
        "--data", default=None, help="synthetic, criteo:PATH or parquet:PATH (file, dir, glob)"
    )
    train.add_argument(
        "--eval-data", default=None, help="held-out criteo:PATH or parquet:PATH, scored at the end"
    )
    train.add_argument("--epochs", type=_positive_int, default=None)
    train.add_argument("--batch-size", type=_positive_int, default=None)
    train.add_argument("--output", default=None, help="JSON report path")
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--num-ps", type=_positive_int, default=None)
    train.add_argument("--num-hubs", type=_positive_int, default=None)
    train.add_argument("--scheduler", default=None)
    train.add_argument("--checkpoint-dir", default=None, help="checkpoint the job here")
    train.add_argument(
        "--checkpoint-every", type=int, default=None, help="steps between checkpoints"
    )
    train.add_argument(
        "--resume", default=None, help="continue from a --checkpoint-dir (or its step-N)"
    )
    train.add_argument(
        "--max-restarts",
        type=int,
        default=None,
        help="restarts from the latest checkpoint when a server dies (default 3)",
    )
    train.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="Prometheus metrics of the trainer here (0: a free port); the servers it starts "
        "get free ports, and every URL is printed",
    )
    train.add_argument(
        "--quiet", action="store_true", default=None, help="no progress bar or progress lines"
    )
    train.add_argument(
        "--launcher",
        choices=["auto", "local", "inprocess", "ray"],
        default=None,
        help="run the ps and hubs inside this process (inprocess: no gRPC between them), as "
        "local processes over gRPC (local: a crashed role is restarted from the last "
        "checkpoint) or as Ray actors (sniper[ray]); auto (default): local when --ps, --hub "
        "or --cluster-spec name servers, else inprocess",
    )
    train.add_argument(
        "--ray-address", default=None, help='the Ray cluster ("": a new local one; "auto")'
    )
    train.set_defaults(run=_cmd_train)

    serve = commands.add_parser("serve", help="run a ps or a hub until SIGINT or SIGTERM")
    serve.add_argument("--role", choices=["ps", "hub"], default=None)
    serve.add_argument("--host", default=None, help="default 127.0.0.1 (loopback)")
    serve.add_argument("--port", type=int, default=None, help="0 (default) picks a free port")
    serve.add_argument(
        "--scheduler",
        default=None,
        help="adaptive (default), inline, per_variable, thread_pool or work_stealing",
    )
    serve.add_argument(
        "--workers", type=int, default=None, help="scheduler threads (default 0: one per core)"
    )
    serve.add_argument("--config", default=None, help="TOML file with the same keys")
    serve.add_argument(
        "--cluster-spec",
        default=None,
        help="TOML of every ps and hub: this server's address (and a hub's ps) come from it",
    )
    serve.add_argument(
        "--index", type=int, default=None, help="which ps or hub of --cluster-spec this is"
    )
    serve.add_argument("--max-message-mb", type=float, default=None)
    serve.add_argument(
        "--nonfinite",
        choices=["reject", "drop"],
        default=None,
        help="what a NaN or Inf gradient gets (default reject)",
    )
    serve.add_argument("--max-table-gb", type=float, default=None)
    serve.add_argument(
        "--checkpoint-root",
        default=None,
        help="Save and Restore only under this directory (default: none, both refused)",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics here (0: a free port, printed after the listening line)",
    )
    serve.add_argument(
        "--stats-interval",
        type=float,
        default=None,
        help="seconds between latency log lines (default 10)",
    )
    serve.add_argument(
        "--http2-window-mb",
        type=float,
        default=None,
        help="HTTP/2 flow-control windows (default 16; grpclib's own is 4)",
    )
    serve.add_argument(
        "--http2-frame-kb",
        type=int,
        default=None,
        help="largest HTTP/2 frame this server accepts (default 512; HTTP/2's own is 16)",
    )
    serve.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        default=None,
        help="also stop when standard input closes (for launchers)",
    )
    hub = serve.add_argument_group("hub")
    hub.add_argument("--ps", default=None, help="host:port,... of every ps, in cluster order")
    hub.add_argument(
        "--data", default=None, help="synthetic (default), parquet:PATH or criteo:PATH"
    )
    hub.add_argument("--workload", default=None, help="workload of synthetic data")
    hub.add_argument("--scale", type=float, default=None, help="synthetic size factor")
    hub.add_argument("--num-batches", type=_positive_int, default=None)
    hub.add_argument("--batch-size", type=_positive_int, default=None)
    hub.add_argument("--epochs", type=_positive_int, default=None)
    hub.add_argument("--hub-index", type=int, default=None)
    hub.add_argument("--num-hubs", type=_positive_int, default=None)
    hub.add_argument("--seed", type=int, default=None)
    serve.set_defaults(run=_cmd_serve)

    conformance = commands.add_parser(
        "conformance",
        help="check a port of sniper's hashes in another language (conformance hash -- CMD)",
        # conformance_main parses its own arguments, --help included: every argument, even
        # -h and --, reaches it untouched ('+' is a prefix no argument of it starts with).
        add_help=False,
        prefix_chars="+",
    )
    conformance.add_argument("argv", nargs=argparse.REMAINDER)
    conformance.set_defaults(run=_cmd_conformance)

    data = commands.add_parser("data", help="prepare training data")
    actions = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    conv = actions.add_parser("convert", help="write Criteo TSV or synthetic data as Parquet")
    conv.add_argument(
        "kind",
        choices=["criteo", "synthetic"],
        help="criteo: a Criteo TSV file; synthetic: planted-model data",
    )
    conv.add_argument("out", help="Parquet file to write (appears only when complete)")
    conv.add_argument(
        "--source",
        default=None,
        help="criteo: the TSV file (required); synthetic: workload (seed_ctr)",
    )
    conv.add_argument(
        "--batch-size", type=_positive_int, default=None, help="examples per batch and row group"
    )
    conv.add_argument(
        "--num-batches",
        type=_positive_int,
        default=None,
        help="batches to write (required for synthetic; criteo: stop early)",
    )
    conv.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="synthetic only: multiplies signs per batch and vocabularies",
    )
    conv.add_argument("--seed", type=int, default=0, help="synthetic only")
    conv.set_defaults(run=_cmd_data_convert)

    experiment = commands.add_parser(
        "experiment", help="run a seed log's experiment: a sweep of local-cluster training runs"
    )
    experiment_actions = experiment.add_subparsers(
        dest="experiment_command", required=True, metavar="ACTION"
    )
    experiment_run = experiment_actions.add_parser(
        "run", help="run every point of an experiment TOML; write results.csv, summary.md, plots"
    )
    experiment_run.add_argument("file", help="an experiment TOML (experiments/NAME.toml)")
    experiment_run.add_argument(
        "--quick", action="store_true", help="apply the file's [quick] overrides (small shapes)"
    )
    experiment_run.add_argument(
        "--out", default=None, help="output directory (default: experiments/results/NAME)"
    )
    experiment_run.set_defaults(run=_cmd_experiment_run)
    experiment_list = experiment_actions.add_parser(
        "list", help="the experiments in a directory and the seed finding each reproduces"
    )
    experiment_list.add_argument(
        "directory", nargs="?", default="experiments", help="default: experiments"
    )
    experiment_list.set_defaults(run=_cmd_experiment_list)

    bench = commands.add_parser("bench", help="measure sniper against a peer in the same run")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    store = benches.add_parser("store", help="embedding store vs torch EmbeddingBag and a dict")
    _add_workload(store)
    store.add_argument(
        "--batches",
        type=_positive_int,
        default=4,
        help="distinct batches generated per case (default 4)",
    )
    store.add_argument("--repeats", type=_positive_int, default=10)
    store.add_argument("--dict-repeats", type=_positive_int, default=2)
    store.add_argument("--threads", type=_positive_int, default=2)
    store.add_argument("--prefill-rows", type=_positive_int, default=2_000_000)
    store.add_argument("--seed", type=int, default=0)
    store.add_argument(
        "--peer",
        choices=["torch", "torchrec"],
        default="torch",
        help="torch EmbeddingBag (default) or TorchRec's FusedEmbeddingBagCollection, run in "
        "its own environment (.venv-torchrec, made by make bench)",
    )
    store.set_defaults(
        run=_workload_bench(
            "_store",
            "batches",
            "repeats",
            "dict_repeats",
            "threads",
            "prefill_rows",
            "seed",
            "peer",
        )
    )
    scheduler = benches.add_parser(
        "scheduler", help="seed_ctr ps step (feed, lookup, push) through every scheduler backend"
    )
    _add_workload(scheduler)
    scheduler.add_argument("--workers", type=_positive_int, default=2)
    scheduler.add_argument("--steps", type=_positive_int, default=20)
    scheduler.add_argument("--batches", type=_positive_int, default=4)
    scheduler.add_argument("--seed", type=int, default=0)
    scheduler.set_defaults(run=_workload_bench("_scheduler", "workers", "steps", "batches", "seed"))
    rpc = benches.add_parser("rpc", help="seed_ctr EmbeddingLookup over loopback vs grpcio")
    _add_workload(rpc)
    rpc.add_argument("--repeats", type=_positive_int, default=20)
    rpc.add_argument(
        "--window-mb",
        type=float,
        default=16.0,
        help="HTTP/2 windows of the sniper server and client (default 16)",
    )
    rpc.add_argument("--workers", type=_positive_int, default=2)
    rpc.set_defaults(run=_workload_bench("_rpc", "repeats", "window_mb", "workers"))
    e2e = benches.add_parser("e2e", help="local cluster training vs torch in one process")
    _add_workload(e2e)
    e2e.add_argument(
        "--scale", type=float, default=1.0, help="1.0 is the workload's own shape (default)"
    )
    e2e.add_argument("--batches", type=_positive_int, default=100)
    e2e.add_argument("--threads", type=_positive_int, default=2)
    e2e.add_argument("--seed", type=int, default=0)
    e2e.add_argument(
        "--launcher",
        choices=["auto", "local", "inprocess", "ray"],
        default="auto",
        help="auto (default): the job in one process (sniper train's default on one machine) "
        "and as local processes, each against the peer; inprocess or local: only that one; "
        "ray: the same job on Ray actors against local processes (start-up, examples/s)",
    )
    e2e.add_argument(
        "--peer",
        choices=["torch", "torchrec"],
        default="torch",
        help="torch EmbeddingBag (default) or TorchRec's FusedEmbeddingBagCollection, run in "
        "its own environment (.venv-torchrec, made by make bench)",
    )
    e2e.add_argument(
        "--wire-dtype",
        choices=WIRE_DTYPES,
        default="float32",
        help="how pooled embeddings and gradients travel where the roles talk gRPC (the "
        "processes row; the job's wire_dtype): float32 (default), bfloat16 or float16",
    )
    e2e.set_defaults(
        run=_workload_bench(
            "_e2e", "scale", "batches", "seed", "threads", "launcher", "peer", "wire_dtype"
        )
    )
    memory = benches.add_parser(
        "memory", help="a ps process's RSS per row of a full table vs the target and torch"
    )
    _add_workload(memory)
    memory.add_argument(
        "--rows", type=_positive_int, default=4_000_000, help="rows of the table (default 4M)"
    )
    memory.set_defaults(run=_workload_bench("_memory", "rows"))
    ps_bench = benches.add_parser(
        "ps", help="the ps side of training steps (FeedSample, lookup, push) on a workload"
    )
    _add_workload(ps_bench)
    ps_bench.add_argument(
        "--scheduler",
        default="adaptive",
        help="adaptive (default), inline, per_variable, thread_pool or work_stealing",
    )
    ps_bench.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="worker threads per ps (default 1: the ps share the cores)",
    )
    ps_bench.add_argument(
        "--transport",
        choices=["grpc", "inprocess"],
        default="grpc",
        help="real ps processes over gRPC (default), or one in-process engine",
    )
    ps_bench.add_argument("--steps", type=_positive_int, default=30)
    ps_bench.add_argument(
        "--num-ps", type=_positive_int, default=2, help="number of ps processes (default 2)"
    )
    ps_bench.add_argument("--seed", type=int, default=0)
    ps_bench.set_defaults(run=_cmd_bench_ps)

    profile = benches.add_parser(
        "profile", help="py-spy of every process of one training job: each role's time per batch"
    )
    _add_workload(profile)
    profile.add_argument("--scale", type=float, default=1.0, help="default 1.0")
    profile.add_argument("--batches", type=_positive_int, default=100)
    profile.add_argument(
        "--warmup", type=int, default=10, help="batches trained before py-spy attaches (10)"
    )
    profile.add_argument("--launcher", choices=["local", "inprocess"], default="local")
    profile.add_argument(
        "--rate", type=_positive_int, default=100, help="py-spy's samples per second (default 100)"
    )
    profile.add_argument(
        "--native", action="store_true", help="py-spy --native: C frames too (slower sampling)"
    )
    profile.add_argument(
        "--nonblocking",
        action="store_true",
        help="py-spy --nonblocking: never pause a role (less overhead, some torn stacks)",
    )
    profile.add_argument(
        "--unprofiled", action="store_true", help="first run the job without py-spy too"
    )
    profile.add_argument(
        "--out", default="sniper-profile", help="raw stacks, icicle SVGs and budget.md go here"
    )
    profile.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    profile.add_argument("--seed", type=int, default=0)
    profile.set_defaults(
        run=_workload_bench(
            "_profile",
            *("scale", "batches", "warmup", "launcher", "rate", "native", "nonblocking", "out"),
            *("unprofiled", "markdown", "seed"),
        )
    )

    compile_cmd = benches.add_parser(
        "compile", help="import time and numba kernel compile time, cold and cached"
    )
    compile_cmd.set_defaults(run=_cmd_bench_compile)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sniper`` command line; returns the process exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    command: Command = args.run
    reuse_freed_memory()
    collect_less()
    try:
        return command(args)
    except (ValueError, LookupError, OSError) as exc:
        print(f"sniper: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("sniper: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
