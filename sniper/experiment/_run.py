"""``sniper experiment run``: every point of an experiment, each repeat a real run.

A training point is a real local cluster: ``sniper train --config POINT.toml`` in a subprocess,
exactly what a user runs, with its merged config and JSON report kept under ``points/`` in the
output directory. While it runs, :class:`~sniper.experiment._proc.CpuSampler` records each
role's CPU time from ``/proc``, which neither the trainer nor the ps can report about each
other. A point that fails is recorded with its error and the sweep goes on: one bad point must
not cost the other hours. The machine's parallel capacity is measured once at the start and
written beside the results, because a 2x speedup means nothing on a VM that gives 1.3 cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from sniper.cluster import ReportFile, read_report
from sniper.experiment._proc import CpuSampler
from sniper.experiment._spec import Experiment, Point, check_point_config, validate_points

__all__ = ["Run", "report_metrics", "run_experiment"]

_STOP_SECONDS = 60.0
"""How long a timed-out run may take to stop its servers after SIGTERM before it is killed."""


@dataclass
class Run:
    """One repeat of one point: the row of ``results.csv``."""

    point: Point
    repeat: int
    status: str = "ok"
    """``ok`` or ``failed``."""
    error: str = ""
    seconds: float = 0.0
    """Wall time of the run, start-up and shut-down included."""
    metrics: dict[str, Any] = field(default_factory=dict)


def run_experiment(experiment: Experiment, *, quick: bool = False, out: Path | None = None) -> int:
    """Validate every point, run each ``repeat`` times, write the results; the exit status:
    0 when every run succeeded, 1 when some failed (``ValueError`` for a bad file: nothing ran).
    """
    from sniper.experiment._plot import write_plots
    from sniper.experiment._results import write_csv, write_summary
    from sniper.runtime import parallel_capacity

    points = validate_points(experiment, quick)
    directory = (out or experiment.path.parent / "results" / experiment.name).resolve()
    (directory / "points").mkdir(parents=True, exist_ok=True)
    repeats = experiment.repeats(quick)
    workers = os.cpu_count() or 1
    capacity = parallel_capacity(workers)
    print(
        f"experiment {experiment.name}{' (quick)' if quick else ''}: {len(points)} point(s) x "
        f"{repeats} repeat(s) -> {directory}\nparallel capacity of this machine: "
        f"{capacity:.2f}x with {workers} worker processes",
        flush=True,
    )
    runs = []
    total = len(points) * repeats
    for point in points:
        for repeat in range(repeats):
            run = _run_point(experiment, point, repeat, directory / "points")
            runs.append(run)
            print(f"[{len(runs)}/{total}] {point.label} repeat {repeat}: {_headline(run)}")
    write_csv(directory / "results.csv", experiment, runs, capacity)
    write_summary(directory / "summary.md", experiment, runs, capacity, workers, quick)
    print(f"wrote {directory / 'results.csv'} and {directory / 'summary.md'}")
    plots = write_plots(directory, experiment, runs)
    if plots is None:
        print("no plots: matplotlib is not installed (pip install 'sniper[plot]')")
    elif plots:
        print(f"wrote {len(plots)} plot(s): {', '.join(path.name for path in plots)}")
    failed = [run for run in runs if run.status != "ok"]
    for run in failed:
        print(f"failed: {run.point.label} repeat {run.repeat}: {run.error}")
    return 1 if failed else 0


def _run_point(experiment: Experiment, point: Point, repeat: int, directory: Path) -> Run:
    run = Run(point, repeat)
    start = time.perf_counter()
    try:
        if experiment.kind == "hash_mismatch":
            from sniper.experiment._hash import run_hash_point

            run.metrics = run_hash_point(check_point_config(experiment.kind, point.config))
        else:
            stem = directory / f"{point.index:02d}-r{repeat}"
            run.metrics, run.error = _run_train(point, stem, experiment.timeout)
            run.status = "failed" if run.error else "ok"
    except Exception as exc:  # a point's failure is a result; the sweep goes on
        run.status, run.error = "failed", f"{type(exc).__name__}: {exc}"
    run.seconds = time.perf_counter() - start
    return run


def _run_train(point: Point, stem: Path, timeout: float) -> tuple[dict[str, Any], str]:
    """``sniper train`` on the point's config, sampled from ``/proc``: (metrics, error)."""
    from sniper.cluster import sniper_command

    report = stem.with_suffix(".json")
    report.unlink(missing_ok=True)
    config = point.config | {"output": str(report), "progress": False}
    stem.with_suffix(".toml").write_text(tomli_w.dumps(config))
    command = sniper_command("train", "--config", str(stem.with_suffix(".toml")))
    log = stem.with_suffix(".log")
    with log.open("w") as output:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
        )
        sampler = CpuSampler(process.pid).start()
        try:
            status = _wait(process, timeout)
        finally:
            usage = sampler.stop()
    metrics: dict[str, Any] = dict(usage.metrics())
    if status != 0:
        why = f"timed out after {timeout:.0f} s" if status is None else _last_error(log)
        return metrics, why
    try:
        metrics = report_metrics(read_report(report)) | metrics
    except (OSError, ValueError) as exc:
        return metrics, f"no report at {report}: {exc}"
    return metrics, ""


