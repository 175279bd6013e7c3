"""``gather``, the fan-out every multi-ps call goes through: results in call order, and a
failure raised as itself only after every other call has answered (none is cancelled half-way,
whether the failing call runs in a task of its own or in the caller's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from sniper.roles._cluster import gather

pytestmark = pytest.mark.anyio


def answering(value: int, finished: list[int], delay: float = 0.0) -> Callable[[], Awaitable[int]]:
    async def call() -> int:
        await anyio.sleep(delay)
        finished.append(value)
        return value

    return call


def failing(message: str) -> Callable[[], Awaitable[int]]:
    async def call() -> int:
        await anyio.sleep(0)
        raise ValueError(message)

    return call


async def test_results_come_in_call_order_whatever_order_they_answer_in() -> None:
    finished: list[int] = []
    calls = [answering(0, finished, 0.02), answering(1, finished, 0.01), answering(2, finished)]
    assert await gather(calls) == [0, 1, 2]
    assert finished == [2, 1, 0]
    assert await gather([]) == []


@pytest.mark.parametrize("failing_at", [0, 1, 2])
async def test_a_failure_is_raised_after_the_other_calls_answered(failing_at: int) -> None:
    finished: list[int] = []
    calls = [answering(index, finished, 0.02) for index in range(3)]
    calls[failing_at] = failing("the ps refused")
    with pytest.raises(ValueError, match="the ps refused"):
        await gather(calls)
    assert sorted(finished) == [index for index in range(3) if index != failing_at]
