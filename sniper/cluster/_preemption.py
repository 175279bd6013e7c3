"""A save on preemption: how a signal to ``sniper train`` reaches the trainer of its job.

A preempted machine sends SIGTERM, then kills the job after its grace period; a user's Ctrl-C
sends SIGINT. Either would lose everything trained since the last periodic checkpoint if it
only unwound the job. So the supervisor (``sniper.cluster._supervise``), on the first of them,
asks through a :class:`Preemption` for the trainer's last checkpoint: the trainer closes its
pipeline, trains the batches already read, saves the job at that step and ends training, and
the job then ends as it does at ``max_steps`` (``sniper.roles.Trainer.preempt``).

The supervisor owns the signals and the trainer lives deep inside a launcher's job, so the
:class:`Preemption` travels with the :class:`~sniper.cluster.Launch`: each launcher hands it to
``run_job``, which attaches the trainer while it trains. Before that (the job restores its
ps, creates the variables, starts its hubs) nothing is attached and there is nothing new to
save: the supervisor then stops the job at once, as it does without a checkpoint directory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sniper.roles import Trainer

__all__ = ["Preemption"]


class Preemption:
    """The job's side of a preemption: the trainer that trains now, if any.

    One per job, shared by its attempts; used on the job's event loop only (the supervisor's
    signal watcher is a task of that loop), so it needs no lock.
    """

    def __init__(self) -> None:
        self._trainer: Trainer | None = None

    @contextlib.contextmanager
    def attached(self, trainer: Trainer) -> Iterator[None]:
        """While ``trainer`` trains (it has a checkpointer), a request reaches it."""
        self._trainer = trainer
        try:
            yield
        finally:
            self._trainer = None

    def request(self) -> int | None:
        """Ask the trainer for a checkpoint at its next clean cut and an end there; the step
        it has reached. None: no trainer trains now, so nothing was asked."""
        trainer = self._trainer
        if trainer is None:
            return None
        trainer.preempt()
        return trainer.live().steps
