"""Shared fixtures: every async test runs on asyncio and on trio through anyio's plugin."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
