"""``sniper eval``: score a data file with a job checkpoint's model, without training."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands
    from sniper.cluster import TrainConfig

__all__ = ["add_config_argument", "add_parser", "run", "scoring_config"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper eval`` to ``commands``."""
    parser = commands.add_parser(
        "eval", help="score a data file with a job checkpoint's model (no training)"
    )
    parser.add_argument("--checkpoint", required=True, help="a --checkpoint-dir or step-N")
    parser.add_argument(
        "--data", required=True, help="criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH"
    )
    add_config_argument(parser)
    parser.set_defaults(run=run)


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """``--config``, optional: a checkpoint holds its model and widths, and the ps that score
    need none of the training's settings."""
    parser.add_argument(
        "--config",
        default=None,
        help="optional: the training TOML (its batch size and ps settings; its [model] for a "
        "checkpoint that records none)",
    )


def scoring_config(args: argparse.Namespace) -> TrainConfig:
    """The ``--config`` given, else the defaults, with checkpointing keys off (they do not
    apply to scoring)."""
    from pathlib import Path

    from sniper._config import load_config
    from sniper.cluster import TrainConfig

    overrides = {"checkpoint_every": 0, "resume": "", "checkpoint_dir": ""}
    return load_config(TrainConfig, Path(args.config) if args.config else None, overrides)


def run(args: argparse.Namespace) -> int:
    """Score ``--data`` with the model of ``--checkpoint``."""
    from sniper.cluster import run_eval

    return run_eval(args.checkpoint, args.data, scoring_config(args))
