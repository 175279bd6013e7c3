"""A hub whose data is malformed stops cleanly: NOT_SERVING, and ReadSample says why."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc

from tests.data._helpers import criteo_line
from tests.rpc import _grpcio
from tests.rpc._grpcio import GrpcModules, start_server, stop_server

grpcio_modules = _grpcio.grpcio_modules
GOOD = criteo_line("1", ["1"] * 13, ["ab"] * 26)


def test_bad_data_turns_the_hub_not_serving(grpcio_modules: GrpcModules, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text(GOOD * 2 + criteo_line("1", ["x"] + ["1"] * 12, ["ab"] * 26) + GOOD)
    ps = start_server(tmp_path, "--workers", "1")
    hub = start_server(
        tmp_path,
        command=[
            *(sys.executable, "-m", "sniper", "serve", "--role", "hub", "--port", "0"),
            *("--ps", f"127.0.0.1:{ps.port}", "--data", f"criteo:{bad}"),
        ],
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{hub.port}") as channel:
            health = grpcio_modules.health_grpc.HealthStub(channel)
            request = grpcio_modules.health.HealthCheckRequest(service="sniper.v1.Hub")
            not_serving = grpcio_modules.health.HealthCheckResponse.NOT_SERVING
            deadline = time.monotonic() + 60
            while health.Check(request, timeout=10).status != not_serving:
                assert time.monotonic() < deadline, "the hub never turned NOT_SERVING"
                time.sleep(0.1)
            try:
                grpcio_modules.pb_grpc.HubStub(channel).ReadSample(
                    grpcio_modules.pb.ReadSampleRequest(), timeout=10
                )
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                assert exc.details() == (
                    "hub 0 stopped reading its data: CriteoFormatError: "
                    f"{bad}:3: I1 must be a 64-bit integer or empty, got 'x'"
                )
            else:
                raise AssertionError("ReadSample of a failed hub answered")
    finally:
        stop_server(hub)
        stop_server(ps)
    assert hub.process.returncode == 0  # it still stops cleanly on SIGTERM
    logged = hub.stderr_path.read_text()
    assert "Traceback" not in logged
    assert logged.count("hub 0 stopped reading its data") == 1  # its log is the only place
