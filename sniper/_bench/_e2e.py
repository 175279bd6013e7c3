"""``sniper bench e2e``: training throughput of the local cluster against one torch process.

sniper: ``sniper train`` as a user runs it, with its default number of ps, 1 hub and the
trainer, twice: all in one process passing arrays without gRPC (the default job on one
machine, with 1 ps), and as separate processes on loopback gRPC (2 ps); ``--launcher
inprocess`` or ``local`` runs one of them. Throughput is the trainer's own examples/s, which
leaves out process start-up; the per-op latencies come from its JSON report.

Peer (``--peer torch``, the default): what a user would pick instead. The same model (an
``EmbeddingBag(mode="sum", sparse=True)`` per variable, then the same MLP) is trained in one
process with ``torch.optim.Adagrad`` on the embeddings and Adam on the dense layers, on the
same synthetic batches, holding out the same batches as sniper's trainer. Signs map to rows
by the hashing trick (``sign % rows``, rows = the variable's vocabulary, at most 2**20).
``--peer torchrec``: the same with TorchRec's ``FusedEmbeddingBagCollection``
(``sniper._bench._torchrec_peer``). ``--model dlrm --peer torchrec``: sniper's zoo DLRM against
TorchRec's DLRM, the same model on both sides, with their held-out AUCs at the same step
(``sniper._bench._dlrm_peer``).

Kernel-bound limit: after each of sniper's runs, the same job's store kernels and dense model
run on its batches with nothing around them (:mod:`sniper._bench._limit`); the table gives
that limit in ms per trained batch beside the run's own, and their ratio, the job's efficiency.
Beside it, the cores of the machine busy while the job trained (its report's ``cores_busy``):
with about all of them busy, the job is bound by CPU, and only less CPU a batch makes it
faster; with cores to spare, it waits on a chain of steps, and overlap can.

The host. Beside each run, the share of the machine's CPU time the host took during it (steal,
:mod:`sniper._bench._host`): on a virtual machine a slow spell of the host moves a ratio more
than most changes do. With ``--rounds``, the rounds alternate which side runs first (sniper's
jobs, then the peer; the peer, then sniper's jobs), so a host that grows slower or faster over
a series does not favour one side in every round.

Data: both train on the same synthetic batches, made before either clock starts. The peer gets
them as tensors already mapped to rows; sniper's hub reads them from a Parquet file written
from the same generator (``sniper data convert synthetic`` does the same), as a production hub
reads its input, so the hub decodes files during the run while the peer's input costs nothing.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from sniper._bench._dlrm_peer import PEER as DLRM_PEER
from sniper._bench._dlrm_peer import (
    DlrmPeerRun,
    dlrm_target,
    model_table,
    print_auc_comparison,
    run_torchrec_dlrm,
)
from sniper._bench._host import describe_steal, steal_during
from sniper._bench._limit import KernelLimit, measure_limit
from sniper._bench._report import PeerMissing, verdict
from sniper._bench._torch_peer import import_torch
from sniper._bench._torchrec_peer import MAX_ROWS, run_torchrec, table_rows, torchrec_python
from sniper._figures import shown as figure
from sniper._table import print_table
from sniper.cluster import describe_cores_busy, read_report
from sniper.data import SyntheticCtr, Workload, write_parquet
from sniper.placement import auto_capacity
from sniper.roles import TrainerConfig, TrainReport

LAUNCHERS = {"local": "2 ps processes on loopback gRPC", "inprocess": "1 ps in one process"}
PEERS = {"torch": "torch, one process", "torchrec": "TorchRec fused, one process"}
HIDDEN = 64
EVAL_EVERY = TrainerConfig().eval_every


def write_job(
    directory: Path,
    workload: Workload,
    data: SyntheticCtr,
    seed: int,
    launcher: str,
    settings: Mapping[str, object],
) -> tuple[Path, Path]:
    """Write ``data`` as Parquet under ``directory`` and the ``sniper train`` config that trains
    on it (with ``settings``, more of its keys): the config's path and where the run's JSON
    report will be. ``sniper bench profile`` runs the same job.

    Its tables are sized from the generator's vocabulary, as ``data = "synthetic"`` sizes
    them, and the peer's rows are (:func:`~sniper._bench._torchrec_peer.peer_rows`): ``sniper
    train`` would size a file's from the ids counted in it, fewer rows than the peer's."""
    path = directory / "data.parquet"
    write_parquet(data, path)
    config = directory / "e2e.toml"
    output = directory / "report.json"
    keys: dict[str, object] = {
        "workload": workload.name,
        "data": f"parquet:{path}",
        "num_batches": data.num_batches,
        "seed": seed,
        "output": str(output),
        "launcher": launcher,
        "variables": {
            name: {"capacity": auto_capacity(rows)} for name, rows in data.vocabulary.items()
        },
    }
    config.write_text(tomli_w.dumps(keys | dict(settings)))
    return config, output


def job_settings(
    launcher: str, wire_dtype: str = "float32", model: str = "mlp", workers: int | None = None
) -> dict[str, object]:
    """The keys the bench adds to the job's config: its progress interval, ``wire_dtype``
    where the roles talk gRPC (the in-process job passes arrays; it would warn and ignore it),
    the dense model when it is not the numpy MLP (``[model] factory``), and ``workers``, each
    ps's worker threads, where given (None: the job's default, the machine's cores shared
    among its ps)."""
    settings: dict[str, object] = {"stats_interval": PROGRESS_SECONDS}
    if workers is not None:
        settings["workers"] = workers
    if model != "mlp":
        settings["model"] = model_table(model)
    if sent := _on_the_wire(launcher, wire_dtype):
        settings["wire_dtype"] = sent
    return settings


def _sniper(
    workload: Workload,
    data: SyntheticCtr,
    seed: int,
    launcher: str = "local",
    wire_dtype: str = "float32",
    model: str = "mlp",
    limit: bool = False,
    workers: int | None = None,
) -> _Run:
    """``sniper train``'s report, with the whole command's seconds, start-up in; with
    ``limit``, then the job's kernel-bound limit (:mod:`sniper._bench._limit`), measured once
    the job has stopped, on its own config and batches."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = job_settings(launcher, wire_dtype, model, workers)
        config, output = write_job(Path(tmp), workload, data, seed, launcher, settings)
        started = time.perf_counter()
        command = [sys.executable, "-m", "sniper", "train", "--config", str(config)]
        last, steal = steal_during(lambda: _run_showing_progress(command, launcher))
        if last is not None:
            raise RuntimeError(f"sniper train failed: {last}")
        wall = time.perf_counter() - started
        kernels = measure_limit(config, workload, data) if limit else None
        return _Run(read_report(output).report, wall, kernels, steal)


