"""The trainer trains the same batches in the same order on every run, whatever the order the
network answers in: several hubs and several reads in flight (``prefetch``) included, and a
run resumed from the trainer's state continues exactly where the interrupted one stopped (a
preempted one's last checkpoint included)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import anyio
import numpy as np
import pytest
from numpy.typing import NDArray

from sniper.data import SyntheticCtr, load_workload
from sniper.models import Mlp, MlpModel
from sniper.models._mlp import Backward
from sniper.roles import (
    BatchId,
    Checkpointer,
    HubConfig,
    PsCluster,
    PsEngine,
    PsRole,
    Trainer,
    TrainerConfig,
    TrainReport,
    _pipeline,
    _step,
)
from sniper.scheduler import open_scheduler
from tests.roles._roles import JitteryHub, blas_threads, created

pytestmark = pytest.mark.anyio
NUM_HUBS = 2
BATCHES = 25  # hub 0 reads 13, hub 1 reads 12: hub 1 ends first


class RecordingPs(PsRole):
    """A real ps that notes the batch of every PushGrad, in the order they arrive."""

    pushed: list[int]

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        self.pushed.append(batch_id)
        return await super().push_grad(batch_id, grads)


async def train(
    reader: SyntheticCtr,
    max_steps: int = 0,
    state: dict[str, object] | None = None,
    checkpoint_every: int = 0,
    eval_every: int = 0,
    max_staleness: int = 0,
    blas_threads: int = 1,
    checkpointer: Checkpointer | None = None,
    preempt_at: int = 0,
) -> tuple[list[int], Trainer, TrainReport]:
    """One run on fresh roles; with ``state`` (and the hubs positioned after the batches it
    trained), a resumed one. ``preempt_at``: preempt the trainer once it trained that many
    steps (needs ``checkpointer``)."""
    positions: Mapping[int, BatchId] = state["positions"] if state else {}  # type: ignore[assignment]
    if checkpointer is None and checkpoint_every:
        checkpointer = noop_checkpoint
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = RecordingPs(PsEngine(scheduler))
        ps.pushed = []
        await created(ps, reader)
        cluster = PsCluster([ps])
        hubs = []
        for index in range(NUM_HUBS):
            place = positions.get(index)
            start = (place.epoch, place.index + 1) if place else (0, 0)
            config = HubConfig(
                hub_index=index, num_hubs=NUM_HUBS, start_epoch=start[0], start_index=start[1]
            )
            hubs.append((f"hub-{index}", JitteryHub(reader, cluster, config)))
        trainer = Trainer(
            hubs,
            cluster,
            dict.fromkeys(reader.variables, 4),
            reader.dense_features,
            TrainerConfig(
                prefetch=4,
                eval_every=eval_every,
                max_staleness=max_staleness,
                max_steps=max_steps,
                blas_threads=blas_threads,
                progress=False,
                checkpoint_every=checkpoint_every,
            ),
            checkpointer=checkpointer,
        )
        if state:
            trainer.resume_from(state["trainer"])  # type: ignore[arg-type]
        async with anyio.create_task_group() as group:
            for _, hub in hubs:
                group.start_soon(hub.run)
            if preempt_at:
                group.start_soon(preempt, trainer, preempt_at)
            report = await trainer.run()
            group.cancel_scope.cancel()
        return ps.pushed, trainer, report


async def noop_checkpoint(trainer: Trainer, report: TrainReport) -> None:
    await anyio.sleep(0)


async def preempt(trainer: Trainer, step: int) -> None:
    """What ``sniper train`` does on SIGTERM, once ``trainer`` has trained ``step`` steps."""
    while trainer.live().steps < step:
        await anyio.sleep(0.001)
    trainer.preempt()


class Saves(list[dict[str, Any]]):
    """A checkpointer that keeps what a resume needs of each checkpoint, in order."""

    async def __call__(self, trainer: Trainer, report: TrainReport) -> None:
        self.append({"trainer": trainer.state(report), "positions": dict(trainer.positions)})
        await anyio.sleep(0)


def round_robin() -> list[int]:
    """Hub 0's first batch, hub 1's first, hub 0's second ...; hub 0 alone at the end."""
    per_hub = [
        [BatchId(h, 0, i).pack() for i in range(len(range(h, BATCHES, NUM_HUBS)))]
        for h in range(NUM_HUBS)
    ]
    order = []
    for i in range(max(map(len, per_hub))):
        order += [batches[i] for batches in per_hub if i < len(batches)]
    return order


