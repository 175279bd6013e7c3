"""The trainer's pauses: checkpoints and auto_shard moves, each at a clean cut.

A checkpoint and a move both need the pipeline drained: every batch read was trained and
pushed, so no lookup or push is in flight, the ps hold exactly the pushes of the steps trained,
and each hub's position is a clean cut. :meth:`Pauses.request` closes the pipeline's gate; the
training loop keeps training the batches already read, and once they are drained calls
:meth:`Pauses.run`: the moves first, then the checkpoint (which then holds the new placement),
then the gate opens again. A reason found while already draining joins the pause under way.

A stop (:meth:`Pauses.stop`: ``sniper train`` signalled to end, a preemption) is one more such
pause: it checkpoints at the clean cut (unless that step is saved already) and leaves the gate
closed, so training ends there with nothing read past the checkpoint.

Checkpoints land on the step they name: the pipeline reads no batch past the next one
(:meth:`~sniper.roles._pipeline.Pipeline.stop_reading_at`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from sniper.placement import Move
from sniper.roles._balance import AutoShard
from sniper.roles._cluster import PsCluster
from sniper.roles._errors import RPC_ERRORS, TrainingError, describe_error
from sniper.roles._pipeline import Pipeline
from sniper.roles._train_report import TrainReport

__all__ = ["Pauses", "Save"]

log = logging.getLogger("sniper.trainer")

Save = Callable[[TrainReport], Awaitable[None]]
"""Saves the job at the report's step (the trainer's checkpointer, bound to the trainer)."""


class Pauses:
    """Checkpoints every ``checkpoint_every`` steps with ``save`` (0 or None: never; the end
    is :meth:`finish`'s to say) and makes ``balancer``'s moves (None: none), pausing
    ``pipeline`` for each."""

    def __init__(
        self,
        pipeline: Pipeline,
        cluster: PsCluster,
        save: Save | None,
        checkpoint_every: int,
        balancer: AutoShard | None,
    ) -> None:
        self.pipeline = pipeline
        self.cluster = cluster
        self.save = save
        self.checkpoint_every = checkpoint_every if save is not None else 0
        self.balancer = balancer
        self.checkpointed_step = 0
        self._due_checkpoint = False  # what the pause under way is for
        self._due_moves: list[Move] = []
        self._started = 0.0
        self._stopping = False
        self.stopped = False
        """The pause :meth:`stop` asked for is done: the current step is checkpointed and the
        gate stays closed; training ends."""

    @property
    def checkpointed_step(self) -> int:
        """The step of the latest checkpoint (of the resumed one, before any). Set when the
        pipeline is drained: it then reads no batch past the next checkpoint's step."""
        return self._checkpointed_step

    @checkpointed_step.setter
    def checkpointed_step(self, step: int) -> None:
        self._checkpointed_step = step
        every = self.checkpoint_every
        self.pipeline.stop_reading_at((step // every + 1) * every if every else None, step)

    @property
    def draining(self) -> bool:
        """A pause was requested and waits for the pipeline to drain."""
        return self.pipeline.closed

    def request(self, checkpoint: bool = False, moves: Sequence[Move] = ()) -> None:
        """Stop prefetching and let the batches read drain, then checkpoint and/or move."""
        self._due_checkpoint |= checkpoint
        self._due_moves += moves
        if not self.pipeline.closed:
            self.pipeline.close()
            self._started = time.perf_counter()

    def stop(self) -> None:
        """Checkpoint at the next clean cut, then end training there: the pipeline stays
        closed after that pause (the last checkpoint of a preempted job). Needs ``save``."""
        if self.save is None:
            raise RuntimeError("stop() checkpoints, and this trainer has no checkpointer")
        self._stopping = True
        self.request(checkpoint=True)

    async def after_step(self, step: int) -> None:
        """Request what is due after training step ``step``."""
        if self.checkpoint_every and step % self.checkpoint_every == 0:
            self.request(checkpoint=True)
        await self._plan_moves(step)

    async def run(self, report: TrainReport) -> None:
        """The pipeline is drained: make the moves, then the checkpoint, then reopen (or,
        after :meth:`stop`, leave it closed: :attr:`stopped`)."""
        waited = time.perf_counter() - self._started
        moves, self._due_moves = self._due_moves, []
        for move in moves:
            await self._move(move, report)
        if self._stopping and report.steps == self.checkpointed_step:
            # This step is saved already (a resume's, or a checkpoint the stop came during),
            # or nothing was trained: there is nothing new to save.
            self._due_checkpoint = False
        if self._due_checkpoint:
            self._due_checkpoint = False
            await self.checkpoint(report, waited)
        if self._stopping:
            self.stopped = True
            return
        self.pipeline.open()

    async def finish(self, report: TrainReport, again: bool = False, end: bool = False) -> None:
        """The end of training is a clean cut too: checkpoint it if checkpointing (``end``:
        the job has a checkpoint directory, whatever ``checkpoint_every`` says; or asked to
        :meth:`stop`) and not checkpointed already at this step, or ``again``: the end changed
        what a checkpoint holds (the data ended, or the evaluation data was scored). A run that
        trained nothing saves nothing: a resume of an older step whose data held no batch saved
        that step again, and the save removed the newer steps of the run it came from."""
        checkpointing = self.save is not None and (end or self.checkpoint_every or self._stopping)
        trained = report.steps > report.resumed_from_step
        if checkpointing and (report.steps > self.checkpointed_step or (again and trained)):
            await self.checkpoint(report, 0.0)

    async def checkpoint(self, report: TrainReport, waited: float) -> None:
        assert self.save is not None
        start = time.perf_counter()
        try:
            await self.save(report)
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"checkpoint at step {report.steps} failed: {describe_error(exc)}"
            ) from exc
        pause = waited + time.perf_counter() - start
        report.checkpoints += 1
        self.checkpointed_step = report.steps
        report.checkpoint_pause_seconds.append(pause)
        log.info("checkpoint at step %d: training paused %.2f s", report.steps, pause)

    async def _plan_moves(self, step: int) -> None:
        # Not while a pause drains: its moves are planned and not made yet, and a plan now
        # would count from the placement they are about to change.
        if self.balancer is None or not self.balancer.due(step) or self.draining:
            return
        try:
            moves = await self.balancer.plan(step)
        except RPC_ERRORS as exc:
            log.warning("auto_shard skipped step %d: ps Stats: %s", step, describe_error(exc))
            return
        if moves:
            self.request(moves=moves)

    async def _move(self, move: Move, report: TrainReport) -> None:
        assert self.balancer is not None
        try:
            moved = await self.balancer.move(report.steps, move)
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"auto_shard could not move {move.variable} from ps {move.source} to ps "
                f"{move.to}: {describe_error(exc)}"
            ) from exc
        if not moved:
            return
        step, done, seconds = self.balancer.moves[-1]
        report.moves.append(
            {"step": step, "variable": done.variable, "from": done.source, "to": done.to}
            | {"cost": done.cost, "seconds": seconds}
        )
        report.placement_version = self.cluster.placement.version
