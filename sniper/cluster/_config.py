"""``sniper train``'s configuration: :class:`TrainConfig`, one frozen dataclass of TOML keys.

A job's config is composed of the roles' own (the data source, the hub, ps and trainer
settings), each field declared and checked once; :func:`load_train_config` reads defaults, a
TOML file, then flags, and every error names its key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sniper._config import check_at_least, check_positive, fields_of, load_config
from sniper.cluster._checkpoint import JobCheckpoint
from sniper.cluster._outputs import check_output
from sniper.cluster._registry import launcher_names
from sniper.cluster._spec import ModelSpec, TableSpec
from sniper.data import DataSource, check_data_value
from sniper.models import ModelConfig
from sniper.roles import HubSettings, PsSettings, TrainerConfig

__all__ = [
    "RESUME_CHANGEABLE",
    "RESUME_FIXED",
    "TrainConfig",
    "check_resources",
    "load_train_config",
]

RESUME_FIXED = (
    "batch_size",
    "num_hubs",
    "num_trainers",
    "seed",
    "hidden",
    "model",
    "variables",
)
"""Keys a job checkpoint fixes for good: the hubs' batches and their positions in them, the
tables the ps hold (every variable's dim, optimizer and its params, initializer, sizes, and
the seed of their initial rows), the trainer ranks that read the hubs (each rank's place in
its hubs' order) and the dense model (its factory, params such as the MLP's
``hidden`` layers, and optimizer). A resume that changes one is refused; ``allow_change``
cannot name them."""

RESUME_CHANGEABLE = (
    "lr",
    "eval_every",
    "max_staleness",
    "data",
    "workload",
    "scale",
    "num_batches",
    "epochs",
)
"""Keys a job checkpoint records that a resume may change if ``allow_change`` names them: the
training goes on from the checkpoint, differently (another learning rate for the dense
model, other batches held out, the data moved or extended). Other keys (``max_steps``,
``checkpoint_every``, ``eval_every_steps``, ``prefetch``...) say how this run proceeds, not what
the checkpoint holds: a resume changes them freely."""


@dataclass(frozen=True)
class TrainConfig(DataSource, HubSettings, PsSettings, TrainerConfig):
    """One training run. Every field is a TOML key; the defaults are ``make demo``'s run.

    The data keys are :class:`~sniper.data.DataSource`'s, the hub keys
    :class:`~sniper.roles.HubSettings`', the ps keys
    :class:`~sniper.roles.PsSettings`' and the trainer's :class:`~sniper.roles.TrainerConfig`'s:
    each declared and checked once, and handed to the hub, ps and trainer as they are.
    """

    eval_data: str = ""
    """Held-out ``criteo:PATH`` or ``parquet:PATH`` scored at the end of training ("": none)."""
    num_ps: int = 0
    """How many ps hold the variables. 0 (the default): the resumed checkpoint's number, else
    1 for a job in one process (``launcher = "inprocess"``) and 2 for ps of their own. In one
    process the ps share one event loop and one scheduler, so a second ps adds a call to each
    fan-out and no parallelism (criteo ran 8-15% faster on one; docs/benchmarks.md); set
    ``num_ps = 2`` to split the variables there as they would be across machines."""
    num_hubs: int = 0
    """Hubs that split the data between them. 0 (the default): one per trainer rank
    (``num_trainers``), since each rank reads hubs of its own (hub ``h`` is rank
    ``h % num_trainers``'s); a number given must be at least ``num_trainers``. More hubs
    read more of the data at once: a user's table read through ``[features]`` wants two
    (docs/benchmarks.md)."""
    variables: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """The model spec: ``[variables.default]`` and ``[variables.NAME]`` tables of
    :class:`~sniper.cluster.TableSpec` keys (dim, capacity, shards, optimizer, params,
    initializer, init, min_count, eviction). The variables themselves come from the data."""
    output: str = "train_report.json"
    checkpoint_dir: str = ""
    """Checkpoint the job here at the end of training, and every ``checkpoint_every`` steps
    before it ("": no checkpoints)."""
    keep_checkpoints: int = 3
    """Complete checkpoints kept; older ones are removed."""
    rpc_timeout: float = 30.0
    """Seconds a call to a ps may go unanswered before it fails as DEADLINE_EXCEEDED naming
    the ps (each try of a retried call gets this long)."""
    max_restarts: int = 3
    """When a ps or hub this command started dies, restart every process and resume from the
    latest checkpoint, at most this many times (needs ``checkpoint_dir``). One that stops
    answering (a call of rank 0's to it past its deadline, it still running: ``rpc_timeout``
    for a ps, 10 minutes for a hub) is killed: a death too."""
    preempt_grace: float = 30.0
    """Seconds a SIGTERM or a first Ctrl-C gives the job to save a checkpoint at the step it
    reached before it exits (143, 130): the batches already read are trained, the job is
    saved, and its report says ``preempted``. Past it, or on a second signal, the job stops at
    once without that checkpoint (the latest complete one stays). Keep it under the time the
    machine's preemption notice leaves (a Kubernetes pod's terminationGracePeriodSeconds,
    30 s by default). 0: stop at once. Needs ``checkpoint_dir`` (or ``resume``)."""
    resume: str = ""
    """Continue from this job checkpoint: a ``checkpoint_dir`` (its newest step that verifies:
    a damaged one is skipped with a warning) or one of its ``step-N`` directories (that step
    or an error); checkpoints then go on in that directory (a ``checkpoint_dir`` given too must
    be that directory)."""
    allow_change: tuple[str, ...] = ()
    """Keys a resume may change from the checkpoint's config (``lr``, ``eval_every``,
    ``max_staleness``, and the data's keys ``data``, ``epochs``, ``num_batches``...); a change
    of any other key the checkpoint records (``batch_size``, ``variables``, ``hidden`` and
    the rest of ``[model]``, ``seed``, ``num_hubs``) is refused before any process starts."""
    placement: Literal["balanced", "hash"] = "balanced"
    """Which ps holds each variable when a job starts afresh: ``balanced`` spreads the
    variables' signs per batch (then their rows) evenly over the ps
    (:meth:`~sniper.rpc.Placement.balanced`); ``hash`` puts each on
    ``ps_for_variable(name, num_ps)``, as the seed system did, which evens out their number
    but not their work (on seed_ctr one of 2 ps gets 74% of the signs). Balancing signs can
    leave one ps more rows than hashing would (seed_ctr: 66% against 57% of 2 ps' rows): a ps
    near its ``max_table_gb`` may need ``hash``. A resumed job keeps its checkpoint's placement
    either way; one resumed on another number of ps regroups its variables by hash (then
    auto_shard may move them). auto_shard moves variables from either start."""
    num_trainers: int = 1
    """Trainer processes (ranks) that train the job's one dense model: each reads its own
    hubs (hub ``h`` is rank ``h % num_trainers``'s; ``num_hubs`` is one per rank unless given)
    and looks up and pushes its own batches on the shared ps, and every step the ranks
    average the model's gradients with an all-reduce (``torch.distributed``: gloo on the
    CPU, NCCL for a model on GPUs; needs ``sniper[torch]``). Rank 0 is this process: it
    checkpoints (every rank pauses at the same step), scores ``eval_data`` and writes the
    report; ``launcher = "local"`` starts the others (``sniper train --rank R``) and restarts
    them all from the latest checkpoint when one dies (one that fails on its own data or model
    ends the job, naming it), ``launcher = "ray"`` starts them as
    actors (``[resources.trainer]``), and a cluster spec's ``[[trainer]]`` entries name ranks
    started elsewhere."""
    collective_timeout: float = 300.0
    """Seconds a rank waits in a collective (the step's all-reduce, a checkpoint's barrier,
    the ranks' start) before it fails the attempt: a rank that hangs becomes a restart
    instead of a hang (one that dies fails the others' collective at once). Rank 0 scores
    ``eval_data`` while the others wait in the next step's all-reduce: keep this above that."""
    sync: Literal["allreduce", "local_sgd"] = "allreduce"
    """How the ranks keep one dense model: ``allreduce`` averages the gradients every step
    (every rank applies the same update); ``local_sgd`` lets each rank apply its own updates
    and averages the model's state (its parameters and its optimizer's moments) every
    ``sync_every`` steps, for links too slow for a collective per step, at some cost in AUC
    (docs/benchmarks.md). Between averages the ranks' models differ: rank 0's is the one
    scored and checkpointed, so ``checkpoint_every`` must be a multiple of ``sync_every``."""
    sync_every: int = 8
    """Steps between ``local_sgd``'s averages (``allreduce`` averages every step)."""
    launcher: str = "auto"
    """Where the ps and hubs run: actors of this process passing arrays without encoding them
    (``inprocess``: ``sniper.cluster._inprocess``), processes on this machine or servers named
    by ``--ps``/``--hub``/``--cluster-spec``, over gRPC (``local``: ``sniper.cluster._local``),
    Ray actors placed on a Ray cluster (``ray``: ``sniper[ray]``, ``sniper.cluster._ray``), or
    a launcher plugin's name (the ``sniper.launchers`` entry points). ``auto`` (the default):
    ``local`` when servers are named, else ``inprocess``: a job on one machine does not pay
    for a network it does not cross. ``local`` isolates each role in a process of its own,
    and restarts them from the last checkpoint when one dies (``max_restarts``)."""
    ray_address: str = ""
    """The Ray cluster to use ("": start a local Ray; "auto": the one this machine is in)."""
    ray_strategy: Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"] = "SPREAD"
    """How the ps (and, apart, the hubs) are placed on Ray's nodes."""
    resources: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    """What each ps, hub and trainer rank asks of Ray: ``[resources.ps] num_cpus = 2``
    (default 0.5 for a ps or a rank, 0.25 for a hub), ``memory`` (bytes), ``num_gpus``, or a
    custom resource such as a node label (``ps_node = 1``). ``[resources.trainer]`` is what
    each rank but rank 0 asks (rank 0 is ``sniper train`` itself, wherever it runs)."""

    # The dense model: the [model] table (sniper.models.ModelConfig), resolved with the
    # top-level hidden and lr of the numpy MLP by model_config().
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The dense model: ``[model]`` keys ``factory`` (default ``"mlp"``, the numpy MLP; a
    registered name such as ``"dlrm"``, or ``"mypkg.models:build"``), ``params`` (the
    factory's keywords), ``optimizer``, ``lr`` and ``device`` (:class:`~sniper.models.ModelConfig`).
    The top-level ``hidden`` and ``lr`` keep working for the numpy MLP: ``hidden`` is its
    ``params.hidden`` and ``lr`` is ``[model] lr`` for any model; given both ways with
    different values, the config is refused."""

    def with_num_ps(self, resume: JobCheckpoint | None) -> TrainConfig:
        """This config with ``num_ps = 0`` replaced by the number it stands for (see
        :attr:`num_ps`), for its launcher ("auto" counts as ps of their own)."""
        if self.num_ps:
            return self
        if resume is not None:
            return dataclasses.replace(self, num_ps=resume.num_ps)
        return dataclasses.replace(self, num_ps=1 if self.launcher == "inprocess" else 2)

    def __post_init__(self) -> None:
        # Before HubSettings checks the number. Resolved here, once, rather than where the
        # hubs start: every launcher, rank and checkpoint then reads one number, and a resume
        # that leaves it out too gets what the checkpointed run did (num_trainers is fixed).
        if not self.num_hubs:
            object.__setattr__(self, "num_hubs", max(self.num_trainers, 1))
        super().__post_init__()
        check_at_least(self, 1, "keep_checkpoints")
        check_at_least(self, 0, "num_ps", "max_restarts", "preempt_grace")
        check_at_least(self, 1, "num_trainers")
        check_at_least(self, 1, "sync_every")
        check_positive(self, "rpc_timeout", "collective_timeout")
        self._check_ranks()
        if self.checkpoint_every and not self.job_directory():
            raise ValueError("checkpoint_every needs checkpoint_dir (or resume)")
        # A config that checkpoints into ck is resumed with --resume ck (or a step of it):
        # the same directory twice is the same job; another one is refused.
        resumed = _checkpoints_of(self.resume) if self.resume else None
        if resumed and self.checkpoint_dir and resumed != Path(self.checkpoint_dir).resolve():
            raise ValueError(
                f"resume {self.resume} is not in checkpoint_dir {self.checkpoint_dir}: a "
                "resumed job checkpoints where it resumed from, so give one of them, or the "
                "same directory to both"
            )
        if self.eval_data:
            check_data_value("eval_data", self.eval_data, synthetic=False)
        elif self.eval_every_steps:
            raise ValueError("eval_every_steps needs eval_data (criteo:PATH or parquet:PATH)")
        if self.placement not in ("balanced", "hash"):
            raise ValueError(f"placement must be 'balanced' or 'hash', got {self.placement!r}")
        if self.launcher not in (names := ("auto", *launcher_names())):
            choices = ", ".join(map(repr, names))
            raise ValueError(f"launcher must be one of {choices}, got {self.launcher!r}")
        if self.ray_strategy not in ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"):
            raise ValueError(
                "ray_strategy must be SPREAD, PACK, STRICT_SPREAD or STRICT_PACK, "
                f"got {self.ray_strategy!r}"
            )
        check_resources(self.resources)
        for key in self.allow_change:
            # A [variables] key (dim, optimizer...) is named too: it is what a user asks for.
            if key in RESUME_FIXED or key in (f.name for f in dataclasses.fields(TableSpec)):
                raise ValueError(
                    f"allow_change: {key} cannot change on resume (the checkpoint's tables, "
                    f"batches or model depend on it); keys a resume may change: "
                    f"{', '.join(RESUME_CHANGEABLE)}"
                )
            if key not in (f.name for f in dataclasses.fields(self)):
                raise ValueError(f"allow_change: {key!r} is not a config key")
        self.model_spec()  # every [variables] key, named when wrong
        self.model_config()  # every [model] key, named when wrong
        self._check_paths()

    def _check_paths(self) -> None:
        """Refuse, before anything trains, an output or checkpoint_dir that cannot be written
        where the job ends (a directory named as the report, a file named as the checkpoint
        directory), and a report onto or among the data it was trained on."""
        if self.output:  # "": none (an experiment's points are checked before each has one)
            named, data = f"output {self.output!r}", (self.data, self.eval_data)
            check_output(Path(self.output), named, "JSON", data, "the job", "the report")
        if self.checkpoint_dir:
            directory = Path(self.checkpoint_dir).resolve()
            existing = next(p for p in (directory, *directory.parents) if p.exists())
            if not existing.is_dir():
                raise ValueError(
                    f"checkpoint_dir {self.checkpoint_dir!r}: {existing} is a file, not a directory"
                )

    def _check_ranks(self) -> None:
        """What several trainer ranks need: hubs to read, and a launcher that starts them."""
        if self.sync not in ("allreduce", "local_sgd"):
            raise ValueError(f"sync must be 'allreduce' or 'local_sgd', got {self.sync!r}")
        ranks = self.num_trainers
        if ranks == 1:
            return
        if self.num_hubs < ranks:
            raise ValueError(
                f"num_hubs = {self.num_hubs} is fewer than num_trainers = {ranks}: each rank "
                f"reads hubs of its own (hub h is rank h % {ranks}'s); give at least {ranks} "
                "hubs, or leave num_hubs out for one per rank"
            )
        if self.launcher not in ("auto", "local", "ray"):
            raise ValueError(
                f"num_trainers = {ranks} needs launcher = 'local' or 'ray' (or 'auto'): the "
                f"{self.launcher!r} launcher starts one trainer"
            )
        if self.auto_shard:
            raise ValueError(
                f"auto_shard with num_trainers = {ranks} is not supported: a move pauses one "
                "trainer, and the other ranks would push through it; use num_trainers = 1"
            )
        if self.sync == "local_sgd" and self.checkpoint_every % self.sync_every:
            raise ValueError(
                f"checkpoint_every = {self.checkpoint_every} must be a multiple of sync_every "
                f"= {self.sync_every} with sync = 'local_sgd': a checkpoint holds rank 0's "
                "model, which is the ranks' only right after an average"
            )

    def job_directory(self) -> Path | None:
        """Where this job's checkpoints go (the ps's checkpoint_root), if anywhere."""
        if self.checkpoint_dir:
            return Path(self.checkpoint_dir).resolve()
        if self.resume:
            return _checkpoints_of(self.resume)
        return None

    def trainer(self) -> TrainerConfig:
        """The trainer's part of this config."""
        return TrainerConfig(**fields_of(self, TrainerConfig))

    def model_spec(self, default_dim: int = 16) -> ModelSpec:
        """``[variables]`` parsed; ``default_dim`` is the width it does not set."""
        return ModelSpec.parse(self.variables, default_dim=default_dim)

    def model_config(self) -> ModelConfig:
        """``[model]`` with the numpy MLP's top-level ``hidden`` and ``lr`` folded in.

        ``hidden`` is the MLP's: with ``factory = "mlp"`` it is ``params.hidden`` unless that
        is given; with another model a ``hidden`` other than the default is refused (it would
        not apply). ``lr`` other than the default is ``[model] lr`` for any model. Given both
        ways, different values are refused, naming both."""
        model = ModelConfig.from_table(self.model)
        defaults = {f.name: f.default for f in dataclasses.fields(TrainerConfig)}
        params = dict(model.params)
        hidden = list(self.hidden)
        if self.hidden != defaults["hidden"]:
            if model.factory != "mlp":
                raise ValueError(
                    f"hidden = {hidden} is the numpy mlp's layers; with [model] factory = "
                    f"{model.factory!r} give the layers in [model] params"
                )
            if "hidden" in params and list(params["hidden"]) != hidden:
                raise ValueError(
                    f"hidden = {hidden} and [model] params.hidden = {list(params['hidden'])} "
                    "disagree; keep one"
                )
        if model.factory == "mlp":
            params.setdefault("hidden", hidden)
        lr = model.lr
        if self.lr != defaults["lr"]:
            if model.lr and model.lr != self.lr:
                raise ValueError(f"lr = {self.lr} and [model] lr = {model.lr} disagree; keep one")
            lr = self.lr
        return dataclasses.replace(model, params=params, lr=lr)


def load_train_config(path: Path | None, overrides: dict[str, Any]) -> TrainConfig:
    """Defaults, then the TOML file, then non-None overrides; errors name the key."""
    return load_config(TrainConfig, path, overrides)


def check_resources(resources: Mapping[str, Mapping[str, float]]) -> None:
    """``[resources.ps]``, ``[resources.hub]`` and ``[resources.trainer]``: numbers only."""
    for role, request in resources.items():
        if role not in ("ps", "hub", "trainer"):
            raise ValueError(
                f"resources.{role}: only [resources.ps], [resources.hub] and "
                "[resources.trainer] exist"
            )
        for key, amount in request.items():
            if not isinstance(amount, int | float) or isinstance(amount, bool) or amount < 0:
                raise ValueError(f"resources.{role}.{key} must be a number >= 0, got {amount!r}")


def _checkpoints_of(resume: str) -> Path:
    """The checkpoint directory ``resume`` names: itself, or the one its ``step-N`` is in."""
    path = Path(resume).resolve()
    return path.parent if path.name.startswith("step-") else path