@dataclass(frozen=True)
class _Run:
    """One measured ``sniper train``."""

    report: TrainReport
    wall_seconds: float
    """The whole command's seconds, its start-up and stop included."""
    limit: KernelLimit | None = None
    """The job's kernel-bound limit, where measured."""
    steal: float | None = None
    """The share of the machine's CPU its host took during the command, where known."""

    @property
    def seconds_per_batch(self) -> float:
        """The trainer's seconds per trained batch (what its examples/s counts)."""
        return self.report.seconds / self.report.steps if self.report.steps else 0.0

    @property
    def efficiency(self) -> float | None:
        """The kernel-bound limit over the actual seconds per batch, where both are known."""
        if self.limit is None or not self.seconds_per_batch:
            return None
        return self.limit.efficiency(self.seconds_per_batch)


WARM_UP_BATCHES = 12
"""Batches of the unmeasured job the bench runs first (other data, the same shape)."""


def _warm_up(
    workload: Workload,
    scale: float,
    seed: int,
    launcher: str,
    wire_dtype: str,
    model: str = "mlp",
    workers: int | None = None,
) -> _Run:
    """Run the job once, unmeasured, on a few batches of the same shape.

    Why: the store's kernels compile on their first call and are kept in numba's on-disk
    cache, which is empty after an install or a change to the kernels' source. A measured
    run that compiles them does so inside the trainer's clock: on ``criteo`` that run gave
    12.1k examples/s where warm runs gave 59.7-107.5k. The peers compile nothing at run time.
    The same workload and scale take the same paths (shards, inline or worker requests).
    The caller warms up the processes job where one is measured: it calls the store's
    kernels and also a 16-bit wire's, which the one-process job has none of. Returns the
    warm-up's report.
    """
    print(f"warm-up: {WARM_UP_BATCHES} batches, unmeasured (fills numba's cache)", flush=True)
    data = SyntheticCtr(workload, num_batches=WARM_UP_BATCHES, scale=scale, seed=seed + 1)
    return _sniper(workload, data, seed + 1, launcher, wire_dtype, model, workers=workers)


