"""``results.csv`` (every run) and ``summary.md`` (every point's median over its repeats).

The csv keeps everything, failed runs included, so a later look can ask a new question of
it; the summary answers the experiment's own question in one table, with the seed log's
finding and figure beside ours and the machine's parallel capacity, without which no speedup
measured on a shared VM can be read.
"""

from __future__ import annotations

import csv
import fnmatch
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sniper.experiment._run import Run
from sniper.experiment._spec import Experiment, Point

__all__ = ["metric_columns", "point_medians", "swept_value", "write_csv", "write_summary"]


def swept_value(point: Point, key: str) -> Any:
    """The point's effective value of a dotted key (a variant that leaves it: the base's)."""
    value: Any = point.config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    return value


def metric_columns(runs: Sequence[Run]) -> list[str]:
    """Every metric any run has, in the order they first appear."""
    return list(dict.fromkeys(key for run in runs for key in run.metrics))


def write_csv(path: Path, experiment: Experiment, runs: Sequence[Run], capacity: float) -> None:
    """One row per point and repeat."""
    keys = list(experiment.swept_keys)
    header = ["point", *keys, "repeat", "status", "error", "seconds", "parallel_capacity"]
    metrics = metric_columns(runs)
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header + metrics)
        for run in runs:
            writer.writerow(
                [run.point.label]
                + [_cell(swept_value(run.point, key)) for key in keys]
                + [run.repeat, run.status, run.error, f"{run.seconds:.2f}", f"{capacity:.2f}"]
                + [_cell(run.metrics.get(metric)) for metric in metrics]
            )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def point_medians(runs: Sequence[Run]) -> dict[int, dict[str, Any]]:
    """Each point's median of every numeric metric over its successful repeats (a text
    metric: its most common value)."""
    by_point: dict[int, list[Run]] = {}
    for run in runs:
        if run.status == "ok":
            by_point.setdefault(run.point.index, []).append(run)
    medians: dict[int, dict[str, Any]] = {}
    for index, group in by_point.items():
        row: dict[str, Any] = {}
        for metric in metric_columns(group):
            values = [v for run in group if (v := run.metrics.get(metric)) is not None]
            if not values:
                continue
            numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
            if len(numbers) == len(values):
                row[metric] = statistics.median(numbers)
            else:
                row[metric] = Counter(map(str, values)).most_common(1)[0][0]
        medians[index] = row
    return medians


def _expand(patterns: Sequence[str], columns: Sequence[str]) -> list[str]:
    """Patterns (fnmatch) against the columns, in the patterns' order; a name that matches
    nothing stays, so a missing metric shows as a column of dashes rather than vanishing."""
    chosen: list[str] = []
    for pattern in patterns:
        matches = [c for c in columns if fnmatch.fnmatchcase(c, pattern)]
        chosen += matches or ([pattern] if not any(ch in pattern for ch in "*?[") else [])
    return list(dict.fromkeys(chosen))


def _format(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value).replace("|", "\\|")
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.4g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def write_summary(
    path: Path,
    experiment: Experiment,
    runs: Sequence[Run],
    capacity: float,
    workers: int,
    quick: bool,
) -> None:
    """The experiment's question answered in one table, the seed's figure beside ours."""
    points = sorted({run.point.index: run.point for run in runs}.values(), key=lambda p: p.index)
    medians = point_medians(runs)
    metrics = _expand(experiment.summary_metrics(), metric_columns(runs))
    seed = experiment.seed
    lines = [f"# {experiment.name}", ""]
    if experiment.description:
        lines += [experiment.description, ""]
    if seed is not None:
        where = f" (seed log {seed.log})" if seed.log else ""
        figure = ""
        if seed.metric and seed.value is not None:
            figure = f"; its figure: {seed.metric} = {_format(seed.value)}"
        elif seed.metric:
            figure = f"; ours is the {seed.metric} column"
        lines += [f"Seed finding{where}: {seed.finding}{figure}.", ""]
    flag = " --quick" if quick else ""
    lines += [
        f"Command: `sniper experiment run {_shown(experiment.path)}{flag}`; "
        f"{experiment.repeats(quick)} repeat(s) per point, medians of the successful ones.",
        "",
        f"Parallel capacity of the machine during this run: {capacity:.2f}x with {workers} "
        "worker processes (how much faster that many processes of pure arithmetic ran than "
        "one: the ceiling of any speedup below).",
        "",
    ]
    ok = {p.index: sum(r.status == "ok" for r in runs if r.point is p) for p in points}
    total = {p.index: sum(1 for r in runs if r.point is p) for p in points}

    def title(metric: str) -> str:
        if seed is not None and metric == seed.metric and seed.value is not None:
            return f"{metric} (seed: {_format(seed.value)})"
        return metric

    if experiment.summary.transpose:
        header = ["metric", *(p.label for p in points)]
        rows = [
            [title(m), *(_format(medians.get(p.index, {}).get(m)) for p in points)] for m in metrics
        ]
        rows.append(["runs ok", *(f"{ok[p.index]}/{total[p.index]}" for p in points)])
    else:
        header = ["point", "runs ok", *(title(m) for m in metrics)]
        rows = [
            [
                p.label,
                f"{ok[p.index]}/{total[p.index]}",
                *(_format(medians.get(p.index, {}).get(m)) for m in metrics),
            ]
            for p in points
        ]
    lines += _table(header, rows)
    failed = [run for run in runs if run.status != "ok"]
    if failed:
        lines += ["", "Failed runs:", ""]
        lines += [f"- {run.point.label} repeat {run.repeat}: {run.error}" for run in failed]
    path.write_text("\n".join(lines) + "\n")


def _shown(path: Path) -> str:
    """The experiment file as a user would type it: relative to the working directory when it
    is under it (``experiments/NAME.toml`` from the repository), else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)
