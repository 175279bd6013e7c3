"""The trainer caps its BLAS threads while it runs, and only then."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sniper.roles import Trainer, TrainerConfig, TrainReport
from tests.roles._roles import blas_threads


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
@pytest.mark.parametrize("limit", [1, 0])
async def test_blas_threads_are_capped_during_the_run(
    limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    np.ones((2, 2)) @ np.ones((2, 2))  # load the BLAS
    before = blas_threads()
    seen: list[list[int]] = []

    async def fake_run(self: Any) -> TrainReport:
        seen.append(blas_threads())
        return TrainReport()

    monkeypatch.setattr(Trainer, "_run", fake_run)
    trainer = Trainer([("hub", None)], None, {"a": 4}, 2, TrainerConfig(blas_threads=limit))  # type: ignore[list-item,arg-type]
    await trainer.run()
    assert seen == [[1] * len(before) if limit else before]
    assert blas_threads() == before


def test_negative_blas_threads_are_refused() -> None:
    with pytest.raises(ValueError, match="blas_threads must be at least 0"):
        TrainerConfig(blas_threads=-1)
