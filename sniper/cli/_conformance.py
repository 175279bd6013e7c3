"""``sniper conformance``: check a port of sniper's hashes in another language."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper conformance`` to ``commands``."""
    parser = commands.add_parser(
        "conformance",
        help="check a port of sniper's hashes in another language (conformance hash -- CMD)",
        # conformance_main parses its own arguments, --help included: every argument, even
        # -h and --, reaches it untouched ('+' is a prefix no argument of it starts with).
        add_help=False,
        prefix_chars="+",
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Hand every argument to the conformance checker's own parser."""
    from sniper._contracts._hash import conformance_main

    return conformance_main(args.argv)
