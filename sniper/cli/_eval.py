"""``sniper eval``: score a data file with a job checkpoint's model, without training."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper eval`` to ``commands``."""
    parser = commands.add_parser(
        "eval", help="score a data file with a job checkpoint's model (no training)"
    )
    parser.add_argument("--checkpoint", required=True, help="a --checkpoint-dir or step-N")
    parser.add_argument("--data", required=True, help="criteo:PATH or parquet:PATH")
    parser.add_argument(
        "--config",
        default=None,
        help="the training TOML (its ps settings; its [model] for a checkpoint without one)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Score ``--data`` with the model of ``--checkpoint``."""
    from pathlib import Path

    from sniper._config import load_config
    from sniper.cluster import TrainConfig, run_eval

    # Only the model's shape is read from it: checkpointing keys do not apply here.
    overrides = {"checkpoint_every": 0, "resume": "", "checkpoint_dir": ""}
    config = load_config(TrainConfig, Path(args.config) if args.config else None, overrides)
    return run_eval(args.checkpoint, args.data, config)
