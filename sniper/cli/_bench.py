"""``sniper bench``: measure sniper against a peer in the same run.

Each bench's module (``sniper._bench.<name>``) is imported only when its command runs: some
import torch or grpcio.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING

from sniper.cli._parsing import Command, add_workload, positive_int

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["WIRE_DTYPES", "add_parser", "run_chaos", "run_compile", "run_ps"]

WIRE_DTYPES = ("float32", "bfloat16", "float16")
"""``sniper.rpc._tensor.FLOAT_DTYPES``, named here so that parsing a command line does not
import the gRPC stack (a test keeps the two equal)."""


def add_parser(commands: Commands) -> None:
    """Add ``sniper bench`` and every bench to ``commands``."""
    bench = commands.add_parser("bench", help="measure sniper against a peer in the same run")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    store = benches.add_parser("store", help="embedding store vs torch EmbeddingBag and a dict")
    add_workload(store)
    store.add_argument(
        "--batches",
        type=positive_int,
        default=4,
        help="distinct batches generated per case (default 4)",
    )
    store.add_argument("--repeats", type=positive_int, default=10)
    store.add_argument("--dict-repeats", type=positive_int, default=2)
    store.add_argument("--threads", type=positive_int, default=2)
    store.add_argument("--prefill-rows", type=positive_int, default=2_000_000)
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
    add_workload(scheduler)
    scheduler.add_argument("--workers", type=positive_int, default=2)
    scheduler.add_argument("--steps", type=positive_int, default=20)
    scheduler.add_argument("--batches", type=positive_int, default=4)
    scheduler.add_argument("--seed", type=int, default=0)
    scheduler.set_defaults(run=_workload_bench("_scheduler", "workers", "steps", "batches", "seed"))
    rpc = benches.add_parser("rpc", help="seed_ctr EmbeddingLookup over loopback vs grpcio")
    add_workload(rpc)
    rpc.add_argument("--repeats", type=positive_int, default=20)
    rpc.add_argument(
        "--window-mb",
        type=float,
        default=16.0,
        help="HTTP/2 windows of the sniper server and client (default 16)",
    )
    rpc.add_argument("--workers", type=positive_int, default=2)
    rpc.set_defaults(run=_workload_bench("_rpc", "repeats", "window_mb", "workers"))
    e2e = benches.add_parser("e2e", help="local cluster training vs torch in one process")
    add_workload(e2e)
    e2e.add_argument(
        "--scale", type=float, default=1.0, help="1.0 is the workload's own shape (default)"
    )
    e2e.add_argument("--batches", type=positive_int, default=100)
    e2e.add_argument("--threads", type=positive_int, default=2, help="the peer's threads (2)")
    e2e.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="each ps's worker threads (default: the job's, the machine's cores shared among "
        "its ps); with --threads, a scaling run on a machine of more cores",
    )
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
    e2e.add_argument(
        "--model",
        default="mlp",
        help="sniper's dense model ([model] factory): mlp (the numpy MLP, default) or torch_mlp "
        "(the same MLP in torch, sniper[torch]); the peer's model is the same MLP either way, "
        "except dlrm with --peer torchrec: TorchRec's DLRM (EmbeddingBagCollection with "
        "apply_optimizer_in_backward, the same dense layers), held-out AUCs compared",
    )
    e2e.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="measure sniper and the peer this many times in turn, then print each row's "
        "ratios and efficiencies across the rounds, their medians, and in how many rounds each "
        "target was met: it holds in 80%% of them, rounded up (4 of 5); default 1",
    )
    e2e.set_defaults(
        run=_workload_bench(
            "_e2e",
            "scale",
            "batches",
            "seed",
            "threads",
            "launcher",
            "peer",
            "wire_dtype",
            "model",
            "rounds",
            "workers",
        )
    )
    memory = benches.add_parser(
        "memory", help="a ps process's RSS per row of a full table vs the target and torch"
    )
    add_workload(memory)
    memory.add_argument(
        "--rows", type=positive_int, default=4_000_000, help="rows of the table (default 4M)"
    )
    memory.set_defaults(run=_workload_bench("_memory", "rows"))
    ps_bench = benches.add_parser(
        "ps", help="the ps side of training steps (FeedSample, lookup, push) on a workload"
    )
    add_workload(ps_bench)
    ps_bench.add_argument(
        "--scheduler",
        default="adaptive",
        help="adaptive (default), inline, per_variable, thread_pool or work_stealing",
    )
    ps_bench.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="worker threads per ps (default 1: the ps share the cores)",
    )
    ps_bench.add_argument(
        "--transport",
        choices=["grpc", "inprocess"],
        default="grpc",
        help="real ps processes over gRPC (default), or one in-process engine",
    )
    ps_bench.add_argument("--steps", type=positive_int, default=30)
    ps_bench.add_argument(
        "--num-ps", type=positive_int, default=2, help="number of ps processes (default 2)"
    )
    ps_bench.add_argument("--seed", type=int, default=0)
    ps_bench.set_defaults(run=run_ps)

    profile = benches.add_parser(
        "profile", help="py-spy of every process of one training job: each role's time per batch"
    )
    add_workload(profile)
    profile.add_argument("--scale", type=float, default=1.0, help="default 1.0")
    profile.add_argument("--batches", type=positive_int, default=100)
    profile.add_argument(
        "--warmup", type=int, default=10, help="batches trained before py-spy attaches (10)"
    )
    profile.add_argument("--launcher", choices=["local", "inprocess"], default="local")
    profile.add_argument(
        "--rate", type=positive_int, default=100, help="py-spy's samples per second (default 100)"
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

    chaos = benches.add_parser(
        "chaos",
        help="kill random roles of small local jobs at random moments: how many held",
        description="Run small `sniper train --launcher local --checkpoint-dir` jobs and kill a "
        "random ps or hub (kill -9) at one or two random moments of each. A trial held when "
        "the job finished by itself (exit 0) with the steps and examples of an uninterrupted "
        "run and no role left running. Prints each trial, then the held and broke counts "
        "with each failure's first line; exits 1 if any broke.",
    )
    chaos.add_argument("--trials", type=positive_int, default=10, help="jobs to run (10)")
    chaos.add_argument("--seed", type=int, default=0, help="draws the victims and moments (0)")
    chaos.add_argument("--scale", type=float, default=0.005, help="synthetic data scale (0.005)")
    chaos.add_argument("--batches", type=positive_int, default=60, help="batches per job (60)")
    chaos.add_argument(
        "--checkpoint-every", type=positive_int, default=20, help="steps between checkpoints (20)"
    )
    chaos.set_defaults(run=run_chaos)

    compile_cmd = benches.add_parser(
        "compile", help="import time and numba kernel compile time, cold and cached"
    )
    compile_cmd.set_defaults(run=run_compile)


def _workload_bench(module: str, *options: str) -> Command:
    """A ``sniper bench`` command: ``sniper._bench.<module>.run(workload, **options)``."""

    def command(args: argparse.Namespace) -> int:
        from sniper.data import load_workload

        bench = importlib.import_module(f"sniper._bench.{module}")
        bench.run(load_workload(args.workload), **{name: getattr(args, name) for name in options})
        return 0

    return command


def run_ps(args: argparse.Namespace) -> int:
    """``sniper bench ps``: the scheduler's name is checked before any ps starts."""
    from sniper._bench._ps import PsBenchConfig, run
    from sniper.data import load_workload
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


def run_chaos(args: argparse.Namespace) -> int:
    """``sniper bench chaos``: 1 if any trial broke."""
    import sys

    from sniper._bench._chaos import run

    try:
        trials = run(args.trials, args.seed, args.scale, args.batches, args.checkpoint_every)
    except RuntimeError as exc:  # the uninterrupted run failed: nothing to compare with
        print(f"sniper: error: {exc}", file=sys.stderr)
        return 1
    return 0 if all(trial.failure is None for trial in trials) else 1


def run_compile(args: argparse.Namespace) -> int:
    """``sniper bench compile``."""
    from sniper._bench import _compile

    _compile.run()
    return 0
