"""``sniper serve`` as a real process: its listening line, graceful SIGTERM, and bad flags."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from sniper.cluster import ServeConfig
from sniper.store import SGD, EmbeddingTable, normal
from tests.rpc import _grpcio
from tests.rpc._grpcio import (
    GrpcModules,
    ServerProcess,
    from_tensor,
    run_cli,
    start_server,
    stop_server,
    to_tensor,
)

grpcio_modules = _grpcio.grpcio_modules

TIMEOUT = 30.0
LISTENING = re.compile(r"listening on 127\.0\.0\.1:([0-9]+)\n")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of the test's own; a test stops it and checks the status itself."""
    process = start_server(tmp_path, "--workers", "1")
    try:
        yield process
    finally:
        stop_server(process)  # also closes its stdout when the test already stopped it


def health_status(grpcio: GrpcModules, address: str, service: str = "") -> Any:
    with grpc.insecure_channel(address) as channel:
        stub = grpcio.health_grpc.HealthStub(channel)
        request = grpcio.health.HealthCheckRequest(service=service)
        return stub.Check(request, timeout=TIMEOUT).status


def stats_code(grpcio: GrpcModules, address: str) -> grpc.StatusCode:
    """The status of a Stats call on a new channel."""
    with grpc.insecure_channel(address) as channel:
        try:
            grpcio.pb_grpc.PsStub(channel).Stats(grpcio.pb.StatsRequest(), timeout=5.0)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code
    return grpc.StatusCode.OK


def test_listening_line_then_sigterm_exits_zero(
    grpcio_modules: GrpcModules, server: ServerProcess
) -> None:
    match = LISTENING.fullmatch(server.listening_line)
    assert match is not None, server.listening_line
    port = int(match.group(1))
    assert 0 < port <= 65535
    assert port == server.port
    serving = grpcio_modules.health.HealthCheckResponse.SERVING
    assert health_status(grpcio_modules, server.address, "sniper.v1.Ps") == serving
    assert stop_server(server) == 0
    assert server.process.stdout is not None
    assert server.process.stdout.closed  # nothing but the listening line went to stdout
    assert "signal received: draining in-flight calls" in server.stderr()


def test_stdout_holds_only_the_listening_line(grpcio_modules: GrpcModules, tmp_path: Path) -> None:
    process = start_server(tmp_path)
    assert process.process.stdout is not None
    assert stats_code(grpcio_modules, process.address) == grpc.StatusCode.OK
    process.process.terminate()
    rest = process.process.stdout.read()
    assert stop_server(process) == 0
    assert rest == b""


def test_sigterm_right_after_the_listening_line_exits_zero(tmp_path: Path) -> None:
    """The listening line tells a supervisor the server is up: from then on SIGTERM must
    shut it down gracefully (exit 0), not kill it with the default signal action."""
    for _ in range(5):  # the window is short: several tries make a regression certain
        process = start_server(tmp_path)
        status = stop_server(process)
        assert status == 0, f"exit status {status}; stderr:\n{process.stderr()}"


def test_sigint_also_drains_and_exits_zero(
    grpcio_modules: GrpcModules, server: ServerProcess
) -> None:
    assert stats_code(grpcio_modules, server.address) == grpc.StatusCode.OK
    server.process.send_signal(2)  # SIGINT
    assert server.process.wait(timeout=TIMEOUT) == 0
    assert stop_server(server) == 0


SLOW_DIM = 16
SLOW_BATCHES = 8
SLOW_SIGNS = 400_000
SLOW_EXAMPLE = 400


