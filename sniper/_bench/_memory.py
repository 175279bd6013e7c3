"""``sniper bench memory``: a ps process's resident memory per row of a full table.

Issue 15's target: a ps's RSS per row at most ``1.25 x (weights + optimizer state) + 16``
bytes; for dim 16 with Adagrad (64 bytes of weights, 64 of accumulator) that is 176 bytes.

Method. It starts a real ``sniper serve --role ps`` and warms it up with a small variable (one
batch fed, looked up and pushed: numba's kernels, the scheduler's threads and gRPC's buffers
are then loaded). Then it reads the ps's ``VmRSS`` from ``/proc``, creates one variable of the
workload's dim with Adagrad, ``--rows`` rows of capacity in the shards ``sniper train`` would
give the workload's largest variable, and fills it through FeedSample, EmbeddingLookup and
PushGrad with batches of distinct signs until every shard is full (each row's weights and
accumulator are written, as in training), and reads ``VmRSS`` again. Bytes per row = the
growth over the rows held. Also printed: the table's preallocated arrays per row
(``EmbeddingTable.nbytes`` from the ps's stats), the part of the growth that is the table.

A separate command, not a section of ``sniper bench store``: it measures another process at
another quantity (bytes, once, at a table's full size) where the store bench times calls in its
own process, whose RSS holds torch, the dict store and every case's tables.

Peer: torch's ``EmbeddingBag`` with ``torch.optim.Adagrad`` (when torch is installed), grown the
same way in a fresh process: dense weights and accumulator, no index, so it shows what
sniper's index and bookkeeping cost on top of the same rows. TorchRec's FBGEMM table with
``EXACT_ADAGRAD`` keeps the same two arrays.
"""

from __future__ import annotations

import multiprocessing
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import anyio
import numpy as np
from numpy.typing import NDArray

from sniper._bench._report import PeerMissing, verdict
from sniper._bench._torch_peer import import_torch
from sniper._table import print_table
from sniper.cluster import ps_command, server_process
from sniper.data import Workload, signs_of_ranks
from sniper.placement import auto_shards
from sniper.roles import PsRoleConfig, estimate_bytes
from sniper.rpc import PsClient, VariableConfig
from sniper.store import Adagrad

__all__ = ["Footprint", "rss_bytes", "run", "target_bytes_per_row"]

LR = 0.01
FILL_SIGNS = 1 << 18
"""Signs per filling batch: 2 MB of signs a message, 16 batches for 4M rows."""
WARMUP = "memory_warmup"
MEASURED = "memory"


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of process ``pid`` (``VmRSS`` in ``/proc/PID/status``)."""
    status = Path(f"/proc/{pid}/status")
    try:
        text = status.read_text()
    except FileNotFoundError:
        raise OSError(
            f"{status} is missing: sniper bench memory reads RSS from /proc (Linux only)"
        ) from None
    line = next(line for line in text.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _available_bytes() -> int:
    """``MemAvailable`` of ``/proc/meminfo``: what the table may take without swapping."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemAvailable line: sniper bench memory needs Linux")


def check_rows(rows: int, dim: int, optimizer: Adagrad) -> None:
    """Refuse a table the ps would refuse, or this machine could not hold, before starting."""
    needed = estimate_bytes(dim, rows, optimizer)
    budget = PsRoleConfig().max_table_bytes
    available = _available_bytes()
    if needed > budget:
        reason = f"a ps preallocates at most {budget / 2**30:.1f} GiB (--max-table-gb)"
    elif needed > available:
        reason = f"this machine has {available / 2**30:.1f} GiB available"
    else:
        return
    raise ValueError(
        f"--rows {rows:,} needs about {needed / 2**30:.1f} GiB of table, but {reason}; lower --rows"
    )


def target_bytes_per_row(dim: int, optimizer: Adagrad) -> float:
    """Issue 15's bound: ``1.25 x (weights + optimizer state) + 16`` bytes a row."""
    return 1.25 * _weights_and_state(dim, optimizer) + 16


def _weights_and_state(dim: int, optimizer: Adagrad) -> int:
    return 4 * dim * (1 + optimizer.slots)


@dataclass(frozen=True)
class Footprint:
    """Memory a table added to its process."""

    rows: int
    bytes: int

    @property
    def per_row(self) -> float:
        return self.bytes / self.rows


@dataclass(frozen=True)
class PsFootprint:
    """What filling the ps's table did: its RSS growth and its preallocated arrays."""

    rss: Footprint
    preallocated: Footprint
    shards: int
    batches: int
    evictions: int
    seconds: float


def _batch(
    start: int, count: int, bags: int, field: int
) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
    """``count`` distinct signs (ranks ``start..start+count``) spread evenly over ``bags``."""
    signs = signs_of_ranks(np.arange(start, start + count, dtype=np.int64), field)
    return signs, np.linspace(0, count, bags + 1).astype(np.int64)


async def _step(
    client: PsClient,
    batch_id: int,
    name: str,
    batch: tuple[NDArray[np.uint64], NDArray[np.int64]],
    rng: np.random.Generator,
) -> None:
    await client.feed_sample(batch_id, {name: batch})
    pooled = (await client.embedding_lookup(batch_id, [name]))[name].pooled
    await client.push_grad(batch_id, {name: rng.normal(0, 0.01, pooled.shape).astype(np.float32)})