async def test_batches_are_trained_in_one_order_and_a_resume_continues_it() -> None:
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    whole, _, _ = await train(reader)
    assert whole == round_robin()

    first, stopped, report = await train(reader, max_steps=9)
    assert first == whole[:9]
    state = {"trainer": stopped.state(report), "positions": dict(stopped.positions)}
    rest, _, _ = await train(reader, state=state)
    assert first + rest == whole


async def test_a_preemption_checkpoints_the_step_reached_and_its_resume_continues_it() -> None:
    """The trainer stops after the checkpoint it was asked for, with nothing pushed past it,
    and the resume of that checkpoint trains the rest in the same order."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    whole, _, _ = await train(reader)
    saves = Saves()
    first, _, report = await train(reader, checkpointer=saves, preempt_at=7)
    assert report.preempted and report.checkpoints == 1
    assert saves[-1]["trainer"]["steps"] == report.steps >= 7
    assert first == whole[: report.steps]
    rest, _, resumed = await train(reader, state=saves[-1])
    assert first + rest == whole
    assert not resumed.preempted


async def test_a_preemption_during_a_checkpoint_stops_at_that_checkpoint() -> None:
    """Asked while a periodic checkpoint saves, the trainer takes no second one: that
    checkpoint is at the step it reached."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    saves = Saves()

    async def preempted_while_saving(trainer: Trainer, report: TrainReport) -> None:
        trainer.preempt()
        await saves(trainer, report)

    pushed, _, report = await train(reader, checkpoint_every=5, checkpointer=preempted_while_saving)
    assert report.preempted and report.checkpoints == 1 and len(saves) == 1
    assert saves[0]["trainer"]["steps"] == report.steps == len(pushed)


