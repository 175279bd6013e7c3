"""``sniper train``: a cluster (N ps, M hubs, the trainer), trained end to end.

With no arguments it trains the embedded default. ``--config`` takes a TOML file of the same
keys as :class:`~sniper.cluster.TrainConfig` (see ``experiments/configs/``); ``--ps`` and
``--hub`` use servers started elsewhere instead of starting them.

Order of a run, the same for every launcher: read the data's shape (variables, dense features,
the first batch) and resolve the ``[variables]`` model spec against it, so that a config that
does not fit the data fails before any process starts (``sniper.cluster._plan``); the launcher
named by ``launcher`` starts the ps (``sniper.cluster._registry``); the job creates every
variable on its owner (the ``placement`` key: balanced by default, or ``ps_for_variable``),
starts the hubs, which begin feeding, and runs the trainer, scoring ``eval_data`` as it goes
(``sniper.cluster._job``), restarted from its latest checkpoint when a role dies
(``sniper.cluster._supervise``); print the report and write it as JSON
(``sniper.cluster._report``). Every role is stopped on every exit path (end of data, an
error, Ctrl-C, SIGTERM), so no server outlives the command. A SIGTERM or a first Ctrl-C while a
job with checkpoints trains saves it first, then writes the report (``preempted``) and exits
143 or 130 (``sniper.cluster._supervise``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sniper.cluster._abc import Launch
from sniper.cluster._checkpoint import load_job
from sniper.cluster._config import TrainConfig
from sniper.cluster._hosts import RankHost
from sniper.cluster._machine import check_machine
from sniper.cluster._plan import oracle_auc, plan_training
from sniper.cluster._registry import open_launcher
from sniper.cluster._report import print_report, write_report
from sniper.cluster._resume import (
    check_resume,
    nothing_left,
    on_other_data,
    with_checkpoint_features,
)
from sniper.cluster._supervise import Preempted, supervise
from sniper.data import load_workload
from sniper.roles import TrainingError, checkpoint_report, import_torch_distributed
from sniper.runtime import log_to_stderr

__all__ = ["run_train"]


def run_train(
    config: TrainConfig,
    ps: str | None = None,
    hubs: str | None = None,
    trainers: tuple[RankHost, ...] = (),
) -> int:
    """Run ``sniper train``; returns the exit status. ``ps`` and ``hubs``: ``host:port,...``
    of servers started elsewhere (``launcher = "auto"`` then means ``local``); ``trainers``:
    the ranks of a cluster spec, started elsewhere, of which this process is rank 0.

    A run that trains no batch fails (:class:`~sniper.roles.TrainingError`, after its report)
    rather than report success: its hubs had nothing to hand out."""
    log_to_stderr()
    if config.launcher == "auto":
        # Several trainer ranks are processes of their own, as named servers are reached.
        named = bool(ps or hubs) or config.num_trainers > 1
        config = dataclasses.replace(config, launcher="local" if named else "inprocess")
    if config.num_trainers > 1:
        import_torch_distributed()  # before any process: one line where torch is missing
    launcher = open_launcher(config.launcher)
    workload = load_workload(config.workload)
    resume = load_job(Path(config.resume).resolve()) if config.resume else None
    kept = resume.config.get("variables") if resume is not None else None
    # Before any process: a bad config starts nothing.
    plan = plan_training(config, workload, kept=kept, size_tables=resume is None)
    if resume is not None:
        plan = with_checkpoint_features(resume, plan)
    if plan.features:  # hubs read through the spec as measured (standardize's stats)
        config = dataclasses.replace(config, features=plan.features)
    config = config.with_num_ps(resume)
    check_machine(config, ps_named=bool(ps), hubs_named=bool(hubs))  # before any process
    if resume is not None:
        check_resume(resume, config, plan)  # before any process: a changed config starts none
        resume = on_other_data(resume, config)
        plan = plan.counted(kept)  # a table sized from the data may grow to other data's ids
    status = 0
    if resume is not None and nothing_left(resume, config, plan):
        print(
            f"nothing left to train: the checkpoint of step {resume.step} ({resume.directory}) "
            "ended the job; its report follows",
            flush=True,
        )
        report = checkpoint_report(resume.trainer, plan.data.labels, plan.data.regression)
        trained = None
    else:
        try:
            report = supervise(launcher, Launch(config, plan, resume, ps, hubs, trainers))
        except Preempted as preempted:
            report, status = preempted.report, preempted.status
        trained = report.steps - report.resumed_from_step
    # With hubs started elsewhere their data settings are theirs, so there is no oracle to quote.
    oracle = oracle_auc(config, workload) if not hubs else None
    print_report(report, oracle, config.eval_data)
    write_report(report, oracle, config)
    if trained == 0 and status == 0:
        raise TrainingError(f"trained 0 batches: {_why_none(hubs)}")
    return status


def _why_none(hubs: str | None) -> str:
    if hubs:
        return (
            f"the hubs ({hubs}) handed out none; a hub serves its data once, so one that "
            "served a job before has none left: restart it"
        )
    return (
        "the data holds no batch to train; give it more (num_batches, epochs) or hold out "
        "fewer (eval_every)"
    )
