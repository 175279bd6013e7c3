"""The interface every launcher implements: where a job's ps and hubs run.

A launcher starts the roles of one attempt at a job and hands back the job to run on them;
everything around an attempt is the same for every launcher and lives elsewhere: planning
before it (``sniper.cluster._plan``), the event loop, signals and restarts around it
(``sniper.cluster._supervise``), the report after it (``sniper.cluster._report``). The job
itself (restore or place, create the variables, start the hubs, train) is
``sniper.cluster._job.run_job`` whatever carries its calls.

Built-ins (``inprocess``, ``local``, ``ray``) and plugins (a :class:`Launcher` subclass named
in the ``sniper.launchers`` entry-point group, constructed with no arguments) are chosen by
name (``sniper.cluster._registry``)::

    [project.entry-points."sniper.launchers"]
    theirs = "theirpkg.launcher:TheirLauncher"
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sniper.cluster._checkpoint import JobCheckpoint
    from sniper.cluster._config import TrainConfig
    from sniper.cluster._hosts import RankHost
    from sniper.cluster._plan import TrainPlan
    from sniper.cluster._preemption import Preemption
    from sniper.roles import TrainReport

__all__ = ["Attempt", "Launch", "Launcher", "RoleStartError"]


class RoleStartError(RuntimeError):
    """A role a launcher started exited before it served (killed while it started, or it
    failed): the supervisor counts it as that role's death, a restart like any other."""

    def __init__(self, role: str, message: str) -> None:
        super().__init__(message)
        self.role = role
        """The role, as :attr:`Attempt.died` names it (``"ps 1"``, ``"hub 0"``)."""


@dataclass(frozen=True)
class Launch:
    """What one attempt at a job is to run."""

    config: TrainConfig
    """The job's config, ``num_ps`` resolved (never 0)."""
    plan: TrainPlan
    """The data's shape and the sized tables, resolved before anything started."""
    resume: JobCheckpoint | None
    """The checkpoint this attempt continues from (a restart's is the job's latest)."""
    ps: str | None = None
    """``host:port,...`` of ps started elsewhere (``--ps``, ``--cluster-spec``): use them."""
    hubs: str | None = None
    """``host:port,...`` of hubs started elsewhere (``--hub``, ``--cluster-spec``)."""
    trainers: tuple[RankHost, ...] = ()
    """Trainer ranks started elsewhere (a cluster spec's ``[[trainer]]``): this process is
    rank 0 and holds their rendezvous at the first's ``host:port``; the launcher starts none."""
    preemption: Preemption | None = None
    """How a signal to ``sniper train`` asks the job's trainer for a last checkpoint (the
    supervisor's; None: a signal stops the job at once). A launcher hands it to ``run_job``;
    one that does not leaves its jobs stopping at once."""


@dataclass(frozen=True)
class Attempt:
    """One attempt's job, its roles started, and how to tell that one of them died."""

    job: Callable[[], Awaitable[TrainReport]]
    """Runs the job (``sniper.cluster._job.run_job``) on the started roles: its report, or
    :class:`~sniper.roles.TrainingError`. Called once, on an asyncio event loop that the
    supervisor runs (grpclib speaks asyncio only)."""
    died: Callable[[], str | None] | None
    """The name of a role this attempt started outside the job that has exited (``"ps 1"``,
    ``"hub 0"``), or ``None`` while every one runs. Called after the job failed (repeatedly,
    for a grace period), whatever it was doing: a name makes the failure a restart from the
    latest checkpoint. ``None`` instead of a function: nothing runs apart from the job, so a
    failure is never a restart."""
    stop_stuck: Callable[[str], str | None] | None = None
    """Kill the role this attempt started that serves ``HOST:PORT``, if it still runs, and
    return its name (None: not one of its roles, or gone). Called when a call to that address
    ran past its deadline: a server that stops answering (hung, stopped, swapping) is then a
    death, which ``died`` names and the supervisor restarts. None: no role is killed, and such
    a failure is the job's error."""


class Launcher(ABC):
    """Where a job's ps and hubs run (see the module doc). Constructed with no arguments."""

    @abstractmethod
    def start(self, launch: Launch) -> AbstractContextManager[Attempt]:
        """Start what the attempt of ``launch`` needs outside its event loop (processes,
        actors) and yield the :class:`Attempt` that runs the job on it.

        Contract:

        - Blocking: called on the main thread with no event loop running; what must live on
          the job's loop (roles of this process) is started by :attr:`Attempt.job` instead.
        - Nothing outlives the block: on every exit (the job's end, its error, a restart, a
          signal turned into ``KeyboardInterrupt`` or ``SystemExit`` thrown into the block),
          every process, actor or server started here is stopped before the block exits,
          and the exception propagates unchanged.
        - Each call is a fresh attempt: a restart calls ``start`` again with a new
          ``launch.resume``; nothing started by an earlier call is still running.
        - ``launch.ps`` and ``launch.hubs``, when given, name servers that run elsewhere: a
          launcher that can only start its own raises ``ValueError`` saying so.
        - A SIGTERM or SIGINT meanwhile is the supervisor's (``launch.preemption``): the roles
          must not hear the terminal's Ctrl-C themselves, or a last checkpoint would find them
          gone (start processes in a process group of their own).
        - A role that exits before it serves (killed while it starts, or failing) raises
          :class:`RoleStartError` naming it, from ``start`` or from the job (roles the job
          starts, such as hubs): that is a role's death, restarted like any other.
        - Progress lines (what started where) go to standard output, flushed.
        """
