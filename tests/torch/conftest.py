"""torch on one intra-op thread for these tests, as the trainer runs it (``blas_threads = 1``):
on a loaded 2-core machine its default of a spinning thread per core made a 5 ms step 250."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
