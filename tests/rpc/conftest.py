"""grpclib runs on asyncio only, so the async tests of this folder run on asyncio alone."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