def _wait(process: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The exit status; None after a timeout (then SIGTERM, which stops its servers too)."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return None
    except BaseException:
        process.kill()
        process.wait()
        raise


def _last_error(log: Path) -> str:
    """The line that says why a run failed: ``sniper: error: ...``, a traceback's last line,
    else the log's last line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("sniper: error:"):
            return line.removeprefix("sniper: error:").strip()
    for index, line in enumerate(lines):
        if line.startswith("Traceback") and index + 1 < len(lines):
            return lines[-1]
    return lines[-1] if lines else "exited with no output"


_REPORT_KEYS = (
    "examples_per_second",
    "steps",
    "examples",
    "seconds",
    "train_auc",
    "train_logloss",
    "eval_auc",
    "eval_logloss",
    "eval_auc_whole_run",
    "eval_data_auc",
    "cores_busy",
)
_QUANTILES = ("p50", "p95", "p99")


def report_metrics(file: ReportFile) -> dict[str, Any]:
    """The columns of a ``sniper train`` report: throughput and AUC, the trainer's
    ``OP_p50_ms``, each ps stage's ``ps_STAGE_p50_ms`` (the slowest ps: a step waits for it),
    and, when the report has them, the ps' own CPU time and the placement moves."""
    report = file.report
    metrics: dict[str, Any] = {key: getattr(report, key) for key in _REPORT_KEYS}
    metrics["oracle_auc"] = file.oracle_auc
    # "seconds" is the run's wall time in results.csv; the report's is the training's own.
    metrics["train_seconds"] = metrics.pop("seconds")
    for op, stats in report.ops.items():
        for q in _QUANTILES:
            metrics[f"{op}_{q}_ms"] = getattr(stats, f"{q}_us") / 1e3
    stages = dict.fromkeys(stage for ps in report.ps_ops for stage in ps)
    for stage in stages:
        for q in _QUANTILES:
            values = [getattr(ps[stage], f"{q}_us") / 1e3 for ps in report.ps_ops if stage in ps]
            metrics[f"ps_{stage}_{q}_ms"] = max(values)
    if cpu := report.ps_cpu_seconds:
        metrics["ps_cpu_seconds_reported"] = sum(cpu)
        low = min(cpu)
        metrics["ps_cpu_ratio_reported"] = max(cpu) / low if len(cpu) > 1 and low > 0 else None
    metrics["moves"] = len(report.moves)
    metrics["placement_version"] = report.placement_version
    return metrics


def _headline(run: Run) -> str:
    if run.status != "ok":
        return f"FAILED after {run.seconds:.1f} s: {run.error}"
    metrics = run.metrics
    if "failed_lookups" in metrics:
        status = f" ({metrics['error_status']})" if metrics["error_status"] else ""
        what = f"{metrics['failed_lookups']}/{metrics['lookups']} lookups failed{status}"
    else:
        what = f"{metrics.get('examples_per_second') or 0:,.0f} ex/s"
    return f"{what}, {run.seconds:.1f} s"