@pytest.fixture
def slow_lookups(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server that maps rows at lookup, not at FeedSample: its lookups are the slow calls."""
    config = tmp_path / "serve.toml"
    config.write_text('map_rows = "lookup"\n')
    process = start_server(tmp_path, "--workers", "1", "--config", str(config))
    try:
        yield process
    finally:
        stop_server(process)


def test_sigterm_lets_calls_in_flight_finish(
    grpcio_modules: GrpcModules, slow_lookups: ServerProcess
) -> None:
    """Lookups queued behind each other on one worker finish after SIGTERM; new calls do not
    start, and the process exits 0."""
    server = slow_lookups
    pb = grpcio_modules.pb
    rng = np.random.default_rng(0)
    batches = [
        rng.integers(0, 2**64 - 1, size=SLOW_SIGNS, dtype=np.uint64, endpoint=True)
        for _ in range(SLOW_BATCHES)
    ]
    offsets = np.arange(0, SLOW_SIGNS + 1, SLOW_EXAMPLE, dtype=np.int64)
    with grpc.insecure_channel(server.address) as channel:
        ps = grpcio_modules.pb_grpc.PsStub(channel)
        ps.CreateVariable(
            pb.CreateVariableRequest(
                name="slow",
                dim=SLOW_DIM,
                capacity=SLOW_BATCHES * SLOW_SIGNS,
                optimizer=pb.OptimizerConfig(name="sgd"),
                seed=5,
            ),
            timeout=TIMEOUT,
        )
        for batch_id, signs in enumerate(batches):
            variable = pb.VariableSigns(
                name="slow", signs=to_tensor(pb, signs), offsets=to_tensor(pb, offsets)
            )
            ps.FeedSample(
                pb.FeedSampleRequest(batch_id=batch_id, variables=[variable]), timeout=TIMEOUT
            )
        # Every lookup inserts 400k new rows, one after the other on the only worker.
        done: list[float] = []
        lock = threading.Lock()

        def finished(_: Any) -> None:
            with lock:
                done.append(time.monotonic())

        futures = []
        for batch_id in range(SLOW_BATCHES):
            request = pb.EmbeddingLookupRequest(batch_id=batch_id, names=["slow"], release=True)
            future = ps.EmbeddingLookup.future(request, timeout=120.0)
            future.add_done_callback(finished)
            futures.append(future)
        # Signalled once the first lookup has answered: the others are queued behind it on
        # the only worker (a fixed pause was outrun once new rows stopped costing 2 MB pages).
        deadline = time.monotonic() + TIMEOUT
        while not done and time.monotonic() < deadline:
            time.sleep(0.002)
        signalled = time.monotonic()
        server.process.terminate()
        # New calls are refused once the server has heard the signal (polled: a loaded machine
        # may take longer than any fixed pause to deliver it).
        while (refused := stats_code(grpcio_modules, server.address)) == grpc.StatusCode.OK:
            assert time.monotonic() < deadline, "still answering new calls after SIGTERM"
            time.sleep(0.01)
        results = [future.result(timeout=120.0) for future in futures]
    status = server.process.wait(timeout=TIMEOUT)

    assert refused == grpc.StatusCode.UNAVAILABLE
    assert len(done) == SLOW_BATCHES
    assert max(done) > signalled, "every lookup finished before SIGTERM: nothing was in flight"
    reference = EmbeddingTable(
        SLOW_DIM, capacity=4 * SLOW_EXAMPLE, optimizer=SGD(), initializer=normal(0.01), seed=5
    )
    for signs, response in zip(batches, results, strict=True):
        (embedding,) = response.embeddings
        pooled = from_tensor(embedding.pooled, "float32")
        assert pooled.shape == (len(offsets) - 1, SLOW_DIM)
        head = signs[: 2 * SLOW_EXAMPLE]
        expected = reference.lookup_pool(head, offsets[:3])
        np.testing.assert_allclose(pooled[:2], expected, rtol=1e-5, atol=1e-7)
    assert status == 0, server.stderr()
    assert stats_code(grpcio_modules, server.address) == grpc.StatusCode.UNAVAILABLE


def test_calls_after_exit_are_unavailable(
    grpcio_modules: GrpcModules, server: ServerProcess
) -> None:
    assert stats_code(grpcio_modules, server.address) == grpc.StatusCode.OK
    assert stop_server(server) == 0
    assert stats_code(grpcio_modules, server.address) == grpc.StatusCode.UNAVAILABLE


def _known_keys() -> str:
    return ", ".join(sorted(f.name for f in dataclasses.fields(ServeConfig)))


@pytest.mark.parametrize(
    ("args", "config", "expected"),
    [
        (["--port", "70000"], None, "port must be in [0, 65535], got 70000"),
        (["--port", "-1"], None, "port must be in [0, 65535], got -1"),
        (
            ["--scheduler", "nope"],
            None,
            "scheduler must be one of adaptive, inline, per_variable, thread_pool, "
            "work_stealing, got 'nope'",
        ),
        (["--max-message-mb", "0"], None, "max_message_mb must be positive, got 0.0"),
        (
            ["--http2-frame-kb", "8"],
            None,
            "http2_frame_kb must be in [16, 16383] (HTTP/2's bounds), got 8",
        ),
        (
            [],
            "bogus = 1\n",
            "config {path}: unknown key 'bogus'; known keys: {known}",
        ),
        ([], "workers = -1\n", "workers must be at least 0, got -1"),
        ([], 'scheduler = "inline"\nport = 99999\n', "port must be in [0, 65535], got 99999"),
    ],
)
def test_a_bad_flag_exits_2_with_one_error_line(
    tmp_path: Path, args: list[str], config: str | None, expected: str
) -> None:
    if config is not None:
        path = tmp_path / "serve.toml"
        path.write_text(config)
        args = [*args, "--config", str(path)]
        expected = expected.format(path=path, known=_known_keys())
    result = run_cli(tmp_path, "serve", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"sniper: error: {expected}\n"


def test_a_flag_overrides_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text("port = 70000\n")
    result = run_cli(tmp_path, "serve", "--config", str(path), "--port", "-5")
    assert result.returncode == 2
    assert result.stderr == "sniper: error: port must be in [0, 65535], got -5\n"


@pytest.mark.parametrize(
    ("key", "value"),
    [("workers", '"two"'), ("port", '"80"'), ("max_message_mb", '"big"')],
)
def test_a_config_value_of_the_wrong_type_names_its_key(
    tmp_path: Path, key: str, value: str
) -> None:
    """ServeConfig's errors name the field, also when the TOML value has the wrong type."""
    path = tmp_path / "serve.toml"
    path.write_text(f"{key} = {value}\n")
    result = run_cli(tmp_path, "serve", "--config", str(path))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("sniper: error: ")
    assert re.search(rf"\b{key}\b", lines[0]), lines[0]