PROGRESS_SECONDS = 5
"""How often the bench shows the training run's progress line (``sniper train``'s own)."""


def _run_showing_progress(command: list[str], label: str) -> str | None:
    """Run ``sniper train``, passing its progress lines (``step ...``) to this stderr as they
    come, the same display a user sees in a log; None, or its last line when it fails."""
    last = ""
    with subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stderr is not None
        for line in process.stderr:
            if line.startswith("step "):
                print(f"  sniper ({label}): {line.rstrip()}", file=sys.stderr, flush=True)
            if line.strip():
                last = line.strip()
    return None if process.returncode == 0 else last


def _torch(workload: Workload, data: SyntheticCtr, threads: int) -> tuple[float, int]:
    torch = import_torch()
    torch.set_num_threads(threads)
    names = [v.name for v in workload.variables]
    rows = {n: table_rows(data, n, MAX_ROWS) for n in names}
    bags = torch.nn.ModuleList(
        [
            torch.nn.EmbeddingBag(rows[n], workload.embedding_dim, mode="sum", sparse=True)
            for n in names
        ]
    )
    for bag in bags:
        torch.nn.init.normal_(bag.weight, std=0.01)
    width = len(names) * workload.embedding_dim + workload.dense_features
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1)
    )
    sparse_opt = torch.optim.Adagrad(bags.parameters(), lr=0.05)
    dense_opt = torch.optim.Adam(mlp.parameters(), lr=0.002)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    prepared = []
    for batch in data.batches():
        inputs = [
            (
                torch.from_numpy((signs % np.uint64(rows[n])).astype(np.int64)),
                torch.from_numpy(offsets[:-1].astype(np.int64)),
            )
            for n, (signs, offsets) in ((n, batch.sparse[n]) for n in names)
        ]
        prepared.append((inputs, torch.from_numpy(batch.dense), torch.from_numpy(batch.labels)))

    def forward(inputs: Any, dense: Any) -> Any:
        pooled = [bag(ids, offs) for bag, (ids, offs) in zip(bags, inputs, strict=True)]
        return mlp(torch.cat([*pooled, dense], dim=1))[:, 0]

    # The same protocol as sniper's trainer: every EVAL_EVERY-th batch is held out (forward
    # only), and examples/s counts the trained examples over the whole run.
    trained = 0
    start = time.perf_counter()
    for index, (inputs, dense, labels) in enumerate(prepared):
        if index % EVAL_EVERY == EVAL_EVERY - 1:
            with torch.no_grad():
                forward(inputs, dense)
            continue
        loss = loss_fn(forward(inputs, dense), labels)
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        trained += 1
    seconds = time.perf_counter() - start
    return trained * workload.batch_size / seconds, trained


