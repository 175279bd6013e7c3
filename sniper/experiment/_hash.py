"""The seeds' placement bug, measured: what a trainer sees when its hash disagrees with the ps'.

The original system's Python side computed ``string_to_u64`` with Python's unbounded ints, so
its hash never wrapped at 2**64 while the Rust and C++ sides did. A ``hash_mismatch`` point
creates and feeds every variable of a workload on the ps the correct hash names, as hubs do,
then looks each one up on the ps the unwrapped hash names, as the buggy trainer did, over real
gRPC, and records how many lookups fail and with which status and message.

Two things decide whether the bug shows. A name must be long enough for ``h*31 + byte`` to
pass 2**64 (about 13 bytes), and ``num_ps`` must not be a power of two: ``x % 2**k`` of the
unwrapped hash equals that of the wrapped one, because 2**64 is a multiple of 2**k. So the
sweep includes odd cluster sizes, and a name prefix (a model scope) lengthens the names.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import numpy as np

from sniper._hashing import ps_for_variable
from sniper.experiment._spec import HashMismatchConfig

__all__ = ["run_hash_point", "unwrapped_ps_for_variable"]


def unwrapped_ps_for_variable(name: str, num_ps: int) -> int:
    """The seeds' buggy placement: the same ``h = h*31 + byte`` polynomial as
    :func:`sniper.hashing.string_to_u64`, in Python ints that never wrap at 2**64, then
    ``% num_ps``. It agrees with the correct hash until the polynomial passes 2**64 (names of
    about 13 bytes or more), and even then whenever ``num_ps`` is a power of two."""
    h = 0
    for byte in name.encode("utf-8"):
        h = h * 31 + byte  # the bug: no `& (2**64 - 1)`
    return h % num_ps


def run_hash_point(config: HashMismatchConfig) -> dict[str, Any]:
    """Place, feed and look up every variable; the point's metrics."""
    from sniper.data import load_workload

    names = [config.name_prefix + v.name for v in load_workload(config.workload).variables]
    metrics: dict[str, Any] = {
        "variables": len(names),
        "longest_name_bytes": max(len(name.encode()) for name in names),
    }
    misplaced = [
        n for n in names if unwrapped_ps_for_variable(n, config.num_ps) != _owner(n, config)
    ]
    metrics["misplaced_variables"] = len(misplaced)
    metrics["misplaced_fraction"] = len(misplaced) / len(names)
    metrics["misplaced_example"] = misplaced[0] if misplaced else ""
    # grpclib runs on asyncio only.
    metrics |= anyio.run(_lookups, config, names, backend="asyncio")
    return metrics


def _owner(name: str, config: HashMismatchConfig) -> int:
    return ps_for_variable(name, config.num_ps)


async def _lookups(config: HashMismatchConfig, names: list[str]) -> dict[str, Any]:
    """Real ps on loopback gRPC: create and feed on the owner, look up where the bug says."""
    from grpclib.exceptions import GRPCError

    from sniper.roles import PsEngine, PsRole
    from sniper.rpc import PsClient, VariableConfig
    from sniper.scheduler import open_scheduler
    from sniper.transport import GrpcTransport

    batch_id, batch = 1, 4
    offsets = np.arange(batch + 1, dtype=np.int64)
    failed: list[GRPCError] = []
    async with AsyncExitStack() as stack:
        clients = []
        for _ in range(config.num_ps):
            scheduler = await stack.enter_async_context(open_scheduler("inline", workers=1))
            address = await stack.enter_async_context(
                GrpcTransport().serve(PsRole(PsEngine(scheduler)), "127.0.0.1:0")
            )
            host, _, port = address.rpartition(":")
            clients.append(PsClient(host, int(port), retries=0))
            stack.callback(clients[-1].close)
        for name in names:
            owner = clients[_owner(name, config)]
            await owner.create_variable(VariableConfig(name, config.dim, 1024))
            signs = np.arange(1, batch + 1, dtype=np.uint64)
            await owner.feed_sample(batch_id, {name: (signs, offsets)})
        for name in names:
            buggy = clients[unwrapped_ps_for_variable(name, config.num_ps)]
            try:
                await buggy.embedding_lookup(batch_id, [name], release=True)
            except GRPCError as exc:
                failed.append(exc)
    first = failed[0] if failed else None
    return {
        "lookups": len(names),
        "failed_lookups": len(failed),
        "error_status": first.status.name if first is not None else "",
        "error_message": (first.message or "") if first is not None else "",
    }
