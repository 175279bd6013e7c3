"""``max_inflight_mb``: a ps refuses a request that would take the bytes it works on at once
past the cap (RESOURCE_EXHAUSTED naming the numbers), and once a burst is done its memory goes
back to the kernel. Over real loopback gRPC; the memory figure from a real ``sniper serve``."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import anyio
import numpy as np
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper.cluster import server_process
from sniper.roles import InFlightLimitError, PsRoleConfig
from sniper.rpc import PsClient, VariableConfig
from sniper.testing import running_ps

pytestmark = pytest.mark.anyio

MB = 2**20
DIM = 64


def rows_of(mb: float) -> tuple[np.ndarray, np.ndarray]:
    """Signs and rows of a Push request of about ``mb`` MB."""
    n = int(mb * MB) // (DIM * 4 + 8)
    return np.arange(1, n + 1, dtype=np.uint64), np.ones((n, DIM), np.float32)


async def test_a_request_past_max_inflight_mb_is_refused_naming_the_numbers() -> None:
    config = PsRoleConfig(max_inflight_mb=64)
    async with running_ps(config=config, max_message_bytes=128 * MB) as (role, client):
        await client.create_variable(VariableConfig("v", DIM, 200_000, optimizer="sgd"))
        signs, rows = rows_of(24)
        with role.call("PushGrad", 48 * MB):  # another request of 48 MB is being worked on
            with pytest.raises(GRPCError) as info:
                await client.push("v", signs, rows)
            assert info.value.status == Status.RESOURCE_EXHAUSTED
            assert info.value.message == (
                f"Push of {(signs.nbytes + rows.nbytes) / MB:.1f} MB refused: this ps has 48.0 "
                "MB of requests in flight and max_inflight_mb is 64; retry once they are done, "
                "or raise max_inflight_mb"
            )
        await client.push("v", signs, rows)  # done: room again
        np.testing.assert_array_equal(await client.pull("v", signs[:3]), rows[:3])
        big_signs, big_rows = rows_of(80)
        with pytest.raises(
            GRPCError, match=re.escape("MB is over this ps's max_inflight_mb of 64; send it in")
        ):
            await client.push("v", big_signs, big_rows)
        with role.call("Push", 62 * MB):  # every request counts its bytes, FeedSample too
            many = np.arange(1, 500_001, dtype=np.uint64)
            refused = re.escape("FeedSample of 3.8 MB refused: this ps has 62")
            with pytest.raises(GRPCError, match=refused):
                await client.feed_sample(1, {"v": (many, np.array([0, 500_000]))})


async def test_a_role_counts_its_requests_bytes_and_gives_them_back() -> None:
    async with running_ps(config=PsRoleConfig(max_inflight_mb=10)) as (role, _client):
        with role.call("A", 6 * MB):
            refused = re.escape("B of 5.0 MB refused")
            with pytest.raises(InFlightLimitError, match=refused), role.call("B", 5 * MB):
                pass
            with role.call("C", 4 * MB):
                pass
        with role.call("B", 10 * MB):
            pass


def test_max_inflight_mb_is_checked() -> None:
    with pytest.raises(ValueError, match="max_inflight_mb must be positive, got 0"):
        PsRoleConfig(max_inflight_mb=0)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_burst_of_large_pushes_is_capped_and_the_memory_comes_back() -> None:
    """8 concurrent Push calls of 48 MiB against max_inflight_mb 100 (the finding: 8 of 229
    MiB with no cap took a ps from 451 MB to 5.3 GB and left 4.9 GB held)."""
    command = [
        sys.executable,
        *("-m", "sniper", "serve", "--role", "ps", "--port", "0", "--workers", "1"),
        *("--max-inflight-mb", "100", "--max-message-mb", "64", "--exit-on-stdin-eof"),
    ]
    signs, rows = rows_of(48)

    async def burst(port: int, pid: int) -> tuple[float, float, list[str]]:
        clients = [PsClient("127.0.0.1", port, timeout=120, max_message_mb=64) for _ in range(8)]
        await clients[0].create_variable(VariableConfig("v", DIM, len(signs), optimizer="sgd"))
        await clients[0].push("v", signs, rows)  # the table's rows are written once
        await anyio.sleep(1.5)
        baseline = rss_mb(pid)
        outcomes: list[str] = []

        async def push(client: PsClient) -> None:
            try:
                await client.push("v", signs, rows)
                outcomes.append("ok")
            except GRPCError as exc:
                outcomes.append(f"{exc.status.name}: {exc.message}")

        async with anyio.create_task_group() as group:
            for client in clients:
                group.start_soon(push, client)
        deadline = time.monotonic() + 30
        after = rss_mb(pid)
        while after > baseline + 64 and time.monotonic() < deadline:
            await anyio.sleep(0.5)  # the ps gives memory back half a second after a burst
            after = rss_mb(pid)
        for client in clients:
            client.close()
        return baseline, after, outcomes

    with server_process(command) as ps:
        baseline, after, outcomes = anyio.run(burst, ps.port, ps.process.pid)
    refused = re.compile(
        r"RESOURCE_EXHAUSTED: Push of 48\.0 MB refused: this ps has (48|96)\.0 MB of requests "
        r"in flight and max_inflight_mb is 100; retry once they are done, or raise "
        r"max_inflight_mb"
    )
    assert all(o == "ok" or refused.fullmatch(o) for o in outcomes), outcomes
    assert len(outcomes) == 8 and "ok" in outcomes
    assert after <= baseline + 64, (baseline, after)