def target(
    peer: str, launcher: str, workload: Workload, scale: float, model: str = "mlp"
) -> float | None:
    """The ratio this row must reach, or None where none is set.

    Against TorchRec (issue 44): 2.0x at the full shape and 1.5x at scale 0.02 for the job
    ``sniper train`` runs by default on one machine (in one process), 1.5x at the full shape
    over gRPC between processes. Against torch (issue 15): 2.5x at the full shape, 1.5x at
    0.02 and on ``criteo``. The same DLRM against TorchRec's:
    :func:`~sniper._bench._dlrm_peer.dlrm_target`.
    """
    if peer == "torchrec" and model == "dlrm":
        return dlrm_target(launcher)
    full, small = scale >= 1.0, scale <= 0.02
    if peer == "torchrec":
        if launcher == "inprocess":
            return 2.0 if full else 1.5 if small else None
        return 1.5 if full else None
    if launcher != "inprocess":
        return None
    if workload.name == "criteo" or small:
        return 1.5
    return 2.5 if full else None


def _on_the_wire(launcher: str, wire_dtype: str) -> str | None:
    """The wire dtype a run of ``launcher`` sets, or None: float32 is the job's default, and
    the one-process job has no wire."""
    return wire_dtype if launcher != "inprocess" and wire_dtype != "float32" else None


def _workers_note(workers: int | None) -> str:
    """The header's words for each ps's worker threads."""
    if workers is None:
        return " on the machine's cores"
    return f" with {workers} worker thread{'s' if workers > 1 else ''} per ps"


def _wire_note(launcher: str, wire_dtype: str) -> str:
    """What a run's label says about its wire dtype (nothing where it sets none)."""
    sent = _on_the_wire(launcher, wire_dtype)
    return f", {sent} on the wire" if sent else ""


EFFICIENCY_TARGET = {"inprocess": 0.7, "local": 0.5}
"""Issue 44's efficiency (kernel-bound limit over actual time per batch) for each launcher."""


def _efficiency_cells(run: _Run, launcher: str) -> list[str]:
    """A row's ms per batch, kernel-bound limit in ms per batch, and efficiency with its
    verdict; ``-`` where the limit was not measured."""
    actual = f"{run.seconds_per_batch * 1e3:.2f}" if run.seconds_per_batch else "-"
    efficiency = run.efficiency
    if run.limit is None or efficiency is None:
        return [actual, "-", "-"]
    wanted = EFFICIENCY_TARGET.get(launcher)
    judged = f" (>= {wanted:g}: {verdict(efficiency, wanted)})" if wanted is not None else ""
    return [actual, f"{run.limit.seconds_per_batch * 1e3:.2f}", f"{efficiency:.2f}{judged}"]


def _print_limits(runs: Mapping[str, _Run]) -> None:
    """What each row's kernel-bound limit is made of."""
    measured = [(name, run.limit) for name, run in runs.items() if run.limit is not None]
    if not measured:
        return
    print(
        "\nkernel-bound limit (the job's store kernels and dense model on its batches with "
        "nothing around them; efficiency = limit / ms per batch):"
    )
    for name, limit in measured:
        print(f"  {LAUNCHERS[name]}: {limit.describe()}")


def _verdict(ratio: float, wanted: float | None) -> str:
    if wanted is None:
        return "-"
    return f">= {wanted:g}x: {verdict(ratio, wanted)}"


def run_launchers(
    workload: Workload,
    *,
    scale: float,
    batches: int,
    seed: int,
    wire_dtype: str = "float32",
    workers: int | None = None,
) -> None:
    """The same job with its ps and hubs as Ray actors and as local processes: start-up (the
    command's wall time less the training time) and examples/s, and their ratios."""
    print(
        f"sniper bench e2e --launcher ray: {workload.name} at scale {scale} ({batches} batches"
        f" of {workload.batch_size}{_wire_note('ray', wire_dtype)}); "
        "peer = the same job with local processes"
    )
    data = SyntheticCtr(workload, num_batches=batches, scale=scale, seed=seed)
    local = _sniper(workload, data, seed, "local", wire_dtype, workers=workers)
    ray = _sniper(workload, data, seed, "ray", wire_dtype, workers=workers)
    rows = []
    for name, run in (("Ray actors (a new local Ray)", ray), ("local processes", local)):
        rate = run.report.examples_per_second
        rows.append(
            [
                name,
                f"{run.wall_seconds - run.report.seconds:.1f}",
                f"{rate:,.0f}",
                f"{rate / local.report.examples_per_second:.2f}x",
            ]
        )
    print()
    print_table(["launcher", "start-up + stop s", "examples/s", "ratio"], rows)


