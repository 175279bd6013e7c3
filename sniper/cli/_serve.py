"""``sniper serve``: one ps or hub, until SIGINT or SIGTERM.

Every key of :class:`~sniper.transport.ServeConfig` is a flag (generated from the config
class, see ``_config_flags``: ``--auth-token-file``, ``--tls-cert``, ...); the ones below are
written by hand for their help or a stricter type, or place this server in a cluster spec.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sniper.cli._config_flags import add_config_flags, config_overrides
from sniper.cli._parsing import Parser, positive_int

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper serve`` to ``commands``."""
    parser = commands.add_parser("serve", help="run a ps or a hub until SIGINT or SIGTERM")
    parser.add_argument("--host", default=None, help="default 127.0.0.1 (loopback)")
    parser.add_argument("--port", type=int, default=None, help="0 (default) picks a free port")
    parser.add_argument(
        "--scheduler",
        default=None,
        help="adaptive (default), inline, per_variable, thread_pool or work_stealing",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="scheduler threads (default 0: one per core)"
    )
    parser.add_argument("--config", default=None, help="TOML file with the same keys")
    parser.add_argument(
        "--cluster-spec",
        default=None,
        help="TOML of every ps and hub: this server's address (and a hub's ps) come from it",
    )
    parser.add_argument(
        "--index", type=int, default=None, help="which ps or hub of --cluster-spec this is"
    )
    parser.add_argument(
        "--nonfinite",
        choices=["reject", "drop"],
        default=None,
        help="what a NaN or Inf gradient gets (default reject)",
    )
    parser.add_argument(
        "--checkpoint-root",
        default=None,
        help="Save and Restore only under this directory (default: none, both refused)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics here (0: a free port, printed after the listening line)",
    )
    parser.add_argument(
        "--stats-interval",
        type=float,
        default=None,
        help="seconds between latency log lines (default 10)",
    )
    parser.add_argument(
        "--http2-window-mb",
        type=float,
        default=None,
        help="HTTP/2 flow-control windows (default 16; grpclib's own is 4)",
    )
    parser.add_argument(
        "--http2-frame-kb",
        type=int,
        default=None,
        help="largest HTTP/2 frame this server accepts (default 512; HTTP/2's own is 16)",
    )
    parser.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        default=None,
        help="also stop when standard input closes (for launchers)",
    )
    hub = parser.add_argument_group("hub")
    hub.add_argument("--ps", default=None, help="host:port,... of every ps, in cluster order")
    hub.add_argument(
        "--data",
        default=None,
        help="synthetic (default), parquet:PATH, criteo:PATH, csv:PATH or tsv:PATH",
    )
    hub.add_argument("--workload", default=None, help="workload of synthetic data")
    hub.add_argument("--scale", type=float, default=None, help="synthetic size factor")
    hub.add_argument("--num-batches", type=positive_int, default=None)
    hub.add_argument("--batch-size", type=positive_int, default=None)
    hub.add_argument("--epochs", type=positive_int, default=None)
    hub.add_argument("--num-hubs", type=positive_int, default=None)
    parser.defer(_add_config_flags)
    parser.set_defaults(run=run)


def _add_config_flags(parser: Parser) -> None:
    """The flags of the other keys: known only by importing the server (numba, grpclib)."""
    from sniper.cluster import ServeConfig

    add_config_flags(parser, ServeConfig, "config keys (each overrides --config's value)")


def run(args: argparse.Namespace) -> int:
    """Load the config (defaults, ``--config``, the cluster spec's entry, then flags) and
    serve until a signal."""
    from pathlib import Path

    from sniper._config import load_config
    from sniper.cluster import ServeConfig, run_serve

    flags = config_overrides(ServeConfig, args)
    if args.cluster_spec:
        from sniper.cluster import load_cluster_spec

        if args.index is None or args.role is None:
            raise ValueError("--cluster-spec needs --role and --index: which server this is")
        # The spec says where this server listens and what it feeds; flags cannot disagree.
        flags |= load_cluster_spec(Path(args.cluster_spec)).server(args.role, args.index)
    elif args.index is not None:
        raise ValueError("--index picks a server of --cluster-spec; give the spec too")
    config = load_config(ServeConfig, Path(args.config) if args.config else None, flags)
    return run_serve(config)
