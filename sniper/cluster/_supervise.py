"""Supervision of a job's attempts: signals, exit grace and restarts, for every launcher.

An attempt (``sniper.cluster._abc.Attempt``) runs on an asyncio loop that watches for SIGTERM
and SIGINT. The first one, while a job with a checkpoint directory trains, is a preemption
(``sniper.cluster._preemption``): the trainer drains its pipeline, saves the job at the step it
reached and ends training, the attempt ends as a finished one does, and :class:`Preempted`
carries its report to ``sniper train``, which writes it and exits 128 + the signal (143, 130).
``preempt_grace`` seconds bound that save. Past them, on a second signal, or when there is
nothing to save (no checkpoint directory, training not started), the signal cancels the loop
instead, so that every task unwinds at an ``await`` and the launcher's block then stops what it
started; the latest complete checkpoint stays what it was. Each outcome is one line.

A role's death is one thing whenever it comes: while the roles start (a
:class:`~sniper.cluster.RoleStartError`, a replacement's included), while the job restores,
creates its variables or starts its hubs, mid-step, during a Save or during a restart's Restore.
When the attempt fails in any of those ways (a ``TrainingError``, a call's ``GRPCError`` or
``OSError``) and a role the launcher started has exited (within :data:`EXIT_GRACE`), every role
is stopped, the launcher starts them again, and the job resumes from its latest complete
checkpoint (``latest`` names a step only once all of it is written, so a Save cut short is
never used), or from where the job began when it has none yet. ``max_restarts`` bounds the
restarts; when it is spent, one line names the role, how often it died, and the last failure.
A role that stops answering (a call to it ran past its deadline while it still runs: hung,
stopped, swapping) is killed first, where the launcher started it
(:attr:`~sniper.cluster._abc.Attempt.stop_stuck`), and so dies. A failure with every role
alive, or with no checkpoint directory, is the job's error.
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
from grpclib.const import Status

from sniper.cluster._abc import Launch, Launcher, RoleStartError
from sniper.cluster._checkpoint import LATEST, load_job
from sniper.cluster._preemption import Preemption
from sniper.roles import RPC_ERRORS, TrainingError, TrainReport, describe_error
from sniper.rpc import peer_error

__all__ = ["EXIT_GRACE", "Preempted", "supervise"]

log = logging.getLogger("sniper.train")


class Preempted(Exception):
    """``sniper train`` was signalled and its job stopped after saving the step it reached:
    the report to write (:attr:`TrainReport.preempted`), and the exit status."""

    def __init__(self, report: TrainReport, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.report = report
        self.status = 128 + signum
        """143 for SIGTERM, 130 for SIGINT: a signal's exit, as without the save."""


def supervise(launcher: Launcher, launch: Launch) -> TrainReport:
    """Run ``launch`` on ``launcher`` until an attempt ends, restarting it from the job's
    latest checkpoint when a role the launcher started dies; the report counts the restarts
    and the steps trained again. :class:`Preempted` when a signal stopped it after its last
    checkpoint; ``SystemExit`` or ``KeyboardInterrupt`` when a signal stopped it at once."""
    config = launch.config
    job = config.job_directory()
    # SIGTERM unwinds like Ctrl-C, so the launcher's block stops every server it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # Several ranks stop at once on a signal: a last checkpoint would pause them all at one
    # step, which a signal to rank 0 alone cannot name in advance.
    saves = job is not None and config.preempt_grace > 0 and config.num_trainers == 1
    preemption = Preemption() if saves else None
    launch = dataclasses.replace(launch, preemption=preemption)
    on_signal = _OnSignal(job, preemption, config.preempt_grace, config.num_trainers)
    latest_at_start = _latest(job)
    deaths: collections.Counter[str] = collections.Counter()
    restarts = lost_steps = 0
    while True:
        try:
            try:
                with launcher.start(launch) as attempt:
                    report, signum = _run_training(
                        attempt.job, attempt.died, on_signal, attempt.stop_stuck
                    )
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
    if signum:
        on_signal.saved(signum, report)
        raise Preempted(report, signum)
    return report


def _latest(job: Path | None) -> bytes | None:
    """What ``job``'s ``latest`` holds now (None: no checkpoint yet), as bytes: only compared,
    so a damaged one (not UTF-8) is a value like any other here; :func:`load_job` names it."""
    if job is None or not (job / LATEST).is_file():
        return None
    return (job / LATEST).read_bytes().strip()


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
    job: Callable[[], Awaitable[TrainReport]],
    died: Callable[[], str | None] | None,
    on_signal: _OnSignal | None = None,
    stop_stuck: Callable[[str], str | None] | None = None,
) -> tuple[TrainReport, int]:
    """Run ``job`` (one attempt at training): its report, and the signal that stopped it
    after its last checkpoint (0: none). :class:`_RoleDied` when it failed and ``died()``
    names a role this launcher started that is gone (worth a restart). ``None``: no server
    runs apart from the job (one process), so a failure is never a restart. ``on_signal``:
    what a signal does (None: stop at once). ``stop_stuck``: the attempt's
    (:attr:`~sniper.cluster._abc.Attempt.stop_stuck`), asked first when a call ran past its
    deadline."""
    on_signal = on_signal or _OnSignal(None, None, 0.0)
    try:
        # grpclib runs on asyncio: the gRPC transport picks the backend.
        report, signum = anyio.run(_until_signalled, job, on_signal, backend="asyncio")
    except RoleStartError as exc:
        raise _RoleDied(exc.role, exc, None) from exc
    except _ROLE_FAILURES as exc:
        _stop_if_stuck(exc, stop_stuck)
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
    return report, signum