ROUNDS_MET = 0.8
"""The share of a series' rounds a target must be met in: issue 44's four of five."""


@dataclass(frozen=True)
class _PeerRun:
    """The peer's run in a round."""

    rate: float
    """Its examples/s (0 where it could not run)."""
    batches: int
    missing: PeerMissing | None = None
    """Why the torch peer could not run, where it could not."""
    dlrm: DlrmPeerRun | None = None
    """TorchRec's DLRM run, for ``--model dlrm --peer torchrec``."""
    steal: float | None = None
    """The share of the machine's CPU its host took during the run, where known."""


@dataclass(frozen=True)
class _Round:
    """One round: each of sniper's runs and the peer's, on the same batches."""

    runs: dict[str, _Run]
    peer: _PeerRun

    def ratio(self, launcher: str) -> float | None:
        """sniper's examples/s over the peer's, for one of the round's launchers."""
        if not self.peer.rate:
            return None
        return self.runs[launcher].report.examples_per_second / self.peer.rate


def run(
    workload: Workload,
    *,
    scale: float,
    batches: int,
    seed: int,
    threads: int,
    launcher: str = "auto",
    peer: str = "torch",
    wire_dtype: str = "float32",
    model: str = "mlp",
    rounds: int = 1,
    workers: int | None = None,
) -> None:
    """Train both ways on the same data; print examples/s, the ratio and sniper's per-op time
    (``launcher="ray"``: Ray placement against local processes instead). ``wire_dtype``: how
    pooled embeddings and gradients travel where the roles talk gRPC. Without torch, the
    torch peer's row is left out with a note and sniper's rows stand alone (TorchRec, named
    on purpose, is required).

    ``rounds``: measure that many times, sniper and the peer in turn (the even rounds run the
    peer first, which balances a steady drift of the host's speed between the sides), each
    round its own table;
    then each row's ratios and efficiencies across the rounds, their medians, and in how many
    rounds each target was met (it holds in :data:`ROUNDS_MET` of them). A target is a claim
    about a noisy machine: one run's ratio is not evidence of it.

    ``workers``: each ps's worker threads (None: the job's default, the machine's cores
    shared among its ps), for scaling runs on a machine of more cores; ``threads`` are the
    peer's."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if launcher == "ray" and rounds > 1:
        raise ValueError(
            "--rounds measures against a peer; --launcher ray compares launchers once "
            "(use --launcher auto, inprocess or local)"
        )
    if launcher == "ray":
        _warm_up(workload, scale, seed, "local", wire_dtype, workers=workers)
        run_launchers(
            workload,
            scale=scale,
            batches=batches,
            seed=seed,
            wire_dtype=wire_dtype,
            workers=workers,
        )
        return
    if peer == "torchrec":
        torchrec_python()  # a missing environment fails now, not after sniper's run
    judged = _Judged(peer, workload, scale, model, wire_dtype, workers)
    peer_label = DLRM_PEER if judged.same_dlrm else PEERS[peer]
    launchers = ["inprocess", "local"] if launcher == "auto" else [launcher]
    print(
        f"sniper bench e2e: {workload.name} at scale {scale} ({batches} batches of "
        f"{workload.batch_size}), sniper = ps + 1 hub + trainer "
        f"({' and '.join(LAUNCHERS[name] + _wire_note(name, wire_dtype) for name in launchers)}), "
        f"{_workers_note(workers)}, dense model {model}, peer = {peer_label} with {threads} "
        "threads" + (f", {rounds} rounds" if rounds > 1 else "")
    )
    if wire_dtype != "float32" and not any(_on_the_wire(name, wire_dtype) for name in launchers):
        print(f"note: --wire-dtype {wire_dtype} does nothing here: the one-process job has no wire")
    _warm_up(workload, scale, seed, launchers[-1], wire_dtype, model, workers)  # "local" if run
    data = SyntheticCtr(workload, num_batches=batches, scale=scale, seed=seed)
    series = []
    for number in range(1, rounds + 1):
        peer_first = number % 2 == 0
        if rounds > 1:
            first = " (the peer first)" if peer_first else ""
            print(f"\nround {number} of {rounds}{first}", flush=True)
        measured = _measure_round(workload, data, seed, launchers, judged, threads, peer_first)
        _print_round(measured, judged, peer_label)
        series.append(measured)
    if rounds > 1:
        _print_series(series, launchers, judged)
    _print_latency_and_auc(series[-1], launchers[0], data, batches)


@dataclass(frozen=True)
class _Judged:
    """What a run is judged against: the peer, the shape and model, the wire dtype, and each
    ps's worker threads (None: the job's default)."""

    peer: str
    workload: Workload
    scale: float
    model: str
    wire_dtype: str
    workers: int | None = None

    @property
    def same_dlrm(self) -> bool:
        """sniper's zoo DLRM against TorchRec's: the peer runs the same model, and the two
        held-out AUCs are compared."""
        return self.peer == "torchrec" and self.model == "dlrm"

    def target(self, launcher: str) -> float | None:
        """The ratio a row of ``launcher`` must reach (:func:`target`), or None."""
        return target(self.peer, launcher, self.workload, self.scale, self.model)

    def label(self, launcher: str) -> str:
        """sniper's row as every table of the run names it (the wire dtype where it is sent)."""
        return f"sniper, {LAUNCHERS[launcher]}{_wire_note(launcher, self.wire_dtype)}"


