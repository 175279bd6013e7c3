"""What every command group's parser is built from: the parser class, argument types, and the
exit statuses a command returns.

A command's flags that need a heavy import to be known (those generated from a config
dataclass that lives beside numba kernels or gRPC code) are *deferred*: added when that
command's own arguments are parsed or its help is shown, never when ``sniper --help`` lists
the commands.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "Command",
    "Commands",
    "Parser",
    "add_workload",
    "fail",
    "positive_int",
    "set_debug",
]

EXIT_FAILED = 1
EXIT_USAGE = 2

DEBUG = ["--debug"]
"""The flag that adds a failure's traceback above its one line (anywhere on the line)."""


class _Debug:
    on = False
    """Whether ``--debug`` was given: :func:`fail` then prints the traceback."""


def set_debug(on: bool) -> None:
    """Whether :func:`fail` prints tracebacks (``--debug``), for this process."""
    _Debug.on = on


def fail(exc: BaseException, line: str, status: int) -> int:
    """Print a failure as ``sniper: error: <line>`` (with ``--debug``, its traceback first);
    the exit status ``status``."""
    if _Debug.on:
        traceback.print_exception(exc, file=sys.stderr)
    print(f"sniper: error: {line}", file=sys.stderr)
    return status


Command: TypeAlias = Callable[[argparse.Namespace], int]
"""A command's ``run``: its parsed arguments in, the process exit status out."""

if TYPE_CHECKING:
    Commands: TypeAlias = argparse._SubParsersAction["Parser"]
    """What a command group's ``add_parser`` adds its command to."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose deferred flags are added on first use (see the module doc).

    A subcommand's parser is first used when the root parser hands it the command line's rest
    (``parse_known_args``), or when its help or usage is formatted.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deferred: list[Callable[[Parser], None]] = []

    def defer(self, add: Callable[[Parser], None]) -> None:
        """Call ``add(self)`` to add flags when this parser is first used, not now."""
        self._deferred.append(add)

    def _add_deferred(self) -> None:
        while self._deferred:
            self._deferred.pop(0)(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._add_deferred()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._add_deferred()
        return super().format_usage()

    def format_help(self) -> str:
        self._add_deferred()
        return super().format_help()


def positive_int(text: str) -> int:
    """An argument type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_workload(parser: argparse.ArgumentParser) -> None:
    """``--workload``, as every command that generates synthetic data takes it."""
    parser.add_argument(
        "--workload",
        default="seed_ctr",
        help="built-in workload (seed_ctr, criteo, criteo_two_labels) or a workload JSON file "
        "(default: seed_ctr)",
    )
