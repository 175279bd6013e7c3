"""The gRPC transport under trio fails in one line saying it needs asyncio: from the library
(``serve_ps``, a transport's server and clients) and from ``sniper serve`` (exit 2, no
traceback), where trio's own error named nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
import trio

from sniper.cli import main
from sniper.cluster import ServeConfig, serve_ps
from sniper.transport import AsyncioOnlyError, GrpcTransport
from sniper.transport._grpc import require_asyncio

MESSAGE = (
    "a gRPC server needs asyncio: the gRPC transport (grpclib) runs on asyncio only, and this "
    "runs under trio; run it with asyncio (anyio.run(..., backend='asyncio')), or use the "
    "inprocess transport, which runs under any anyio backend"
)


def test_serve_ps_under_trio_says_the_transport_needs_asyncio() -> None:
    with pytest.raises(AsyncioOnlyError) as info:
        trio.run(serve_ps, ServeConfig(role="ps", port=0, workers=1))
    assert str(info.value) == MESSAGE


def test_a_grpc_client_under_trio_says_so_too() -> None:
    async def connect() -> None:
        GrpcTransport().ps_client("127.0.0.1:1")

    with pytest.raises(AsyncioOnlyError, match=r"^a gRPC client needs asyncio: "):
        trio.run(connect)
    require_asyncio("a gRPC client")  # outside any loop: nothing to check


def test_sniper_serve_under_trio_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def under_trio(coroutine: Coroutine[Any, Any, None]) -> None:
        async def run() -> None:
            await coroutine

        trio.run(run)

    monkeypatch.setattr(asyncio, "run", under_trio)
    status = main(["serve", "--role", "ps", "--port", "0", "--workers", "1"])
    assert status == 2
    assert capsys.readouterr().err == f"sniper: error: {MESSAGE}\n"