async def test_checkpoints_at_every_step_never_hang_and_keep_the_order() -> None:
    """A step that is due for a checkpoint while the pipeline drains for the previous one
    used to close a second gate that nothing opened: training stopped for good."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    with anyio.fail_after(60):
        pushed, _, report = await train(reader, checkpoint_every=1)
    assert pushed == round_robin()
    assert report.checkpoints >= 1


async def test_input_matrices_handed_on_train_the_same_numbers_as_fresh_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's model input goes back to a pool once trained or scored, and a later batch's
    lookup writes it again: nothing may still read it then, nor may a stale column survive."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    handed_on: list[int] = []
    take = _pipeline.InputPool.take

    def noting(pool: _pipeline.InputPool, rows: int, width: int) -> NDArray[np.float32]:
        free = {id(matrix) for matrix in pool._free}
        matrix = take(pool, rows, width)
        handed_on.append(id(matrix) in free)
        return matrix

    monkeypatch.setattr(_pipeline.InputPool, "take", noting)
    _, pooled, pooled_report = await train(reader, eval_every=4)
    assert sum(handed_on) > BATCHES // 2
    monkeypatch.setattr(_pipeline.InputPool, "give", lambda pool, matrix: None)
    _, fresh, fresh_report = await train(reader, eval_every=4)
    assert pooled_report.eval_batches == fresh_report.eval_batches > 0
    assert pooled_report.losses == fresh_report.losses
    assert pooled_report.eval_auc == fresh_report.eval_auc
    assert isinstance(pooled.model, MlpModel) and isinstance(fresh.model, MlpModel)
    for mine, theirs in zip(pooled.model.network.weights, fresh.model.network.weights, strict=True):
        np.testing.assert_array_equal(mine, theirs)


async def test_lookups_riding_on_pushes_train_the_same_numbers_as_lookups_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``max_staleness = 0`` a batch's lookup is offered to the previous batch's push,
    which answers it once its gradients are applied: the same rows the lookup would read on
    its own after that push, so the same training, and most lookups take no call of their
    own (the first, and each after a held-out batch, which pushes nothing, still do)."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    riding: list[int] = []
    push_then = PsCluster.push_grad_then_lookup

    async def noting(cluster: PsCluster, batch_id: int, grads: Any, then: Any) -> Any:
        dropped, answers = await push_then(cluster, batch_id, grads, then)
        riding.append(len(answers))
        return dropped, answers

    monkeypatch.setattr(PsCluster, "push_grad_then_lookup", noting)
    _, riding_trainer, riding_report = await train(reader, eval_every=4)
    assert riding_report.steps > 0
    assert len(riding) > riding_report.steps // 2 and all(riding)
    monkeypatch.setattr(_pipeline.Pipeline, "offer_after", lambda pipeline, ticket: None)
    _, own_trainer, own_report = await train(reader, eval_every=4)
    assert riding_report.steps == own_report.steps
    assert riding_report.losses == own_report.losses
    assert riding_report.eval_auc == own_report.eval_auc
    assert isinstance(riding_trainer.model, MlpModel) and isinstance(own_trainer.model, MlpModel)
    pairs = zip(
        riding_trainer.model.network.weights, own_trainer.model.network.weights, strict=True
    )
    for mine, theirs in pairs:
        np.testing.assert_array_equal(mine, theirs)


async def test_no_batch_s_input_is_written_by_another_while_it_trains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With later batches looked up while one trains (``max_staleness``), each trains on its
    own dense features from start to end: its matrix is handed on only after."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    written: dict[int, NDArray[np.float32]] = {}  # by id of the batch's labels
    mismatches: list[int] = []
    input_matrix = _pipeline.Pipeline._input_matrix
    forward_backward = _step._forward_backward

    def noting(
        pipeline: _pipeline.Pipeline, ticket: object, labels: NDArray[np.float32], dense: Any
    ) -> Any:
        written[id(labels)] = dense.copy()
        return input_matrix(pipeline, ticket, labels, dense)  # type: ignore[arg-type]

    def checking(model: Any, inputs: NDArray[np.float32], labels: Any, *rest: Any) -> Any:
        def intact() -> bool:
            start = model.inputs.embedding_width
            return bool(np.array_equal(inputs[:, start:], written[id(labels)]))

        before = intact()
        time.sleep(0.005)  # room for another batch's lookup to write, were it allowed to
        result = forward_backward(model, inputs, labels, *rest)
        if not (before and intact()):
            mismatches.append(id(labels))
        return result

    update = Backward.update
    updates: list[bool] = []

    def checking_update(backward: Backward) -> None:
        # The update reads the input (the first layer's weight gradient) after the ticket
        # settled and later batches' lookups started.
        if not written:  # the dense kernels' warm-up on a scratch model, before any batch
            update(backward)
            return
        inputs = backward._activations[0]
        start = len(inputs[0]) - len(next(iter(written.values()))[0])
        mine = [dense for dense in written.values() if np.array_equal(inputs[:, start:], dense)]
        time.sleep(0.005)
        update(backward)
        updates.append(bool(mine) and np.array_equal(inputs[:, start:], mine[0]))

    monkeypatch.setattr(_pipeline.Pipeline, "_input_matrix", noting)
    monkeypatch.setattr(_step, "_forward_backward", checking)
    monkeypatch.setattr(Backward, "update", checking_update)
    _, _, report = await train(reader, eval_every=4, max_staleness=3)
    assert report.steps > 0
    assert mismatches == []
    assert len(updates) == report.steps and all(updates)


async def test_a_push_that_fails_with_a_bug_reaches_the_caller_as_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The push runs beside the Adam step on the model's thread; what fails there is raised
    as it was, not wrapped in an ExceptionGroup of the trainer's own."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in the push")

    monkeypatch.setattr(PsCluster, "push_grad", broken)
    monkeypatch.setattr(PsCluster, "push_grad_then_lookup", broken)
    with pytest.raises(ExceptionGroup) as info:  # the helper's task group for the hubs
        await train(reader)
    (raised,) = info.value.exceptions
    assert type(raised) is RuntimeError and str(raised) == "a bug in the push"


async def test_adam_starts_as_soon_as_the_input_gradients_exist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Adam step is queued on the model's thread behind the forward pass, so it runs while
    the push holds the event loop: a push that never gives the loop back still sees it start.
    Started from the loop, it would wait for the push to end, and this push would time out."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    update = Backward.update
    started = threading.Condition()
    updating: set[int] = set()  # the first input gradient of each update that has started
    overlapped: list[bool] = []

    def noting(backward: Backward) -> None:
        with started:
            updating.add(id(backward.d_input[0]))
            started.notify_all()
        update(backward)

    def holding_the_loop(push: Any) -> Any:
        async def held(cluster: PsCluster, batch_id: int, grads: Any, *then: Any) -> Any:
            mine = id(next(iter(grads.values())))  # its update has started, or never will
            with started:  # blocks the loop: nothing is awaited before the push
                overlapped.append(started.wait_for(lambda: mine in updating, timeout=10.0))
            return await push(cluster, batch_id, grads, *then)

        return held

    monkeypatch.setattr(Backward, "update", noting)
    for push in ("push_grad", "push_grad_then_lookup"):  # the next lookup rides on most pushes
        monkeypatch.setattr(PsCluster, push, holding_the_loop(getattr(PsCluster, push)))
    _, _, report = await train(reader, eval_every=4)
    assert report.steps > 0
    assert overlapped == [True] * report.steps


async def test_the_dense_model_runs_on_one_thread_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forward passes, Adam steps and the scoring of held-out batches all run on one thread,
    not the event loop's, in the order the training loop asks for them."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    calls: list[tuple[str, int]] = []
    for name in ("forward", "_update"):
        method = getattr(Mlp, name)

        def noting(model: Mlp, *args: Any, _method: Any = method, _name: str = name) -> Any:
            calls.append((_name, threading.get_ident()))
            return _method(model, *args)

        monkeypatch.setattr(Mlp, name, noting)
    _, _, report = await train(reader, eval_every=4)
    assert report.steps > 0 and report.eval_batches > 0
    threads = {thread for _, thread in calls}
    assert len(threads) == 1 and threading.get_ident() not in threads
    names = [name for name, _ in calls]
    # Each training step's forward pass comes right before its update; a held-out batch's
    # forward pass has no update.
    assert names.count("_update") == report.steps
    assert names.count("forward") == report.steps + report.eval_batches
    assert all(names[i - 1] == "forward" for i, name in enumerate(names) if name == "_update")


async def test_a_cancelled_run_keeps_its_blas_limit_until_the_running_step_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run cancelled while a step runs on the model's thread waits for that step inside its
    BLAS limit: the limit is not lifted under a step still running (``openblas_set_num_threads``
    while another thread is inside BLAS), and it is lifted once the run has ended."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=BATCHES, scale=0.005, seed=2, batch_size=16
    )
    np.ones((2, 2)) @ np.ones((2, 2))  # load the BLAS
    default = blas_threads()
    limit = 2 if default == [1] * len(default) else 1  # not the default, on any machine
    started = threading.Event()
    seen: list[list[int]] = []
    forward = Mlp.forward
    calls = 0

    def slow_third(model: Mlp, x: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            started.set()
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:  # the run is cancelled meanwhile
                seen.append(blas_threads())
                time.sleep(0.01)
        return forward(model, x)

    async def cancel_once_started(scope: anyio.CancelScope) -> None:
        while not started.is_set():
            await anyio.sleep(0.005)
        scope.cancel()

    monkeypatch.setattr(Mlp, "forward", slow_third)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_started, scope)
            await train(reader, blas_threads=limit)
    assert scope.cancelled_caught
    assert seen and all(threads == [limit] * len(threads) for threads in seen)
    assert blas_threads() == default
