"""What the trainer does: its settings, validated where they are built (``[trainer]`` keys of a
training config and their ``sniper train`` flags)."""

from __future__ import annotations

from dataclasses import dataclass

from sniper._config import RunSettings, check_at_least, check_positive
from sniper.rpc import check_wire_dtype

__all__ = ["TrainerConfig"]


@dataclass(frozen=True)
class TrainerConfig(RunSettings):
    """What the trainer does; validated at construction (``seed`` seeds the dense model)."""

    hidden: tuple[int, ...] = (64,)
    """Widths of the numpy MLP's hidden layers (the default model; ``[model] params.hidden``
    says the same, and another model takes its layers from ``[model] params``)."""
    lr: float = 0.002
    """The dense model's learning rate: the numpy MLP's Adam's (the same as ``[model] lr``,
    which a model of ``[model]`` takes)."""
    prefetch: int = 4
    """Batches read and looked up ahead of the one training."""
    max_staleness: int = 0
    """Pushes a batch's lookup may miss: its EmbeddingLookup waits until every batch more
    than this many before it has been pushed. 0 looks up each batch after the push of the one
    before, as a synchronous trainer (TorchRec) does, in that push's call (each ps answers the
    lookup once the gradients are applied: one round trip and one call per ps fewer);
    ``prefetch`` or more never waits. Each batch missed costs AUC early in training (seed_ctr,
    150 batches: train AUC 0.70 at 0 against 0.57-0.62 at 3) and lets the lookups overlap the
    dense model."""
    eval_every: int = 10
    """Hold out every this many-th batch of each hub for the in-stream evaluation (0: none)."""
    max_steps: int = 0
    """Stop after this many training batches (0: at the end of the data)."""
    eval_every_steps: int = 0
    """Score the evaluation data every this many training steps (0: only at the end)."""
    checkpoint_every: int = 0
    """Checkpoint the job every this many training steps, and at the end (0: only at the
    end). Needs ``checkpoint_dir`` (or ``resume``), and a job with one always checkpoints the
    end of its training."""
    progress: bool = True
    """Show progress on standard error: a bar on a terminal, else a line every
    ``stats_interval`` seconds (``sniper train --quiet``: none). The trainer itself draws
    nothing; ``sniper train`` reads :meth:`Trainer.live`."""
    blas_threads: int = 1
    """Threads for the dense model's BLAS (0: the library's default, one per core). The MLP is
    small, and OpenBLAS's idle threads spin: with its default of one thread per core, half of
    the trainer's CPU in a local 2-core cluster went to spinning, taken from the ps and hub
    processes (measured: trainer 9.6 s of CPU for 100 batches, 4.4 s with one thread). The
    limit is process-wide while :meth:`Trainer.run` runs (BLAS has no other scope), so two
    trainers in one process should use the same value."""

    wire_dtype: str = "float32"
    """How pooled embeddings and gradients travel between trainer and ps over gRPC:
    ``float32``, or ``bfloat16`` / ``float16`` in half the bytes (rounded; the AUC cost is
    measured by ``experiments/wire_dtype.toml``). The in-process transport passes arrays as
    they are, whatever this says."""
    auto_shard: bool = False
    """Move variables off the busiest ps while training (``sniper.roles._balance``)."""
    auto_shard_ratio: float = 1.5
    """Move when the busiest ps's kernel time exceeds the lightest's by more than this."""
    auto_shard_window: int = 20
    """Steps over which each variable's cost is measured; a move can follow each window."""
    auto_shard_max_moves: int = 1
    """Variables moved at most after one window."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_at_least(
            self,
            0,
            "blas_threads",
            "max_steps",
            "eval_every_steps",
            "checkpoint_every",
            "max_staleness",
        )
        check_at_least(self, 1, "auto_shard_window", "auto_shard_max_moves")
        check_wire_dtype(self.wire_dtype)
        if self.auto_shard_ratio < 1:
            raise ValueError(f"auto_shard_ratio must be at least 1, got {self.auto_shard_ratio}")
        check_at_least(self, 1, "prefetch")
        check_positive(self, "lr")
        if self.eval_every < 0 or self.eval_every == 1:
            raise ValueError(
                f"eval_every must be 0 (no evaluation) or at least 2, got {self.eval_every}"
            )
        if any(width < 1 for width in self.hidden):
            raise ValueError(f"hidden layer sizes must be at least 1, got {list(self.hidden)}")