def _measure_round(
    workload: Workload,
    data: SyntheticCtr,
    seed: int,
    launchers: list[str],
    judged: _Judged,
    threads: int,
    peer_first: bool = False,
) -> _Round:
    """sniper's runs (with their kernel-bound limits) and the peer's, on ``data``: sniper's
    first, or with ``peer_first`` the peer's."""

    def peer() -> _PeerRun:
        run, steal = steal_during(lambda: _peer(workload, data, seed, judged, threads))
        return replace(run, steal=steal)

    first = peer() if peer_first else None
    runs = {
        name: _sniper(
            workload,
            data,
            seed,
            name,
            judged.wire_dtype,
            judged.model,
            True,
            workers=judged.workers,
        )
        for name in launchers
    }
    return _Round(runs, first or peer())


def _peer(
    workload: Workload, data: SyntheticCtr, seed: int, judged: _Judged, threads: int
) -> _PeerRun:
    """The peer's run on ``data``."""
    if judged.same_dlrm:
        dlrm = run_torchrec_dlrm(workload, data, threads, eval_every=EVAL_EVERY, seed=seed)
        return _PeerRun(dlrm.examples_per_second, dlrm.batches, dlrm=dlrm)
    if judged.peer == "torchrec":
        rate, batches = run_torchrec(workload, data, threads, hidden=HIDDEN, eval_every=EVAL_EVERY)
        return _PeerRun(rate, batches)
    try:
        rate, batches = _torch(workload, data, threads)
    except PeerMissing as exc:
        return _PeerRun(0.0, 0, missing=exc)
    return _PeerRun(rate, batches)


