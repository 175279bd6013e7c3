"""PNG plots of an experiment's results, when matplotlib (``sniper[plot]``) is installed.

matplotlib is imported here and only here, lazily, with the Agg backend: the runner works
on a machine without it or without a display, and ``import sniper`` never pays for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sniper.experiment._results import _expand, metric_columns, point_medians, swept_value
from sniper.experiment._run import Run
from sniper.experiment._spec import Experiment, Point

__all__ = ["write_plots"]


def write_plots(directory: Path, experiment: Experiment, runs: Sequence[Run]) -> list[Path] | None:
    """One PNG per ``[plot] y`` metric; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    medians = point_medians(runs)
    points = sorted({run.point.index: run.point for run in runs}.values(), key=lambda p: p.index)
    written = []
    for metric in _expand(experiment.plot.y, metric_columns(runs)):
        series = _series(experiment, points, medians, metric)
        if not any(ys for _, ys in series.values()):
            continue  # no run measured it (every run failed, or the report lacks it)
        figure, axes = plt.subplots(figsize=(7, 4))
        try:
            _draw(axes, experiment, series)
            axes.set_ylabel(metric)
            axes.set_xlabel(experiment.plot.x)
            axes.set_title(_title(experiment, metric))
            figure.tight_layout()
            path = directory / f"{experiment.name}-{re.sub(r'[^A-Za-z0-9_.-]', '_', metric)}.png"
            figure.savefig(path, dpi=100)
            written.append(path)
        finally:
            plt.close(figure)
    return written


def _series(
    experiment: Experiment,
    points: Sequence[Point],
    medians: dict[int, dict[str, Any]],
    metric: str,
) -> dict[str, tuple[list[Any], list[float]]]:
    """Series label -> (x values, medians), skipping points without a numeric value."""
    plot = experiment.plot
    series: dict[str, tuple[list[Any], list[float]]] = {}
    for point in points:
        value = medians.get(point.index, {}).get(metric)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        name = f"{plot.series}={swept_value(point, plot.series)}" if plot.series else metric
        x = point.label if plot.x == "point" else swept_value(point, plot.x)
        xs, ys = series.setdefault(name, ([], []))
        xs.append(x)
        ys.append(float(value))
    return series


def _draw(
    axes: Any, experiment: Experiment, series: dict[str, tuple[list[Any], list[float]]]
) -> None:
    numeric = all(
        isinstance(x, int | float) and not isinstance(x, bool)
        for xs, _ in series.values()
        for x in xs
    )
    if experiment.plot.kind == "line" and numeric:
        for name, (xs, ys) in series.items():
            order = sorted(range(len(xs)), key=lambda i: xs[i])
            axes.plot([xs[i] for i in order], [ys[i] for i in order], marker="o", label=name)
    else:
        categories = list(dict.fromkeys(str(x) for xs, _ in series.values() for x in xs))
        width = 0.8 / len(series)
        for offset, (name, (xs, ys)) in enumerate(series.items()):
            positions = [categories.index(str(x)) + offset * width for x in xs]
            axes.bar(positions, ys, width=width, label=name)
        axes.set_xticks([i + 0.4 - width / 2 for i in range(len(categories))])
        axes.set_xticklabels(categories, rotation=20, ha="right")
    if len(series) > 1:
        axes.legend()


def _title(experiment: Experiment, metric: str) -> str:
    seed = experiment.seed
    title = f"{experiment.name}: {metric}"
    if seed is not None and seed.metric == metric and seed.value is not None:
        title += f" (seed: {seed.value:g})"
    return title
