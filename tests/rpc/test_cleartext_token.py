"""A bearer token without TLS off loopback is warned about, once per address; on loopback, or
with TLS, nothing is said."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sniper.rpc import Channel, Security, Server, _security

WARNING = " without TLS: anyone who can read the traffic"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_security, "_warned", set())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]


@pytest.mark.anyio
async def test_a_channel_off_loopback_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    token = Security(token="t0k3n")
    with caplog.at_level(logging.WARNING, logger="sniper.rpc"):
        for _ in range(2):
            Channel("10.1.2.3", 7000, security=token).close()
    [message] = _warnings(caplog)
    assert message.startswith("the channel on address 10.1.2.3 sends its bearer token without")
    assert "tls_cert, tls_key and tls_ca" in message


@pytest.mark.anyio
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.9.9.9"])
async def test_loopback_says_nothing(host: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sniper.rpc"):
        Channel(host, 7000, security=Security(token="t0k3n")).close()
    assert not _warnings(caplog)


@pytest.mark.anyio
async def test_no_token_or_tls_says_nothing(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"  # a client context loads the CA only when it verifies a server
    with caplog.at_level(logging.WARNING, logger="sniper.rpc"):
        Channel("10.1.2.3", 7000, security=Security()).close()
        Security(ca=str(ca), token="t0k3n").check_cleartext("10.1.2.3", "channel")
    assert not _warnings(caplog)


def test_a_server_bound_to_every_interface_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sniper.rpc"):
        Security(token="t0k3n").check_cleartext(None, "server")
    [message] = _warnings(caplog)
    assert "server on every interface" in message


@pytest.mark.anyio
async def test_a_server_started_on_loopback_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    server = Server([], security=Security(token="t0k3n"))
    with caplog.at_level(logging.WARNING, logger="sniper.rpc"):
        await server.start("127.0.0.1", 0)
        server.close()
        await server.wait_closed()
        Server([], security=Security(token="t0k3n"))._security.check_cleartext("::", "server")
    [message] = _warnings(caplog)
    assert message.startswith("the server on address :: takes bearer tokens without TLS")
