"""What a training run reports: the figures ``sniper train`` prints and writes as JSON, and the
live view its progress line and metrics read while it runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from sniper._figures import json_ready
from sniper._metrics import LatencySummary
from sniper.roles._evaluate import EvalResult

__all__ = ["LiveProgress", "TrainReport"]


@dataclass
class TrainReport:
    """What ``sniper train`` prints and writes as JSON."""

    steps: int = 0
    """Training steps of the whole job, those before a resume included."""
    eval_batches: int = 0
    examples: int = 0
    seconds: float = 0.0
    examples_per_second: float = 0.0
    train_auc: float | None = None
    """The training AUC of the first binary label. None where it does not exist: the job has
    no binary label (its figures are the :attr:`per_label` RMSEs), no step was trained, or
    the batches trained held one class only. Every figure below is None where it does not
    exist, never 0.0 or NaN (the JSON's ``null``, ``-`` in print)."""
    train_logloss: float | None = None
    """The training logloss of the first binary label. With one label it is the model's own
    loss, the mean of its steps' batch means; beside other labels, that label's mean over
    every example (a checkpoint from before it was kept counts from the resume on)."""
    eval_auc: float | None = None
    """Held-out AUC over the second half of the run: the model as training ends. None
    without held-out batches (``eval_every = 0``, or too few batches)."""
    eval_logloss: float | None = None
    eval_auc_whole_run: float | None = None
    """Held-out AUC over every held-out batch, early untrained ones included."""
    eval_data_auc: float | None = None
    """AUC on the evaluation data (``eval_data``) at the end of training; None without it
    (or without a binary label)."""
    eval_data_logloss: float | None = None
    eval_data_examples: int = 0
    per_label: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each label's figures, by name. A binary label's: ``train_auc`` (and ``train_logloss``
    beside other labels), and once scored
    ``eval_auc``, ``eval_logloss``, ``eval_auc_whole_run``, ``eval_data_auc`` and
    ``eval_data_logloss``; a regression label's: ``train_rmse``, ``eval_rmse``,
    ``eval_rmse_whole_run`` and ``eval_data_rmse``. A figure that does not exist is left
    out. The figures above are the first binary label's (a multi-task job's are all here)."""
    eval_data_history: list[EvalResult] = field(default_factory=list)
    """Every scoring of the evaluation data, in order (every ``eval_every_steps`` steps)."""
    checkpoints: int = 0
    """Job checkpoints taken in this run (``checkpoint_every``)."""
    checkpoint_pause_seconds: list[float] = field(default_factory=list)
    """How long training stood still for each: draining the pipeline, then saving."""
    resumed_from_step: int = 0
    """The checkpoint's step this run resumed from (0: a fresh run)."""
    restarts: int = 0
    """Times ``sniper train`` restarted its processes after one died (``max_restarts``)."""
    lost_steps: int = 0
    """Training steps done after the last checkpoint before each restart, trained again."""
    preempted: bool = False
    """``sniper train`` was signalled (SIGTERM, SIGINT) and stopped early at the step of its
    latest checkpoint (saved on the signal, unless that step was saved already or none was
    trained): ``--resume`` continues the job from there."""
    losses: list[float] = field(default_factory=list)
    """The model's mean training loss over each 10-batch window, in order (to see it
    decrease): the logloss of one label, the mean of every label's loss for several."""
    ops: dict[str, LatencySummary] = field(default_factory=dict)
    """The trainer's view of each op: ReadSample, EmbeddingLookup, PushGrad, Dense (in
    microseconds, the seeds' unit: ``count``, ``p50_us``... in the JSON)."""
    ps_ops: list[dict[str, LatencySummary]] = field(default_factory=list)
    """Each ps's own timings of its calls (``EmbeddingLookup``) and their stages
    (``EmbeddingLookup.decode``, ``.dispatch``, ``.wait``, ``.kernel``, ``.encode``...), read
    at the end of training: with :attr:`ops`, where a step's time goes across the layers."""
    ps_cpu_seconds: list[float] = field(default_factory=list)
    """CPU seconds each ps process had used when training ended (its own count); empty with
    launcher ``inprocess``, where the ps are not processes of their own."""
    moves: list[dict[str, Any]] = field(default_factory=list)
    """Variables auto_shard moved: step, variable, from, to, cost (kernel seconds in the
    window that planned it) and seconds (the move's pause)."""
    placement_version: int = 0
    """The placement's version at the end (0: every variable on its hashed ps)."""
    ranks: list[dict[str, Any]] = field(default_factory=list)
    """Each trainer rank's figures (``num_trainers`` > 1): ``rank``, ``examples`` and
    ``seconds`` of this run, ``examples_per_second``, ``cores_busy``; :attr:`examples` and
    :attr:`examples_per_second` are their sums, and the other figures rank 0's (the
    evaluation data's AUC, scored on rank 0's copy of the one model). Empty with one rank."""
    cores_busy: float | None = None
    """Cores of the trainer's machine busy while this run trained, on average: the busy
    share of the machine's CPU time (every process's, the job's and any other's; steal, a
    neighbour VM's time on its cores, left out), times its cores. The window is this run's
    training loop, a resumed run's from its resume: the evaluation data scored and the
    checkpoints taken during training are in it, the last scoring and checkpoint after
    training are not. On a quiet machine it says whether the job is bound by CPU: with about
    every core busy, less CPU a batch is the only way to train faster, and the op with the
    largest p50 is only waiting its turn. None over a window under 0.1 s (the CPU time moves
    in 10 ms ticks), where ``/proc/stat`` cannot be read (not Linux) or where the machine's
    number of cores is unknown (``os.cpu_count()`` is None). With several ranks,
    rank 0's machine; each rank's is in :attr:`ranks`."""
    machine_cores: int | None = None
    """The cores of the machine :attr:`cores_busy` counts (the trainer's, which need not be
    the one that prints the report); None with it."""
    allreduce_bytes: int = 0
    """Bytes of dense gradients each rank all-reduces per step (0: one rank); the time of
    each step's all-reduce is ``ops["AllReduce"]``."""
    evicted: dict[str, list[int]] = field(default_factory=dict)
    """Each table that filled and took rows back for new ids in this run: ``[capacity,
    evictions]`` by variable, read from its ps at the end of training. An evicted id starts
    again from its initial value when it comes back: a table that evicts all the time has
    too few rows for its data (``capacity``)."""

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values: what ``sniper train`` writes (a figure that does
        not exist, NaN included, as None: strict JSON's ``null``)."""
        ready: dict[str, Any] = json_ready(asdict(self))
        return ready

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainReport:
        """The report :meth:`to_dict` wrote, back as itself; keys it does not know (what a
        report file adds around it) are left out, and keys it lacks keep their defaults."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        if "ops" in values:
            values["ops"] = _summaries(values["ops"])
        if "ps_ops" in values:
            values["ps_ops"] = [_summaries(ps) for ps in values["ps_ops"]]
        if "eval_data_history" in values:
            values["eval_data_history"] = [EvalResult(**r) for r in values["eval_data_history"]]
        return cls(**values)


@dataclass(frozen=True)
class LiveProgress:
    """Where a training run is now (:meth:`Trainer.live`): what the progress line and the
    Prometheus metrics show while it trains."""

    steps: int
    examples: int
    seconds: float
    """Since this run started (a resumed run counts from its resume)."""
    examples_per_second: float
    loss: float
    """Mean training logloss of the latest 10-batch window (of every step before the first)."""
    eval_auc: float
    """AUC of every held-out batch scored so far (0.0 before the first)."""
    max_steps: int
    """The run's step limit (0: until the data ends)."""


def _summaries(ops: Mapping[str, Mapping[str, Any]]) -> dict[str, LatencySummary]:
    return {op: LatencySummary(**summary) for op, summary in ops.items()}
