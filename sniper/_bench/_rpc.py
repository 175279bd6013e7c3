"""``sniper bench rpc``: one seed_ctr EmbeddingLookup over loopback, against grpcio.

The answer to a whole-batch lookup is 76 variables x 1024 examples x 16 float32 (5 MB),
whatever the number of signs, so three sniper cases are measured against one grpcio peer:

- ``transport only``: sniper's grpclib server (``sniper.rpc.Server``) answering with the same
  canned bytes as the peer, read by ``PsClient``: HTTP/2, framing and the tensor codec, no
  table work. This is the number the grpclib tuning moves;
- ``ps, 1 sign/example``: a real ``sniper serve`` ps looking up 76 variables of 1024 signs:
  transport plus the per-variable work of a lookup;
- ``ps, seed_ctr batch``: the full 719k-sign batch: the whole EmbeddingLookup as a trainer
  sees it.

The peer is a grpcio server in its own process answering the same request with the same
serialized response bytes, read by a grpcio client that parses them with protobuf and views
each tensor with ``np.frombuffer``, as a grpcio user would. Each server runs in a subprocess
and each client in this process, one call in flight at a time.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import numpy as np

from sniper._bench._local import make_batches
from sniper._bench._report import Comparison, print_comparisons
from sniper.cluster import ps_command, server_process
from sniper.data import Workload
from sniper.rpc import RPC_DIR, PsClient, VariableConfig

_MB = 2**20


def _grpcio_modules(out: Path) -> ModuleType:
    """Generate and import ``sniper_pb2`` with grpcio-tools, as a grpcio user would."""
    from grpc_tools import protoc

    status = protoc.main(
        ["protoc", f"-I{RPC_DIR}", f"--python_out={out}", str(RPC_DIR / "sniper.proto")]
    )
    if status != 0:
        raise RuntimeError("protoc could not compile sniper.proto")
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("sniper_pb2")
    finally:
        sys.path.remove(str(out))


def _time_calls(call: Callable[[], Any], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _grpcio_seconds(port: int, pb2: ModuleType, variables: int, repeats: int) -> float:
    import grpc

    options = [("grpc.max_receive_message_length", 256 * _MB)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:

        def parse(data: bytes) -> list[np.ndarray]:
            response = pb2.EmbeddingLookupResponse.FromString(data)
            return [
                np.frombuffer(e.pooled.data, dtype=np.float32).reshape(tuple(e.pooled.shape))
                for e in response.embeddings
            ]

        lookup = channel.unary_unary(
            "/sniper.v1.Ps/EmbeddingLookup", request_serializer=None, response_deserializer=parse
        )
        request = pb2.EmbeddingLookupRequest(
            batch_id=1, names=[f"embedding_{i}" for i in range(variables)]
        ).SerializeToString()
        return _time_calls(lambda: lookup(request, timeout=60), repeats)


async def _lookup_seconds(port: int, names: list[str], window_mb: float, repeats: int) -> float:
    async with PsClient("127.0.0.1", port, http2_window_mb=window_mb) as client:
        times = []
        for attempt in range(repeats + 1):
            start = time.perf_counter()
            await client.embedding_lookup(1, names)
            if attempt:
                times.append(time.perf_counter() - start)
        return float(np.median(times))


async def _sniper_seconds(
    port: int, workload: Workload, window_mb: float, repeats: int, full_batch: bool
) -> float:
    names = [v.name for v in workload.variables]
    async with PsClient("127.0.0.1", port, http2_window_mb=window_mb) as client:
        for spec in workload.variables:
            await client.create_variable(
                VariableConfig(
                    spec.name,
                    workload.embedding_dim,
                    capacity=min(spec.vocabulary, 1 << 21),
                    optimizer="sgd",
                    optimizer_params={"lr": 0.01},
                    shards=max(1, spec.signs_per_batch // 32768),
                )
            )
        if full_batch:
            batch = make_batches(workload, 1, seed=0)[0]
        else:
            one = np.arange(workload.batch_size, dtype=np.uint64)
            offsets = np.arange(workload.batch_size + 1, dtype=np.int64)
            batch = {name: (one, offsets) for name in names}
        await client.feed_sample(1, batch)
    return await _lookup_seconds(port, names, window_mb, repeats)


def _canned_command(transport: str, workload: Workload) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sniper._bench._canned_peer",
        transport,
        str(len(workload.variables)),
        str(workload.batch_size),
        str(workload.embedding_dim),
    ]


def run(workload: Workload, *, repeats: int, window_mb: float, workers: int) -> None:
    """Measure the sniper cases and the grpcio peer; print MB/s and ratios."""
    variables = len(workload.variables)
    names = [v.name for v in workload.variables]
    payload = variables * workload.batch_size * workload.embedding_dim * 4
    print(
        f"sniper bench rpc: EmbeddingLookup of {variables} variables x "
        f"{workload.batch_size} x {workload.embedding_dim} float32 = {payload / 1e6:.1f} MB "
        f"per call over loopback, HTTP/2 windows {window_mb:g} MiB, median of {repeats}"
    )
    sniper_cmd = ps_command(
        "work_stealing", workers, "--stats-interval", "3600", "--http2-window-mb", str(window_mb)
    )
    results: dict[str, float] = {}
    with server_process(_canned_command("sniper", workload)) as server:
        results["sniper transport only (canned answer)"] = anyio.run(
            _lookup_seconds, server.port, names, window_mb, repeats, backend="asyncio"
        )
    for name, full in (("ps, 1 sign/example", False), ("ps, seed_ctr batch", True)):
        with server_process(sniper_cmd) as server:
            results[name] = anyio.run(
                _sniper_seconds, server.port, workload, window_mb, repeats, full, backend="asyncio"
            )
    with tempfile.TemporaryDirectory() as tmp:
        pb2 = _grpcio_modules(Path(tmp))
        with server_process(_canned_command("grpcio", workload)) as peer:
            grpcio_s = _grpcio_seconds(peer.port, pb2, variables, repeats)
    comparisons = [
        Comparison(f"{name} vs grpcio (same bytes)", payload, seconds, grpcio_s, 0.8)
        for name, seconds in results.items()
    ]
    print_comparisons(
        "bytes per call; ratio = grpcio time / sniper time", "grpcio", "B", comparisons
    )
