"""Supervision of a job's attempts: signals, exit grace and restarts, for every launcher.

An attempt (``sniper.cluster._abc.Attempt``) runs on an asyncio loop that a SIGTERM or SIGINT
cancels, so that every task unwinds at an ``await`` and the launcher's block then stops what it
started.

A role's death is one thing whenever it comes: while the roles start (a
:class:`~sniper.cluster.RoleStartError`, a replacement's included), while the job restores,
creates its variables or starts its hubs, mid-step, during a Save or during a restart's Restore.
When the attempt fails in any of those ways (a ``TrainingError``, a call's ``GRPCError`` or
``OSError``) and a role the launcher started has exited (within :data:`EXIT_GRACE`), every role
is stopped, the launcher starts them again, and the job resumes from its latest complete
checkpoint (``latest`` names a step only once all of it is written, so a Save cut short is
never used), or from where the job began when it has none yet. ``max_restarts`` bounds the
restarts; when it is spent, one line names the role, how often it died, and the last failure.
A failure with every role alive, or with no checkpoint directory, is the job's error.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from sniper.cluster._abc import Launch, Launcher, RoleStartError
from sniper.cluster._checkpoint import LATEST, load_job
from sniper.roles import RPC_ERRORS, TrainingError, TrainReport, describe_error

__all__ = ["EXIT_GRACE", "supervise"]

log = logging.getLogger("sniper.train")


def supervise(launcher: Launcher, launch: Launch) -> TrainReport:
    """Run ``launch`` on ``launcher`` until an attempt ends, restarting it from the job's
    latest checkpoint when a role the launcher started dies; the report counts the restarts
    and the steps trained again."""
    config = launch.config
    job = config.job_directory()
    # SIGTERM unwinds like Ctrl-C, so the launcher's block stops every server it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    latest_at_start = _latest(job)
    deaths: collections.Counter[str] = collections.Counter()
    restarts = lost_steps = 0
    while True:
        try:
            try:
                with launcher.start(launch) as attempt:
                    report = _run_training(attempt.job, attempt.died)
            except RoleStartError as exc:
                raise _RoleDied(exc.role, exc, None) from exc
            break
        except _RoleDied as died:
            deaths[died.role] += 1
            if job is None:
                raise TrainingError(
                    f"{died.role} died and there is no --checkpoint-dir to restart from: "
                    f"{died.cause}"
                ) from None
            if restarts >= config.max_restarts:
                raise TrainingError(_gave_up(died, deaths, config.max_restarts)) from None
            restarts += 1
            # The job's latest checkpoint once this run has written one; until then, where it
            # began (the checkpoint it resumed, or the start).
            if _latest(job) != latest_at_start:
                launch = dataclasses.replace(launch, resume=load_job(job))
            resume = launch.resume
            lost = max(0, (died.steps or 0) - (resume.step if resume is not None else 0))
            lost_steps += lost
            log.warning(
                "%s died (%s); restarting every process (restart %d of %d) from %s, "
                "%d step(s) lost",
                died.role,
                died.cause,
                restarts,
                config.max_restarts,
                f"the checkpoint of step {resume.step}" if resume else "the start",
                lost,
            )
    report.restarts = restarts
    report.lost_steps = lost_steps
    return report


def _latest(job: Path | None) -> str | None:
    """What ``job``'s ``latest`` names now (None: no checkpoint yet)."""
    if job is None or not (job / LATEST).is_file():
        return None
    return (job / LATEST).read_text().strip()


def _gave_up(died: _RoleDied, deaths: collections.Counter[str], max_restarts: int) -> str:
    """``ps 1 died 4 times; gave up after --max-restarts 3 (last: ...)``, other roles'
    deaths counted after the last one's."""
    others = [f"{role} {_times(n)}" for role, n in deaths.items() if role != died.role]
    also = f" (and {', '.join(others)})" if others else ""
    return (
        f"{died.role} died {_times(deaths[died.role])}{also}; gave up after --max-restarts "
        f"{max_restarts} (last: {died.cause})"
    )


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


class _RoleDied(Exception):
    """An attempt failed and a role the launcher started had exited: worth a restart."""

    def __init__(self, role: str, error: BaseException, steps: int | None) -> None:
        super().__init__(f"{role} died: {error}")
        self.role = role
        """How the launcher names it (``"ps 1"``)."""
        self.error = error
        self.steps = steps
        """Steps trained when the attempt failed; None: it failed before training."""

    @property
    def cause(self) -> str:
        """The failure's first line."""
        error = self.error
        named = isinstance(error, TrainingError | RoleStartError)
        text = str(error) if named else describe_error(error)
        return (text.splitlines() or [type(self.error).__name__])[0]


EXIT_GRACE = 2.0
"""Seconds a failed job waits for one of its servers to have exited before it gives up."""


def _exited_soon(died: Callable[[], str | None], grace: float = EXIT_GRACE) -> str | None:
    """The role that ``died()`` names within ``grace`` seconds, if any.

    A killed server's sockets close before its exit can be collected, so the trainer may hear
    "connection lost" while the process still polls as running (CI saw a job with a ps killed
    by -9 fail instead of restarting). A failure with every server alive costs ``grace``.
    """
    deadline = time.monotonic() + grace
    while (role := died()) is None:
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)
    return role


_ROLE_FAILURES = (TrainingError, *RPC_ERRORS)
"""What an attempt raises when a role fails under it, whatever the job was doing."""


def _run_training(
    job: Callable[[], Awaitable[TrainReport]], died: Callable[[], str | None] | None
) -> TrainReport:
    """Run ``job`` (one attempt at training); :class:`_RoleDied` when it failed and ``died()``
    names a role this launcher started that is gone (worth a restart). ``None``: no server
    runs apart from the job (one process), so a failure is never a restart."""
    try:
        # grpclib runs on asyncio: the gRPC transport picks the backend.
        report, signum = anyio.run(_until_signalled, job, backend="asyncio")
    except RoleStartError as exc:
        raise _RoleDied(exc.role, exc, None) from exc
    except _ROLE_FAILURES as exc:
        if died is not None and (role := _exited_soon(died)) is not None:
            steps = exc.steps if isinstance(exc, TrainingError) else None
            raise _RoleDied(role, exc, steps) from exc
        if isinstance(exc, TrainingError):
            raise
        # A call that failed outside the job's own wording is still a failure (exit 1), not
        # a traceback or a usage error.
        raise TrainingError(describe_error(exc)) from exc
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
