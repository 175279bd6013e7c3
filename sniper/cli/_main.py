"""The ``sniper`` command: the root parser, assembled from each command group's module.

Errors a user can fix (a bad flag value, an unknown workload or scheduler) print one line
``sniper: error: ...`` and exit with status 2; a job that fails, one line and status 1; an
error sniper did not expect (a bug), one line naming it and status 1. None prints a traceback
unless ``--debug`` (anywhere on the command line) asks for one. Output into a pipe closed early
ends a command quietly, status 141 (see :func:`main`).
"""

from __future__ import annotations

import os
import select
import signal
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
from sniper.cli._parsing import DEBUG, EXIT_FAILED, EXIT_USAGE, Command, Parser, fail, set_debug
from sniper.runtime import collect_less, reuse_freed_memory

__all__ = ["EXIT_PIPE", "build_parser", "main"]

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
    parser.add_argument(
        *DEBUG, action="store_true", help="print a failure's traceback above its one line"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sniper`` command line; returns the process exit status.

    Output into a pipe whose reader is gone (``sniper data inspect X | head``) ends the
    command quietly with status :data:`EXIT_PIPE`, as a unix tool that ``SIGPIPE`` stops:
    Python ignores the signal, so every ``print`` would raise ``BrokenPipeError`` for an
    ``sniper: error: [Errno 32] Broken pipe``, and the interpreter's last flush would print
    a second complaint. A broken pipe that is not standard output's (a child's input) is an
    error as any other ``OSError``.
    """
    try:
        status = _run(argv)
        sys.stdout.flush()  # what a closed stdout refuses fails here, not as Python exits
    except BrokenPipeError as exc:
        if not _stdout_closed():
            return fail(exc, str(exc), EXIT_USAGE)
        _discard_stdout()
        return EXIT_PIPE
    return status


def _run(argv: Sequence[str] | None) -> int:
    """:func:`main`'s command line, its errors one line each (see the module doc)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = any(arg in DEBUG for arg in argv)  # after a command too: sniper train ... --debug
    set_debug(debug)
    # Before the parser: building a command's flags imports pyarrow, which picks its allocator
    # as it loads (see reuse_freed_memory). After it, collect_less freezes what those imports
    # made, which the collector then never walks again.
    reuse_freed_memory()
    args = build_parser().parse_args([arg for arg in argv if arg not in DEBUG])
    command: Command = args.run
    collect_less()
    try:
        return command(args)
    except BrokenPipeError:
        raise  # main's: standard output closed, or an error as any OSError
    except (ValueError, LookupError, OSError) as exc:
        return fail(exc, str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        print("sniper: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line, the traceback with --debug
        hint = "" if debug else "; run again with --debug for the traceback"
        if _models_error(exc):  # the user's model's bug, not sniper's
            return fail(exc, f"{exc}{hint}", EXIT_FAILED)
        return fail(exc, f"{type(exc).__name__}: {exc} (a bug in sniper{hint})", EXIT_FAILED)


EXIT_PIPE = 128 + signal.SIGPIPE
"""The status of a command whose standard output was closed: a shell's for a process that
``SIGPIPE`` ended (141), what ``yes | head`` leaves ``yes``."""


def _stdout_closed() -> bool:
    """Whether standard output is a pipe (or socket) with no reader left: the kernel reports
    an error condition on it (``POLLERR``), which it does not for one that is open."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced (a test's capture) or closed
        return False
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point standard output at ``/dev/null``, so that what Python still holds for it is
    written nowhere as it exits, rather than failing a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _models_error(exc: Exception) -> bool:
    """Whether ``exc`` is a :class:`sniper.models.ModelError`, without importing the models
    (half a second) into every command: none was raised where they were never imported."""
    models = sys.modules.get("sniper.models")
    return models is not None and isinstance(exc, models.ModelError)
