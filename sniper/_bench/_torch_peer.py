"""torch ``EmbeddingBag`` as a peer: what a user would pick instead of a parameter server.

torch is never a dependency of sniper; benches import it lazily and say how to install it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper._bench._report import PeerMissing

INSTALL_HINT = "pip install torch==2.13.0  (a CPU build; or: pip install -e '.[bench]')"


def import_torch() -> ModuleType:
    """Return the torch module, or raise :class:`PeerMissing` saying how to install it."""
    try:
        import torch as module
    except ImportError:
        raise PeerMissing(
            f"torch is not installed, so the torch peer is skipped: {INSTALL_HINT}"
        ) from None
    # Typed through a variable: mypy sees torch as Any where torch is not installed (CI).
    torch: ModuleType = module
    return torch


class TorchBag:
    """``EmbeddingBag(mode="sum", sparse=True)`` over pre-mapped rows, with torch's Adagrad."""

    def __init__(self, weights: NDArray[np.float32], threads: int, lr: float) -> None:
        self.torch = import_torch()
        self.torch.set_num_threads(threads)
        self.bag = self.torch.nn.EmbeddingBag.from_pretrained(
            self.torch.from_numpy(weights.copy()),
            mode="sum",
            freeze=False,
            sparse=True,
            include_last_offset=True,
        )
        self.optimizer = self.torch.optim.Adagrad(self.bag.parameters(), lr=lr)

    def tensors(self, ids: NDArray[np.int64], offsets: NDArray[np.int64]) -> tuple[Any, Any]:
        """Convert a pre-mapped batch once, outside any timed region."""
        return self.torch.from_numpy(ids), self.torch.from_numpy(offsets)

    def lookup(self, ids: Any, offsets: Any) -> Any:
        with self.torch.no_grad():
            return self.bag(ids, offsets)

    def train_step(self, ids: Any, offsets: Any, grad: Any) -> None:
        out = self.bag(ids, offsets)
        out.backward(grad)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