def _print_round(measured: _Round, judged: _Judged, peer_label: str) -> None:
    """A round's table: each row's examples/s, limit, efficiency, ratio and target."""
    rows = []
    for name, sniper in measured.runs.items():
        ratio = measured.ratio(name)
        rows.append(
            [
                judged.label(name),
                f"{sniper.report.examples_per_second:,.0f}",
                str(sniper.report.steps),
                *_efficiency_cells(sniper, name),
                describe_cores_busy(sniper.report),
                describe_steal(sniper.steal),
                "-" if ratio is None else f"{ratio:.2f}x",
                "-" if ratio is None else _verdict(ratio, judged.target(name)),
            ]
        )
    peer = measured.peer
    rate = peer.rate
    if peer.missing is None:
        peer_ms = f"{judged.workload.batch_size / rate * 1e3:.2f}" if rate else "-"
        batches = str(peer.batches)
        peer_row = [peer_label, f"{rate:,.0f}", batches, peer_ms]
        peer_row += ["-", "-", "-"]  # no kernel-bound limit, efficiency or cores busy
        rows.append([*peer_row, describe_steal(peer.steal), "1.00x", "-"])
    print()
    print_table(
        [
            *("", "examples/s", "batches", "ms/batch", "limit ms", "efficiency"),
            *("cores busy", "host steal", "ratio", "target"),
        ],
        rows,
    )
    if peer.missing is not None:
        print(f"note: {peer.missing}; sniper's rows have no ratio")
    _print_limits(measured.runs)
    if peer.dlrm is not None:
        sides = {judged.label(n): run.report for n, run in measured.runs.items()}
        print_auc_comparison(sides, peer.dlrm)


def _print_series(series: list[_Round], launchers: list[str], judged: _Judged) -> None:
    """Each row's ratio and efficiency in every round, their medians, and how many rounds met
    each target: what says whether a target holds (see :func:`run`), where one round's
    verdict only says how that round went."""
    needed = math.ceil(ROUNDS_MET * len(series))
    rows = []
    for name in launchers:
        label = judged.label(name)
        ratios = [r.ratio(name) for r in series]
        rows.append(_series_row(f"{label}: ratio", ratios, judged.target(name), needed, "x"))
        efficiencies = [r.runs[name].efficiency for r in series]
        wanted = EFFICIENCY_TARGET.get(name)
        rows.append(_series_row(f"{label}: efficiency", efficiencies, wanted, needed))
    print(
        f"\nacross the {len(series)} rounds (a target holds if met in {needed} of them; "
        "- : not measured in that round):"
    )
    print_table(["", "each round", "median", "target", "rounds met"], rows)


def _series_row(
    label: str, values: list[float | None], wanted: float | None, needed: int, unit: str = ""
) -> list[str]:
    """One row of the series table: each round's value (``-`` where a round has none: no
    peer, no limit), the median of those it has, and how many rounds met ``wanted``."""
    known = [value for value in values if value is not None]
    each = ", ".join("-" if value is None else f"{value:.2f}{unit}" for value in values)
    median = f"{float(np.median(known)):.2f}{unit}" if known else "-"
    if wanted is None or not known:
        return [label, each, median, "-", "-"]
    met = sum(value >= wanted for value in known)
    holds = "meets" if met >= needed else "MISSES"
    return [label, each, median, f">= {wanted:g}{unit}", f"{met} of {len(values)}: {holds}"]


def _print_latency_and_auc(measured: _Round, shown: str, data: SyntheticCtr, batches: int) -> None:
    """The per-op latency and held-out AUC of one of the (last round's) runs."""
    report = measured.runs[shown].report
    print(
        f"\nsniper trainer per-op latency, {LAUNCHERS[shown]} (the largest p50 is where the "
        "trainer waits; with every core busy, that op only waits its turn):"
    )
    print_table(
        ["op", "count", "p50 ms", "p95 ms", "p99 ms"],
        [
            [
                op,
                str(s.count),
                f"{s.p50_us / 1e3:.1f}",
                f"{s.p95_us / 1e3:.1f}",
                f"{s.p99_us / 1e3:.1f}",
            ]
            for op, s in report.ops.items()
        ],
    )
    oracle = data.oracle_auc(min(batches, 100))
    auc = figure(report.eval_auc)
    print(f"\nsniper held-out AUC {auc}, {LAUNCHERS[shown]} (oracle {oracle:.4f})")
