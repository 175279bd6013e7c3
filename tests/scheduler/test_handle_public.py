"""A backend completes a ``TaskHandle`` through public methods only: ``run()``, or
``start()``, ``call()`` and ``set_result()`` / ``set_exception()``."""

from __future__ import annotations

import pytest

from sniper.scheduler import TaskCancelled, TaskHandle, TaskKey


def fail(value: int) -> int:
    raise KeyError(value)


def test_run_calls_the_task_once_and_says_how_it_ended() -> None:
    done: TaskHandle[int] = TaskHandle("emb", pow, (2, 5))
    assert done.key == TaskKey("emb", 0) and done.args == (2, 5) and done.merge is None
    assert done.run() == "completed" and done.result(timeout=0) == 32
    assert len(done.args) == 0  # dropped once complete: they may be large
    failed: TaskHandle[int] = TaskHandle(TaskKey("emb", 3), fail, (7,))
    assert failed.run() == "failed"
    with pytest.raises(KeyError, match="7"):
        failed.result(timeout=0)
    cancelled_hook: list[bool] = []
    cancelled: TaskHandle[int] = TaskHandle(
        "emb", pow, (2, 5), on_cancel=lambda: cancelled_hook.append(True)
    )
    assert cancelled.cancel() and cancelled_hook == [True]
    assert cancelled.run() == "cancelled" and not cancelled.start()
    with pytest.raises(TaskCancelled):
        cancelled.result(timeout=0)


def test_start_call_and_set_complete_a_handle_the_backend_times_itself() -> None:
    handle: TaskHandle[int] = TaskHandle("emb", pow, (3, 2))
    assert not handle.done() and handle.start()
    assert not handle.cancel()  # started: it runs to the end
    handle.set_result(handle.call())
    assert handle.done() and handle.result(timeout=0) == 9
    other: TaskHandle[int] = TaskHandle("emb", fail, (1,))
    assert other.start()
    with pytest.raises(KeyError) as info:
        other.call()
    other.set_exception(info.value)
    with pytest.raises(KeyError):
        other.result(timeout=0)
