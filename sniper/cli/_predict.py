"""``sniper predict``: write a data file's scores by a job checkpoint's model to Parquet."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sniper.cli._eval import add_config_argument, scoring_config

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper predict`` to ``commands``."""
    parser = commands.add_parser(
        "predict",
        help="write a data file's scores by a job checkpoint's model to Parquet (no training)",
    )
    parser.add_argument("--checkpoint", required=True, help="a --checkpoint-dir or step-N")
    parser.add_argument(
        "--data", required=True, help="criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH"
    )
    parser.add_argument(
        "--output",
        required=True,
        help="the file to write, Parquet (CSV if named .csv, TSV if .tsv): row, the data's "
        "label columns (where it has them), "
        "<label>_score",
    )
    parser.add_argument(
        "--keep",
        default="",
        metavar="COLUMNS",
        help="columns of the data to write beside the scores, comma-separated (a table's ids, "
        "to join the scores on: --keep user_id,item_id)",
    )
    add_config_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Score ``--data`` with the model of ``--checkpoint`` into ``--output``."""
    from sniper.cluster import run_predict

    keep = tuple(name.strip() for name in args.keep.split(",") if name.strip())
    return run_predict(args.checkpoint, args.data, args.output, scoring_config(args), keep)
