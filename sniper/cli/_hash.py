"""``sniper hash``: the hash of variable names, and the ps that owns each."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sniper.cli._parsing import positive_int

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper hash`` to ``commands``."""
    parser = commands.add_parser("hash", help="print string_to_u64 of variable names")
    parser.add_argument("names", nargs="+", metavar="NAME")
    parser.add_argument(
        "--num-ps",
        type=positive_int,
        default=0,
        help="also print the ps that owns each name in a cluster of N",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print each name, its hash and (with ``--num-ps``) its ps."""
    from sniper.hashing import ps_for_variable, string_to_u64

    for name in args.names:
        line = f"{name}\t{string_to_u64(name)}"
        if args.num_ps:
            line += f"\tps {ps_for_variable(name, args.num_ps)}"
        print(line)
    return 0