async def _fill_ps(port: int, pid: int, workload: Workload, rows: int, shards: int) -> PsFootprint:
    dim, field = workload.embedding_dim, workload.largest().field
    client = PsClient("127.0.0.1", port)
    rng = np.random.default_rng(0)
    optimizer = {"lr": LR}
    try:
        await client.create_variable(VariableConfig(WARMUP, dim, 1024, optimizer_params=optimizer))
        await _step(client, 0, WARMUP, _batch(0, 512, 64, field), rng)
        before = rss_bytes(pid)
        await client.create_variable(
            VariableConfig(MEASURED, dim, rows, optimizer_params=optimizer, shards=shards)
        )
        started = time.perf_counter()
        held, batch_id, sent = 0, 0, 0
        while held < rows:
            # Half a table at most (a batch's share of a shard must fit in it); near the end,
            # little more than the rows still free, so that filling evicts few.
            count = max(1, min(FILL_SIGNS, rows // 2, rows - held + 1024))
            batch_id += 1
            batch = _batch(sent, count, min(workload.batch_size, count), field)
            await _step(client, batch_id, MEASURED, batch, rng)
            sent += count
            stats = next(v for v in (await client.stats()).variables if v.name == MEASURED)
            held = stats.rows
        seconds = time.perf_counter() - started
        growth = rss_bytes(pid) - before
    finally:
        client.close()
    return PsFootprint(
        Footprint(held, growth),
        Footprint(held, stats.bytes),
        shards,
        batch_id,
        stats.evictions,
        seconds,
    )


def measure_ps(workload: Workload, rows: int) -> PsFootprint:
    """Start a ps, fill a table of ``rows`` rows, stop the ps; what the table cost it."""
    shards = min(auto_shards(workload.largest().signs_per_batch), rows)
    command = ps_command("work_stealing", 1, "--stats-interval", "3600")
    with server_process(command) as server:
        return anyio.run(
            _fill_ps, server.port, server.process.pid, workload, rows, shards, backend="asyncio"
        )


def _torch_footprint(rows: int, dim: int) -> Footprint:
    """In a fresh process: RSS growth of an ``EmbeddingBag`` of ``rows`` rows and its Adagrad
    after one step (the warm-up step on a small bag loads torch's kernels first)."""
    torch = import_torch()
    torch.set_num_threads(1)

    def stepped(count: int) -> object:
        bag = torch.nn.EmbeddingBag(count, dim, mode="sum", sparse=True)
        adagrad = torch.optim.Adagrad(bag.parameters(), lr=LR)  # its accumulator: every row
        bag(torch.arange(min(count, 1024)), torch.zeros(1, dtype=torch.int64)).sum().backward()
        with warnings.catch_warnings():  # torch's note that it skips sparse invariant checks
            warnings.simplefilter("ignore", UserWarning)
            adagrad.step()
        adagrad.zero_grad(set_to_none=True)
        return bag, adagrad

    warm = stepped(1024)
    before = rss_bytes()
    table = stepped(rows)
    grown = rss_bytes() - before
    del warm, table
    return Footprint(rows, grown)


def measure_torch(rows: int, dim: int) -> Footprint:
    """:func:`_torch_footprint` in a fresh process: this one's RSS holds sniper's imports."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_torch_footprint, rows, dim).result()


def _ratio_row(name: str, footprint: Footprint, target: float, judged: bool) -> list[str]:
    ratio = target / footprint.per_row
    return [
        name,
        f"{footprint.rows:,}",
        f"{footprint.bytes / 2**20:,.1f}",
        f"{footprint.per_row:.1f}",
        f"{ratio:.2f}x",
        verdict(ratio, 1.0) if judged else "-",
    ]


def run(workload: Workload, *, rows: int) -> PsFootprint:
    """Measure and print the ps's bytes per row against the target and torch."""
    dim, optimizer = workload.embedding_dim, Adagrad(lr=LR)
    target = target_bytes_per_row(dim, optimizer)
    check_rows(rows, dim, optimizer)
    print(
        f"sniper bench memory: one ps process, one Adagrad variable of dim {dim} "
        f"({_weights_and_state(dim, optimizer)} bytes of weights and state a row), "
        f"{rows:,} rows filled through FeedSample, EmbeddingLookup and PushGrad"
    )
    ps = measure_ps(workload, rows)
    print(
        f"  filled {ps.rss.rows:,} rows in {ps.shards} shards with {ps.batches} batches "
        f"({ps.evictions:,} evictions) in {ps.seconds:.1f} s"
    )
    table = [
        _ratio_row("sniper ps: RSS growth", ps.rss, target, True),
        _ratio_row("sniper table: preallocated (nbytes)", ps.preallocated, target, True),
    ]
    note = None
    try:
        peer = measure_torch(ps.rss.rows, dim)
        table.append(_ratio_row("torch EmbeddingBag + Adagrad: RSS growth", peer, target, False))
    except PeerMissing as exc:
        peer, note = None, str(exc)
    print(f"\nbytes per row; ratio = target / bytes per row; target {target:g} bytes a row")
    print_table(["", "rows", "MiB", "bytes/row", "ratio", "target >= 1x"], table)
    if peer is not None:
        print(
            f"\ntorch / sniper ps: {peer.per_row / ps.rss.per_row:.2f}x "
            "(torch holds the weights and accumulator alone: no index, no eviction)"
        )
    if note:
        print(f"\nnote: {note}")
    return ps
