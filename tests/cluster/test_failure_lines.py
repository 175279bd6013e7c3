"""A failed call between roles reaches the user of ``sniper train`` as one line,
``sniper: error: <role> <address>: <STATUS>: <what happened>; <what to do>``, with exit
status 1 and no traceback: a wrong token, a plaintext job against a TLS server, a peer that
is not there, a peer that does not answer in time, whether the servers are named by
``--ps``/``--hub`` or by ``--cluster-spec``."""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.cluster._sniper import sniper
from tests.rpc._grpcio import ServerProcess, start_server, stop_server

TOKEN = "s3cret-token"
REFUSED = "ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', {port})"


@pytest.fixture(scope="module")
def room(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A token, a wrong token, TLS files for a server, and configs naming them."""
    root = tmp_path_factory.mktemp("failures")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
    server.private_key_pem.write_to_path(str(root / "key.pem"))
    (root / "token").write_text(TOKEN + "\n")
    (root / "wrong").write_text("not-the-token\n")
    (root / "token.toml").write_text(f'auth_token_file = "{root / "token"}"\n')
    (root / "wrong.toml").write_text(f'auth_token_file = "{root / "wrong"}"\n')
    (root / "tls.toml").write_text(
        f'tls_cert = "{root / "cert.pem"}"\ntls_key = "{root / "key.pem"}"\n'
        f'auth_token_file = "{root / "token"}"\n'
    )
    return root


@pytest.fixture(scope="module")
def servers(room: Path) -> Iterator[dict[str, ServerProcess]]:
    """A ps and a hub that take the token, and a ps that speaks only TLS."""
    ps = start_server(room, "--workers", "1", "--config", str(room / "token.toml"))
    started = {"ps": ps}
    try:
        started["hub"] = start_server(
            room,
            command=[
                *(sys.executable, "-m", "sniper", "serve", "--role", "hub", "--port", "0"),
                *("--ps", address(ps), "--scale", "0.001", "--config", str(room / "token.toml")),
            ],
        )
        started["tls_ps"] = start_server(room, "--workers", "1", "--config", str(room / "tls.toml"))
        yield started
    finally:
        for server in started.values():
            stop_server(server)


def address(server: ServerProcess) -> str:
    return f"127.0.0.1:{server.port}"


def one_line(room: Path, *args: str) -> str:
    done = sniper(room, "train", "--quiet", *args, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.count("\n") == 1, done.stderr[-3000:]
    return done.stderr


def test_a_wrong_token_names_the_ps_and_the_key(
    room: Path, servers: dict[str, ServerProcess]
) -> None:
    ps, hub = address(servers["ps"]), address(servers["hub"])
    line = one_line(room, "--ps", ps, "--hub", hub, "--config", "wrong.toml")
    assert line == (
        f"sniper: error: ps {ps}: UNAUTHENTICATED: the bearer token is wrong; give this job "
        "the auth_token_file its servers use\n"
    )


def test_a_wrong_token_through_a_cluster_spec(
    room: Path, servers: dict[str, ServerProcess]
) -> None:
    ps, hub = servers["ps"], servers["hub"]
    (room / "spec.toml").write_text(
        f'[[ps]]\nhost = "127.0.0.1"\nport = {ps.port}\n'
        f'[[hub]]\nhost = "127.0.0.1"\nport = {hub.port}\n'
    )
    line = one_line(room, "--cluster-spec", "spec.toml", "--config", "wrong.toml")
    assert line == (
        f"sniper: error: ps {address(ps)}: UNAUTHENTICATED: the bearer token is wrong; give "
        "this job the auth_token_file its servers use\n"
    )


def test_a_plaintext_job_against_a_tls_ps_hints_at_tls(
    room: Path, servers: dict[str, ServerProcess]
) -> None:
    ps, hub = address(servers["tls_ps"]), address(servers["hub"])
    line = one_line(room, "--ps", ps, "--hub", hub, "--config", "token.toml")
    assert line == (
        f"sniper: error: ps {ps}: UNAVAILABLE: connection lost (StreamTerminatedError: "
        "Connection lost); it stopped, or it serves TLS and this job does not: give the job "
        "tls_ca (and tls_cert, tls_key where servers have tls_ca)\n"
    )


def test_a_hub_serving_other_data_than_the_trainer_expects_names_both(
    room: Path, servers: dict[str, ServerProcess]
) -> None:
    """The hub serves scale 0.001; the trainer, configured with the default 0.02, used to wait
    on batches of another shape. Now its first read compares, and one line names both."""
    ps, hub = address(servers["ps"]), address(servers["hub"])
    line = one_line(room, "--ps", ps, "--hub", hub, "--config", "token.toml")
    found = re.fullmatch(
        rf"sniper: error: hub {re.escape(hub)} serves data 'synthetic' \(76 variables, 13 dense "
        r"features, batch_size 1024, data keys digest ([0-9a-f]{16})\), but this trainer was "
        r"configured for data 'synthetic' \(76 variables, 13 dense features, batch_size 1024, "
        r"data keys digest ([0-9a-f]{16})\); they differ in a key this line does not show; give "
        r"the hubs and the trainer the same data keys \(data, workload, scale, num_batches, "
        r"batch_size, seed, and \[features\] with its columns' settings\)\n",
        line,
    )
    assert found is not None and found[1] != found[2], line


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_ps_and_a_hub_that_are_not_there(room: Path, servers: dict[str, ServerProcess]) -> None:
    ps, hub = address(servers["ps"]), address(servers["hub"])
    nothing = free_port()
    hint = "nothing listens there: start it, or correct the address"
    for role, args in (
        ("ps", ("--ps", f"127.0.0.1:{nothing}", "--hub", hub)),
        ("hub", ("--ps", ps, "--hub", f"127.0.0.1:{nothing}")),
    ):
        line = one_line(room, *args, "--config", "token.toml")
        assert line == (
            f"sniper: error: {role} 127.0.0.1:{nothing}: UNAVAILABLE: connection refused "
            f"({REFUSED.format(port=nothing)}); {hint}\n"
        )


def test_a_ps_that_does_not_answer_in_time(room: Path, servers: dict[str, ServerProcess]) -> None:
    with socket.socket() as silent:  # takes connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        ps = f"127.0.0.1:{silent.getsockname()[1]}"
        hub = address(servers["hub"])
        line = one_line(
            room, "--ps", ps, "--hub", hub, "--config", "token.toml", "--rpc-timeout", "0.5"
        )
    assert line == (
        f"sniper: error: ps {ps}: DEADLINE_EXCEEDED: no answer in time (TimeoutError: Deadline "
        "exceeded); it is overloaded or stuck: see its log\n"
    )


def test_a_job_that_trains_no_batch_exits_1_saying_why(room: Path) -> None:
    data = ("--scale", "0.001", "--num-batches", "4")  # the trainer's keys are the hub's
    ps = start_server(room, "--workers", "1")
    try:
        hub = start_server(
            room,
            command=[
                *(sys.executable, "-m", "sniper", "serve", "--role", "hub", "--port", "0"),
                *("--ps", address(ps), *data),
            ],
        )
        try:
            args = ("train", "--quiet", "--ps", address(ps), "--hub", address(hub), *data)
            first = sniper(room, *args, "--output", "first.json", timeout=120)
            assert first.returncode == 0, first.stderr[-3000:]
            again = sniper(room, *args, "--output", "again.json", timeout=120)
        finally:
            stop_server(hub)
    finally:
        stop_server(ps)
    assert again.returncode == 1, again.stderr[-3000:]
    assert "trained 0 batches" in again.stdout
    assert again.stderr.splitlines()[-1] == (
        f"sniper: error: trained 0 batches: the hubs ({address(hub)}) handed out none; a hub "
        "serves its data once, so one that served a job before has none left: restart it"
    )
