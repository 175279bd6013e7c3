"""``sniper train --rank R --master HOST:PORT``: trainer rank R (> 0) of a job's ranks.

Rank 0 is ``sniper train`` itself: it starts (or reaches) the ps and hubs, restores a
checkpoint, creates the variables, checkpoints, scores and reports. Another rank only trains:
it plans the job from the same config (the data's shape and the dense model), joins the ranks
at rank 0's rendezvous (``--master``), and hears from rank 0 where the ps and hubs are, the
placement, and the checkpoint's trainer state when the job resumes (so a rank needs no access
to the checkpoint directory). It then trains on its own hubs (hub ``h`` is rank
``h % num_trainers``'s) until every rank's data has ended (``sniper.roles._trainer``), and
exits 0. A failure is one ``sniper: error:`` line naming the rank, and exit 1; the rank's end
makes the other ranks' collectives fail, and rank 0 ends the job naming it (its data or its
model would fail it again on a restart). A rank killed or crashed (any other exit) is a
death: rank 0's supervisor restarts them all.

A rank started by the local launcher (``--exit-on-stdin-eof``) also exits when its standard
input ends: the ``sniper train`` that started it is gone (killed outright), and nothing would
stop it otherwise.

Ranks named by a cluster spec (``[[trainer]]``, ``sniper.cluster._hosts``) are started
elsewhere, each with ``sniper train --cluster-spec FILE --rank R``: rank 0 holds the
rendezvous at the first entry's ``host:port`` (:func:`named_rank_master`), the others join it
there (``--master`` is that address), and each rank's collective binds to the interface its
own entry says (``interface``, or the one holding its ``host``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
from typing import Any

import anyio

from sniper.cluster._config import TrainConfig
from sniper.cluster._hosts import RankHost
from sniper.cluster._plan import TrainPlan, plan_training
from sniper.cluster._servers import ps_cluster
from sniper.data import load_workload
from sniper.roles import RankMaster, Ranks, Trainer, TrainReport
from sniper.rpc import HubClient, Placement, Security
from sniper.runtime import log_to_stderr

__all__ = ["named_rank_master", "rank_config", "run_rank", "train_rank"]

log = logging.getLogger("sniper.trainer")


def named_rank_master(config: TrainConfig, rank0: RankHost) -> RankMaster:
    """Rank 0's rendezvous where a cluster spec's first ``[[trainer]]`` says, its collective
    on the interface holding that host: the ranks started elsewhere join it there."""
    master = RankMaster(
        rank0.host,
        config.num_trainers,
        config.collective_timeout,
        port=rank0.port,
        interface=rank0.collective_interface(),
    )
    print(
        f"trainer ranks 1-{config.num_trainers - 1} of {config.num_trainers} join this "
        f"process (rank 0) at {master.address}",
        flush=True,
    )
    return master


def run_rank(
    config: TrainConfig,
    rank: int,
    master: str,
    *,
    exit_with_stdin: bool = False,
    entry: RankHost | None = None,
) -> int:
    """Train as rank ``rank`` (see the module doc); the exit status. ``entry``: this rank's
    ``[[trainer]]`` in a cluster spec, which says where its collective binds."""
    if not 0 < rank < config.num_trainers:
        raise ValueError(
            f"--rank {rank}: a job of num_trainers = {config.num_trainers} has ranks 1 to "
            f"{config.num_trainers - 1} besides rank 0 (sniper train without --rank)"
        )
    interface = entry.collective_interface() if entry is not None else None
    log_to_stderr()
    for handler in logging.getLogger().handlers:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s %(name)s [rank {rank}]: %(message)s")
        )
    if exit_with_stdin:
        threading.Thread(target=_exit_at_end_of_stdin, daemon=True).start()
    report = train_rank(config, rank, master, interface)
    print(
        f"trainer rank {rank}: {report.steps} steps, this rank's figures in rank 0's report",
        flush=True,
    )
    return 0


def rank_config(config: TrainConfig) -> TrainConfig:
    """The job's config as a rank > 0 takes it: quiet, no metrics and no report of its own
    (rank 0 shows and reports the job's; the report's directory need not exist where the
    rank runs)."""
    return dataclasses.replace(config, progress=False, metrics_port=-1, output=os.devnull)


def train_rank(
    config: TrainConfig, rank: int, master: str, interface: str | None = None
) -> TrainReport:
    """Rank ``rank``'s part of the job, whatever started it (a process, a Ray actor): plan it
    from the config, join the ranks at ``master`` (the collective on ``interface``), hear
    from rank 0 where the servers are, and train; this rank's report. Blocking."""
    plan = plan_training(config, load_workload(config.workload), size_tables=False)
    ranks = Ranks(
        rank,
        config.num_trainers,
        master,
        config.collective_timeout,
        interface,
        sync=config.sync,
        sync_every=config.sync_every,
    )
    try:
        job: dict[str, Any] = ranks.broadcast(None)
        return anyio.run(_train, config, plan, ranks, job, backend="asyncio")
    finally:
        ranks.close()


async def _train(
    config: TrainConfig, plan: TrainPlan, ranks: Ranks, job: dict[str, Any]
) -> TrainReport:
    """Train on this rank's hubs against the job's ps, as rank 0 placed and resumed them."""
    ps = [(str(host), int(port)) for host, port in job["ps"]]
    hubs = [(str(host), int(port)) for host, port in job["hubs"]]
    cluster = ps_cluster(config, ps, Placement.from_dict(job["placement"]))
    security = Security.of(config)
    clients = [HubClient(host, port, security=security) for host, port in hubs]
    own = clients[ranks.rank :: ranks.size]
    try:
        trainer = Trainer(
            [(client.address, client) for client in own],
            cluster,
            plan.model_inputs.dims,
            plan.data.dense_features,
            config.trainer(),
            model=plan.model(),
            model_config=plan.model_config,
            labels=plan.model_inputs.labels,
            sequences=plan.model_inputs.sequences,
            ranks=ranks,
            num_hubs=len(hubs),
        )
        if job["trainer"] is not None:
            trainer.resume_from(job["trainer"])
        return await trainer.run()
    finally:
        for client in clients:
            client.close()
        cluster.close()


def _exit_at_end_of_stdin() -> None:
    """Exit once standard input ends: the process that started this rank is gone."""
    while sys.stdin.read(4096):
        pass
    log.warning("the sniper train that started this rank is gone; exiting")
    os._exit(1)