def _stop_if_stuck(exc: BaseException, stop_stuck: Callable[[str], str | None] | None) -> None:
    """Kill the role a failed call timed out on, if the attempt started it (see
    :attr:`~sniper.cluster._abc.Attempt.stop_stuck`): alive but not answering, it would fail
    the job's every call, and on its own it never exits to be restarted."""
    peer = peer_error(exc)
    if stop_stuck is None or peer is None:
        return
    if peer.status is Status.DEADLINE_EXCEEDED:
        role = stop_stuck(peer.peer.rpartition(" ")[2])
        if role is not None:
            log.warning("%s stopped answering (%s); killed it", role, peer.detail)


async def _until_signalled(
    job: Callable[[], Awaitable[TrainReport]], on_signal: _OnSignal
) -> tuple[TrainReport | None, int]:
    """Run ``job``; its report and 0, or the first SIGTERM or SIGINT meanwhile: ``(its
    report, the signal)`` when the job saved and ended as ``on_signal`` asked it to,
    ``(None, the signal)`` when it was cancelled (a second signal, the grace spent, nothing
    to save, or the save failed).

    Why cancel rather than let the signal raise where it lands: an exception thrown into
    whatever bytecode the main thread runs can stop the event loop before it runs the
    callbacks that stop anyio's worker threads, and the process then waits for them forever
    (CI saw a SIGTERMed ``sniper train`` hang so). Cancelling unwinds every task at an
    ``await``. The watcher is a task of the job's loop, so the trainer hears the request on
    its own thread, between two of its awaits.
    """
    outcome: list[TrainReport | Exception] = []
    received: list[int] = []
    async with anyio.create_task_group() as group:

        async def give_up(grace: float) -> None:
            await anyio.sleep(grace)
            on_signal.too_late(received[0])
            group.cancel_scope.cancel()

        async def watch() -> None:
            try:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        received.append(signum)
                        if len(received) > 1:
                            on_signal.again(signum)
                            break
                        if not on_signal.ask(signum):
                            break
                        group.start_soon(give_up, on_signal.grace)
            finally:
                # A signal after these while the job unwinds raises where it lands, as before.
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
        if outcome and isinstance(outcome[0], TrainReport) and on_signal.asked:
            return outcome[0], received[0]
        if outcome and isinstance(outcome[0], Exception) and len(received) == 1:
            on_signal.failed(received[0], outcome[0])
        return None, received[0]
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0], 0


class _OnSignal:
    """What a signal does to the job of ``directory`` (None: no checkpoints), and its lines:
    ask ``preemption`` (None: none) for a last checkpoint within ``grace`` seconds."""

    def __init__(
        self,
        directory: Path | None,
        preemption: Preemption | None,
        grace: float,
        ranks: int = 1,
    ):
        self.directory = directory
        self.preemption = preemption
        self.grace = grace
        self.ranks = ranks
        self.asked = False
        """The trainer was asked for its last checkpoint."""

    def ask(self, signum: int) -> bool:
        """The first signal: ask for the last checkpoint; False (with the line saying why
        nothing is saved) when there is nothing to ask."""
        name = signal.Signals(signum).name
        step = self.preemption.request() if self.preemption is not None else None
        if step is not None:
            self.asked = True
            log.warning(
                "%s: saving the job at the next clean cut (step %d trained), then stopping; "
                "within preempt_grace %g s, or at once on a second signal",
                name,
                step,
                self.grace,
            )
            return True
        if self.directory is None:
            why = "no --checkpoint-dir"
        elif not self.grace:
            why = "preempt_grace 0"
        elif self.ranks > 1:
            why = f"num_trainers {self.ranks} saves none on a signal; {self._latest()}"
        else:
            why = f"training had not started; {self._latest()}"
        log.warning("%s: stopping at once; nothing saved (%s)", name, why)
        return False

    def saved(self, signum: int, report: TrainReport) -> None:
        """The job saved and stopped as asked."""
        log.warning(
            "%s: stopped at step %d; %s; sniper train --resume %s continues the job",
            signal.Signals(signum).name,
            report.steps,
            self._latest(),
            self.directory,
        )

    def again(self, signum: int) -> None:
        """A second signal: the save is abandoned."""
        log.warning(
            "%s again: stopping at once without the checkpoint; %s",
            signal.Signals(signum).name,
            self._latest(),
        )

    def too_late(self, signum: int) -> None:
        """``grace`` seconds passed before the save ended: it is abandoned."""
        log.warning(
            "%s: the checkpoint did not finish within preempt_grace %g s; stopping without it; %s",
            signal.Signals(signum).name,
            self.grace,
            self._latest(),
        )

    def failed(self, signum: int, error: Exception) -> None:
        """The job failed after the signal (the save included)."""
        if not self.asked:
            return
        text = str(error) if isinstance(error, TrainingError) else describe_error(error)
        log.warning(
            "%s: the checkpoint failed (%s); %s",
            signal.Signals(signum).name,
            (text.splitlines() or [type(error).__name__])[0],
            self._latest(),
        )

    def _latest(self) -> str:
        latest = _latest(self.directory)
        if latest is None:
            return "no checkpoint yet"
        return f"the latest checkpoint is {self.directory}/{latest.decode(errors='replace')}"


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
