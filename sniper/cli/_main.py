"""The ``sniper`` command: the root parser, assembled from each command group's module.

Errors a user can fix (a bad flag value, an unknown workload or scheduler) print one line
``sniper: error: ...`` and exit with status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from sniper.cli import (
    _bench,
    _conformance,
    _data,
    _eval,
    _experiment,
    _hash,
    _placement,
    _predict,
    _reshard,
    _serve,
    _train,
)
from sniper.cli._parsing import EXIT_USAGE, Command, Parser
from sniper.runtime import collect_less, reuse_freed_memory

__all__ = ["build_parser", "main"]

GROUPS = (
    _hash,
    _placement,
    _eval,
    _predict,
    _reshard,
    _train,
    _serve,
    _conformance,
    _data,
    _experiment,
    _bench,
)
"""The command groups, in the order ``sniper --help`` lists them."""


def build_parser() -> Parser:
    """The root parser, every command group's parser added to it."""
    parser = Parser(
        prog="sniper",
        description="A Python parameter server for CTR models with huge sparse embeddings.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sniper`` command line; returns the process exit status."""
    args = build_parser().parse_args(argv)
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
