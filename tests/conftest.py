"""Shared fixtures: every async test runs on asyncio and on trio through anyio's plugin."""

from __future__ import annotations

# Imported at collection, not first inside a test: on import hypothesis runs trio's plugin
# hook, whose register_random warns, and under filterwarnings = error a test that happened
# to import hypothesis first (tests/test_bench_profile.py alone) failed on that warning.
import hypothesis  # noqa: F401
import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
