"""Supervision of a job's attempts: signals, exit grace and restarts, for every launcher.

An attempt (``sniper.cluster._abc.Attempt``) runs on an asyncio loop that a SIGTERM or SIGINT
cancels, so that every task unwinds at an ``await`` and the launcher's block then stops what it
started. When training fails and a role the launcher started has exited (within
:data:`EXIT_GRACE`), the failure is worth a restart: every role is stopped, the launcher
starts them again, and the job resumes from its latest checkpoint, at most ``max_restarts``
times. A failure with every role alive, or with no checkpoint directory, is the job's error.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from collections.abc import Awaitable, Callable

import anyio

from sniper.cluster._abc import Launch, Launcher
from sniper.cluster._checkpoint import LATEST, load_job
from sniper.roles import TrainingError, TrainReport

__all__ = ["EXIT_GRACE", "supervise"]

log = logging.getLogger("sniper.train")


def supervise(launcher: Launcher, launch: Launch) -> TrainReport:
    """Run ``launch`` on ``launcher`` until an attempt ends, restarting it from the job's
    latest checkpoint when a role the launcher started dies; the report counts the restarts
    and the steps trained again."""
    config = launch.config
    # SIGTERM unwinds like Ctrl-C, so the launcher's block stops every server it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    restarts = lost_steps = 0
    while True:
        try:
            with launcher.start(launch) as attempt:
                report = _run_training(attempt.job, attempt.died)
            break
        except _ServerDied as died:
            job = config.job_directory()
            if job is None or restarts >= config.max_restarts:
                raise died.error from None
            restarts += 1
            resume = load_job(job) if (job / LATEST).is_file() else None
            launch = dataclasses.replace(launch, resume=resume)
            lost = died.steps - (resume.step if resume is not None else 0)
            lost_steps += lost
            log.warning(
                "%s; restarting every process (restart %d of %d) from %s, %d step(s) lost",
                died.error,
                restarts,
                config.max_restarts,
                f"the checkpoint of step {resume.step}" if resume else "the start",
                lost,
            )
    report.restarts = restarts
    report.lost_steps = lost_steps
    return report


class _ServerDied(Exception):
    """Training failed and a process the launcher started had exited: worth a restart."""

    def __init__(self, error: TrainingError, steps: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.steps = steps


EXIT_GRACE = 2.0
"""Seconds a failed job waits for one of its servers to have exited before it gives up."""


def _exited_soon(died: Callable[[], bool], grace: float = EXIT_GRACE) -> bool:
    """Whether ``died()`` becomes true within ``grace`` seconds.

    A killed server's sockets close before its exit can be collected, so the trainer may hear
    "connection lost" while the process still polls as running (CI saw a job with a ps killed
    by -9 fail instead of restarting). A failure with every server alive costs ``grace``.
    """
    deadline = time.monotonic() + grace
    while not died():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _run_training(
    job: Callable[[], Awaitable[TrainReport]], died: Callable[[], bool] | None
) -> TrainReport:
    """Run ``job`` (one attempt at training); :class:`_ServerDied` when it failed and
    ``died()`` says a server this launcher started is gone (worth a restart). ``None``: no
    server runs apart from the job (one process), so a failure is never a restart."""
    try:
        # grpclib runs on asyncio: the gRPC transport picks the backend.
        report, signum = anyio.run(_until_signalled, job, backend="asyncio")
    except TrainingError as exc:
        if died is not None and _exited_soon(died):
            raise _ServerDied(exc, exc.steps) from exc
        raise
    except BaseExceptionGroup as group:
        # SIGTERM (SystemExit) or Ctrl-C landing in a task comes out of its task group
        # wrapped; the command must still exit as the signal asks.
        interrupt = _interrupt_in(group)
        if interrupt is not None:
            raise interrupt from None
        raise
    finally:
        # The loop's signal handling is gone with it; SIGTERM unwinds the launcher again.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if report is None:
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)
    return report


async def _until_signalled(
    job: Callable[[], Awaitable[TrainReport]],
) -> tuple[TrainReport | None, int]:
    """Run ``job``; a SIGTERM or SIGINT meanwhile cancels it: ``(None, the signal)``.

    Why not let the signal raise where it lands: an exception thrown into whatever bytecode
    the main thread runs can stop the event loop before it runs the callbacks that stop
    anyio's worker threads, and the process then waits for them forever (CI saw a
    SIGTERMed ``sniper train`` hang so). Cancelling unwinds every task at an ``await``.
    """
    outcome: list[TrainReport | Exception] = []
    received: list[int] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    received.append(signum)
                    break
            # A second signal while the job unwinds raises where it lands, as before.
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            outcome.append(await job())
        except Exception as exc:  # raised below as it is, not wrapped in the group's
            outcome.append(exc)
        finally:
            group.cancel_scope.cancel()
    if received:
        return None, received[0]
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0], 0


def _interrupt_in(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The ``SystemExit`` or ``KeyboardInterrupt`` inside ``group``, however deeply nested."""
    for exc in group.exceptions:
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (inner := _interrupt_in(exc)) is not None:
            return inner
    return None


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
