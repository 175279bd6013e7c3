"""``sniper train``: one training job, end to end.

Every key of :class:`~sniper.cluster.TrainConfig` is a flag (generated from the config class,
see ``_config_flags``); the ones below are written by hand for their help or a stricter type,
or name servers started elsewhere (``--ps``, ``--hub``, ``--cluster-spec``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sniper.cli._config_flags import add_config_flags, config_overrides
from sniper.cli._parsing import EXIT_FAILED, Parser, fail, positive_int

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper train`` to ``commands``."""
    parser = commands.add_parser(
        "train", help="train end to end on a local cluster (embedded default without --config)"
    )
    parser.add_argument("--config", default=None, help="TOML file (experiments/configs/*.toml)")
    parser.add_argument("--ps", default=None, help="use these ps (host:port,...) instead")
    parser.add_argument("--hub", default=None, help="use these hubs (host:port,...) instead")
    parser.add_argument(
        "--cluster-spec", default=None, help="TOML of every ps and hub (started elsewhere)"
    )
    parser.add_argument(
        "--rank",
        type=int,
        default=None,
        help="train as this rank (1 to num_trainers - 1) of a job whose rank 0 is the sniper "
        "train at --master, or as the --cluster-spec's [[trainer]] of this rank (0: rank 0)",
    )
    parser.add_argument(
        "--master", default=None, help="host:port of rank 0's rendezvous (with --rank)"
    )
    parser.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="with --rank: exit when standard input ends (the launcher that started it is gone)",
    )
    parser.add_argument(
        "--data",
        default=None,
        help="synthetic, criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH (file, dir, glob)",
    )
    parser.add_argument(
        "--eval-data",
        default=None,
        help="held-out criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH, scored at the end",
    )
    parser.add_argument("--epochs", type=positive_int, default=None)
    parser.add_argument("--batch-size", type=positive_int, default=None)
    parser.add_argument("--output", default=None, help="JSON report path")
    parser.add_argument("--num-ps", type=positive_int, default=None)
    parser.add_argument("--num-hubs", type=positive_int, default=None)
    parser.add_argument(
        "--checkpoint-dir", default=None, help="checkpoint the job here (its end at least)"
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="steps between checkpoints (0: only at the end)",
    )
    parser.add_argument(
        "--resume", default=None, help="continue from a --checkpoint-dir (or its step-N)"
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=None,
        help="restarts from the latest checkpoint when a server dies (default 3)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="Prometheus metrics of the trainer here (0: a free port); the servers it starts "
        "get free ports, and every URL is printed",
    )
    parser.add_argument(
        "--quiet", action="store_true", default=None, help="no progress bar or progress lines"
    )
    parser.add_argument(
        "--launcher",
        default=None,
        metavar="NAME",
        help="run the ps and hubs inside this process (inprocess: no gRPC between them), as "
        "local processes over gRPC (local: a crashed role is restarted from the last "
        "checkpoint), as Ray actors (ray, sniper[ray]) or with a launcher plugin's name (the "
        "sniper.launchers entry points); auto (default): local when --ps, --hub or "
        "--cluster-spec name servers, else inprocess",
    )
    parser.add_argument(
        "--ray-address", default=None, help='the Ray cluster ("": a new local one; "auto")'
    )
    parser.defer(_add_config_flags)
    parser.set_defaults(run=run)


def _add_config_flags(parser: Parser) -> None:
    """The flags of the other keys: known only by importing the job (numba, grpclib)."""
    from sniper.cluster import TrainConfig

    add_config_flags(parser, TrainConfig, "config keys (each overrides --config's value)")


def run(args: argparse.Namespace) -> int:
    """Load the config (defaults, ``--config``, then flags) and run the job."""
    from pathlib import Path

    from sniper._config import load_config
    from sniper.cluster import TrainConfig, run_train
    from sniper.roles import CorruptCheckpointError, TrainingError
    from sniper.rpc import PeerError

    flags = config_overrides(TrainConfig, args)
    if args.quiet:
        flags["progress"] = False
    ps, hubs = args.ps, args.hub
    spec = None
    if args.cluster_spec:
        from sniper.cluster import load_cluster_spec

        if ps or hubs:
            raise ValueError("give --cluster-spec or --ps/--hub, not both")
        spec = load_cluster_spec(Path(args.cluster_spec))
        ps, hubs = spec.ps_addresses, spec.hub_addresses
        flags |= {"num_ps": len(spec.ps), "num_hubs": len(spec.hubs)}
        if spec.trainers:
            flags["num_trainers"] = len(spec.trainers)
    config = load_config(TrainConfig, Path(args.config) if args.config else None, flags)
    rank, master, entry = args.rank, args.master, None
    if spec is not None and (spec.trainers or rank is not None):
        if master is not None:
            raise ValueError(
                "give --cluster-spec or --master, not both: the spec's first [[trainer]] is "
                "the ranks' rendezvous"
            )
        rank = rank or 0
        entry = spec.rank(rank)
        master = spec.trainers[0].address
    elif (rank is None) != (master is None):
        raise ValueError("give --rank and --master together (a trainer rank joins rank 0)")
    try:
        if rank is not None and (rank or spec is None):  # rank 0 of a spec is sniper train's
            from sniper.cluster import run_rank

            assert master is not None
            return run_rank(
                config, rank, master, exit_with_stdin=args.exit_on_stdin_eof, entry=entry
            )
        return run_train(config, ps=ps, hubs=hubs, trainers=spec.trainers if spec else ())
    # A damaged checkpoint is the data's failure, not a usage error (status 2).
    except (TrainingError, CorruptCheckpointError, PeerError) as exc:
        # A rank's line shares the job's stderr with rank 0's, which may fail alike.
        line, where = _one_line(exc), f"trainer rank {rank}"
        named = line if not rank or line.startswith(where) else f"{where}: {line}"
        return fail(exc, named, EXIT_FAILED)


def _one_line(exc: BaseException) -> str:
    """A failed call between roles as ``<role> <address>: <STATUS>: <what to do>`` (the
    peer's :attr:`~sniper.rpc.PeerError.line`), whatever the job was doing; else the error."""
    from sniper.rpc import PeerError

    peer = exc if isinstance(exc, PeerError) else exc.__cause__
    return peer.line if isinstance(peer, PeerError) else str(exc)
