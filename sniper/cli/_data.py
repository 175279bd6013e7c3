"""``sniper data``: prepare training data (``convert``: Criteo TSV or synthetic to Parquet;
``inspect``: a user's table's columns and a ``[features]`` table for it)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sniper.cli._parsing import positive_int

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run_convert", "run_inspect"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper data`` and its actions to ``commands``."""
    data = commands.add_parser("data", help="prepare training data")
    actions = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    convert = actions.add_parser("convert", help="write Criteo TSV or synthetic data as Parquet")
    convert.add_argument(
        "kind",
        choices=["criteo", "synthetic"],
        help="criteo: a Criteo TSV file; synthetic: planted-model data",
    )
    convert.add_argument(
        "out",
        nargs="+",
        help="Parquet file to write (appears only when complete); synthetic: several files "
        "hold other examples each (file i: the generator's epoch i)",
    )
    convert.add_argument(
        "--source",
        default=None,
        help="criteo: the TSV file (required); synthetic: workload (seed_ctr)",
    )
    convert.add_argument(
        "--batch-size", type=positive_int, default=None, help="examples per batch and row group"
    )
    convert.add_argument(
        "--num-batches",
        type=positive_int,
        default=None,
        help="batches to write (required for synthetic; criteo: stop early)",
    )
    convert.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="synthetic only: multiplies signs per batch and vocabularies",
    )
    convert.add_argument("--seed", type=int, default=0, help="synthetic only")
    convert.set_defaults(run=run_convert)
    inspect = actions.add_parser(
        "inspect", help="a Parquet, CSV or TSV table's columns, rows and a [features] table"
    )
    inspect.add_argument(
        "path",
        help="a file, a directory or a glob, or parquet:PATH, csv:PATH, tsv:PATH as in --data",
    )
    inspect.set_defaults(run=run_inspect)


def run_convert(args: argparse.Namespace) -> int:
    """Write the Parquet files and say how many examples they hold."""
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
    print(f"wrote {rows:,} examples to {', '.join(args.out)}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    """Print the table's columns, rows and row groups, and a suggested ``[features]`` table."""
    from sniper.data import inspect_table

    print(inspect_table(args.path))
    return 0
