"""``gather``, the fan-out every multi-ps call goes through: results in call order, and a
failure raised as itself only after every other call has answered (none is cancelled half-way,
whether the failing call runs in a task of its own or in the caller's), the first call's
failure when several fail."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from sniper.roles._cluster import gather

pytestmark = pytest.mark.anyio


async def test_results_come_in_call_order_whatever_order_they_answer_in() -> None:
    finished: list[int] = []
    answered = [anyio.Event() for _ in range(3)]

    def answering(index: int) -> Callable[[], Awaitable[int]]:
        async def call() -> int:
            if index + 1 < len(answered):  # each call answers after the one behind it
                await answered[index + 1].wait()
            finished.append(index)
            answered[index].set()
            return index

        return call

    assert await gather([answering(index) for index in range(3)]) == [0, 1, 2]
    assert finished == [2, 1, 0]
    assert await gather([]) == []


def sleeping(index: int, finished: list[int]) -> Callable[[], Awaitable[int]]:
    async def call() -> int:
        await anyio.sleep(0.02)
        finished.append(index)
        return index

    return call


def failing(message: str, *, at_once: bool = False) -> Callable[[], Awaitable[int]]:
    async def call() -> int:
        if not at_once:
            await anyio.sleep(0)
        raise ValueError(message)

    return call


@pytest.mark.parametrize("failing_at", [0, 1, 2])
async def test_a_failure_is_raised_after_the_other_calls_answered(failing_at: int) -> None:
    finished: list[int] = []
    calls = [sleeping(index, finished) for index in range(3)]
    calls[failing_at] = failing("the ps refused")
    with pytest.raises(ValueError, match="the ps refused"):
        await gather(calls)
    assert sorted(finished) == [index for index in range(3) if index != failing_at]


async def test_of_several_failures_the_first_calls_is_raised() -> None:
    # The last call runs in the caller's task and fails before the others have started.
    calls = [failing("ps 0 refused"), failing("ps 1 refused", at_once=True)]
    with pytest.raises(ValueError, match="ps 0 refused"):
        await gather(calls)
