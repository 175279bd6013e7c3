"""TLS and token auth end to end with real processes: `sniper train` over mutual TLS with a
bearer token, and servers that refuse every call without the token (UNAUTHENTICATED, before
the role sees it), refuse plaintext, and keep health open."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc
import pytest
import trustme

from tests.cluster._sniper import sniper
from tests.rpc import _grpcio
from tests.rpc._grpcio import GrpcModules, start_server, stop_server

grpcio_modules = _grpcio.grpcio_modules
TOKEN = "s3cret-token"
PS_METHODS = [
    ("CreateVariable", "CreateVariableRequest"),
    ("FeedSample", "FeedSampleRequest"),
    ("EmbeddingLookup", "EmbeddingLookupRequest"),
    ("PushGrad", "PushGradRequest"),
    ("Pull", "PullRequest"),
    ("Push", "PushRequest"),
    ("Save", "SaveRequest"),
    ("Restore", "RestoreRequest"),
    ("Stats", "StatsRequest"),
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA, one certificate for every role (127.0.0.1), one for a client, a token."""
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
    server.private_key_pem.write_to_path(str(root / "key.pem"))
    client = ca.issue_cert("trainer@sniper.test")
    client.cert_chain_pems[0].write_to_path(str(root / "client.pem"))
    client.private_key_pem.write_to_path(str(root / "client-key.pem"))
    (root / "token").write_text(TOKEN + "\n")
    (root / "secure.toml").write_text(
        f'tls_cert = "{root / "cert.pem"}"\ntls_key = "{root / "key.pem"}"\n'
        f'tls_ca = "{root / "ca.pem"}"\nauth_token_file = "{root / "token"}"\n'
    )
    return root


def credentials(pki: Path) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.pem").read_bytes(),
        private_key=(pki / "client-key.pem").read_bytes(),
        certificate_chain=(pki / "client.pem").read_bytes(),
    )


def test_training_runs_over_mutual_tls_with_a_token(pki: Path, tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(
        (pki / "secure.toml").read_text()
        + 'scale = 0.01\nnum_batches = 30\nhidden = [16]\noutput = "report.json"\n'
    )
    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "report.json").read_text())["steps"] == 27  # 30 less held-out


def test_a_call_without_the_token_is_unauthenticated_and_plaintext_is_refused(
    pki: Path, grpcio_modules: GrpcModules, tmp_path: Path
) -> None:
    pb, pb_grpc = grpcio_modules.pb, grpcio_modules.pb_grpc
    ps = start_server(tmp_path, "--workers", "1", "--config", str(pki / "secure.toml"))
    try:
        target = f"127.0.0.1:{ps.port}"
        with grpc.secure_channel(target, credentials(pki)) as channel:
            stub = pb_grpc.PsStub(channel)
            for method, request in PS_METHODS:
                for metadata, message in (
                    (
                        (),
                        "this server needs a bearer token: send 'authorization: Bearer "
                        "<token>' (sniper: auth_token_file)",
                    ),
                    ((("authorization", "Bearer wrong"),), "the bearer token is wrong"),
                ):
                    with pytest.raises(grpc.RpcError) as info:
                        getattr(stub, method)(getattr(pb, request)(), timeout=10, metadata=metadata)
                    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
                    assert info.value.details() == message
            # With the token the same call reaches the ps.
            stats = stub.Stats(
                pb.StatsRequest(), timeout=10, metadata=(("authorization", f"Bearer {TOKEN}"),)
            )
            assert stats.scheduler  # an answer from the ps itself
            # Health stays open: a probe needs no secret.
            health = grpcio_modules.health_grpc.HealthStub(channel)
            check = health.Check(grpcio_modules.health.HealthCheckRequest(), timeout=10)
            assert check.status == grpcio_modules.health.HealthCheckResponse.SERVING
        hub = start_server(
            tmp_path,
            command=[
                *(sys.executable, "-m", "sniper", "serve", "--role", "hub", "--port", "0"),
                *("--ps", target, "--config", str(pki / "secure.toml"), "--scale", "0.001"),
            ],
        )
        try:
            with grpc.secure_channel(f"127.0.0.1:{hub.port}", credentials(pki)) as channel:
                hub_stub = pb_grpc.HubStub(channel)
                for call, request in (
                    (hub_stub.ReadSample, pb.ReadSampleRequest()),
                    (hub_stub.AckSample, pb.AckSampleRequest(batch_ids=[1])),
                ):
                    with pytest.raises(grpc.RpcError) as info:
                        call(request, timeout=10)
                    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            stop_server(hub)
        # Plaintext, or TLS without a client certificate (mutual TLS), never gets an answer.
        with grpc.insecure_channel(target) as channel:
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.PsStub(channel).Stats(pb.StatsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        anonymous = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes())
        with grpc.secure_channel(target, anonymous) as channel:
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.PsStub(channel).Stats(pb.StatsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stop_server(ps)


def test_a_bad_token_file_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    for path, problem in (
        (tmp_path / "missing", "cannot be read: No such file or directory"),
        (tmp_path / "empty", "is empty; put the token in it"),
    ):
        (tmp_path / "bad.toml").write_text(f'auth_token_file = "{path}"\n')
        done = sniper(tmp_path, "serve", "--port", "0", "--config", "bad.toml", timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"sniper: error: auth_token_file '{path}' {problem}\n"


def test_serving_beyond_loopback_without_tls_or_token_is_logged_as_a_risk(tmp_path: Path) -> None:
    ps = start_server(tmp_path, "--workers", "1", "--host", "0.0.0.0")
    stop_server(ps)
    assert "serving on 0.0.0.0 without TLS or a token" in ps.stderr_path.read_text()
    local = start_server(tmp_path, "--workers", "1")
    stop_server(local)
    assert "without TLS or a token" not in local.stderr_path.read_text()
