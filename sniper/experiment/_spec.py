"""The experiment TOML format and its expansion into points (see ``experiments/README.md``).

An experiment is a base config, a sweep over some of its keys, a repeat count, the ``--quick``
overrides, the seed log's finding it reproduces, and how to plot and summarise the results.
The base config lives in its own ``[config]`` table rather than at the top level because
``sniper train`` has keys (``seed``, ``output``) that would collide with the experiment's own.

Sweep keys are dotted paths into the config (``variables.default.capacity``), written quoted
or as TOML's own dotted keys; both read the same, because every table is flattened to dotted
paths before the sweep is expanded and deep-set again into each point's config. Everything is
validated here, before any point runs: a bad file fails in a second with the key and the file
named, not after an hour of sweeping.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from sniper._config import from_mapping

__all__ = [
    "KINDS",
    "Experiment",
    "HashMismatchConfig",
    "PlotSpec",
    "Point",
    "SeedFinding",
    "SummarySpec",
    "find_experiments",
    "load_experiment",
    "print_experiments",
]

KINDS = ("train", "hash_mismatch")
"""What a point runs: a ``sniper train`` job, or the hash-mismatch check."""

T = TypeVar("T")

_TOP_KEYS = {"description", "kind", "repeat", "timeout", "config", "sweep", "quick"}
_TABLES = {"seed", "plot", "summary"}
_RUNNER_KEYS = ("output", "progress")
"""Train keys the runner sets itself: where the report goes, and no progress display."""


@dataclass(frozen=True)
class SeedFinding:
    """What the seed log found, quoted beside our figure in ``summary.md``."""

    finding: str = ""
    """The finding in words (``p50 EmbeddingLookup 6.4 s under one lock``)."""
    log: str = ""
    """Which seed log (``001``)."""
    metric: str = ""
    """The column of ``results.csv`` that measures the same thing ("": no number to compare)."""
    value: float | None = None
    """The seed's figure, in the metric's unit."""

    def __post_init__(self) -> None:
        if not self.finding:
            raise ValueError("seed.finding is required: the seed log's finding, in words")
        number = self.value
        if number is not None and (isinstance(number, bool) or not isinstance(number, int | float)):
            raise ValueError(f"seed.value must be a number, got {number!r}")


@dataclass(frozen=True)
class PlotSpec:
    """One PNG per ``y`` metric: its median over repeats against ``x``."""

    x: str = "point"
    """A swept key, or ``point`` (each point's label)."""
    y: tuple[str, ...] = ()
    kind: Literal["bar", "line"] = "bar"
    series: str = ""
    """A second swept key: one line (or bar group) per value ("": none)."""


@dataclass(frozen=True)
class SummarySpec:
    """The table of ``summary.md``."""

    metrics: tuple[str, ...] = ()
    """Columns (fnmatch patterns allowed: ``ps_PushGrad.*_p50_ms``); default: the plot's y."""
    transpose: bool = False
    """Metrics as rows and points as columns (for many metrics and few points: stages)."""


@dataclass(frozen=True)
class HashMismatchConfig:
    """The config of a ``hash_mismatch`` point (see ``sniper.experiment._hash``)."""

    workload: str = "seed_ctr"
    """Whose variable names are placed."""
    name_prefix: str = ""
    """Prepended to every variable name: a model's scope (``dsp_ctr_v6/``) makes names long
    enough for the unwrapped hash to pass 2**64, which the workloads' own names never do."""
    num_ps: int = 2
    dim: int = 4
    """Width of the tables created (small: only placement is under test)."""

    def __post_init__(self) -> None:
        if self.num_ps < 1:
            raise ValueError(f"num_ps must be at least 1, got {self.num_ps}")
        if self.dim < 1:
            raise ValueError(f"dim must be at least 1, got {self.dim}")


@dataclass(frozen=True)
class Point:
    """One configuration of the sweep, run ``repeat`` times."""

    index: int
    label: str
    values: dict[str, Any]
    """The swept keys (dotted) and this point's value of each."""
    config: dict[str, Any]
    """The whole config: base, then ``--quick`` overrides, then the swept values."""


@dataclass(frozen=True)
class Experiment:
    """A parsed experiment file."""

    path: Path
    name: str
    description: str
    kind: str
    repeat: int
    timeout: float
    """Seconds a point may run before it is stopped and recorded as failed."""
    config: dict[str, Any]
    sweep: tuple[tuple[str, dict[str, Any]], ...]
    """Each point's label and swept values, in order."""
    quick_sweep: tuple[tuple[str, dict[str, Any]], ...]
    """The sweep under ``--quick`` (``[quick.sweep]``; empty: the same as the full run's)."""
    swept_keys: tuple[str, ...]
    """Every key either sweep sets."""
    quick: dict[str, Any]
    seed: SeedFinding | None
    plot: PlotSpec
    summary: SummarySpec

    def points(self, quick: bool = False) -> list[Point]:
        """Every point's full config (``quick``: with the ``[quick]`` overrides)."""
        base = copy.deepcopy(self.config)
        if quick:
            for key, value in _flatten(_config_part(self.quick)).items():
                _deep_set(base, key, value)
        sweep = self.quick_sweep if quick and self.quick_sweep else self.sweep
        points = []
        for index, (label, values) in enumerate(sweep):
            config = copy.deepcopy(base)
            for key, value in values.items():
                _deep_set(config, key, value)
            points.append(Point(index, label, values, config))
        return points

    def repeats(self, quick: bool = False) -> int:
        """Runs per point (``[quick] repeat`` under ``--quick``)."""
        return int(self.quick.get("repeat", self.repeat)) if quick else self.repeat

    def summary_metrics(self) -> tuple[str, ...]:
        """The patterns of the summary's columns: its own, or the plot's y, and the seed's."""
        metrics = self.summary.metrics or self.plot.y
        if self.seed is not None and self.seed.metric and self.seed.metric not in metrics:
            metrics = (*metrics, self.seed.metric)
        return metrics


def load_experiment(path: Path) -> Experiment:
    """Parse and check an experiment file; ``ValueError`` names the file and the key."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"experiment {path}: {exc}") from None
    try:
        return _parse(path, raw)
    except ValueError as exc:
        raise ValueError(f"experiment {path}: {exc}") from None


def _parse(path: Path, raw: dict[str, Any]) -> Experiment:
    unknown = sorted(set(raw) - _TOP_KEYS - _TABLES)
    if unknown:
        known = ", ".join(sorted(_TOP_KEYS | _TABLES))
        raise ValueError(f"unknown key {unknown[0]!r}; known keys: {known}")
    kind = raw.get("kind", "train")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    repeat = _positive_int(raw, "repeat", 1)
    config = _table(raw, "config")
    for key in _RUNNER_KEYS:
        if key in config:
            raise ValueError(f"config.{key} is set by the runner; leave it out")
    quick = _table(raw, "quick")
    _positive_int(quick, "quick.repeat", 1, key="repeat")
    sweep = _sweep(_table(raw, "sweep"))
    quick_sweep = _sweep(_table(quick, "sweep"), "quick.sweep") if "sweep" in quick else ()
    swept = tuple(dict.fromkeys(key for _, values in sweep + quick_sweep for key in values))
    plot = _sub(PlotSpec, raw, "plot")
    for key in (plot.x, plot.series):
        if key and key != "point" and key not in swept:
            raise ValueError(f"plot: {key!r} is not a swept key ({', '.join(swept) or 'none'})")
    seed = _sub(SeedFinding, raw, "seed") if "seed" in raw else None
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"description must be a string, got {description!r}")
    timeout = raw.get("timeout", 900)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return Experiment(
        path=path,
        name=path.stem,
        description=description,
        kind=kind,
        repeat=repeat,
        timeout=float(timeout),
        config=config,
        sweep=sweep,
        quick_sweep=quick_sweep,
        swept_keys=swept,
        quick=quick,
        seed=seed,
        plot=plot,
        summary=_sub(SummarySpec, raw, "summary"),
    )


def _positive_int(table: Mapping[str, Any], name: str, default: int, key: str = "") -> int:
    value = table.get(key or name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _table(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a table, got {value!r}")
    return value


def _sub(cls: type[T], raw: Mapping[str, Any], key: str) -> T:
    """A ``[key]`` table as ``cls`` (errors name ``key.field``)."""
    return from_mapping(cls, _table(raw, key), f"[{key}]", prefix=f"{key}.")


def _sweep(sweep: dict[str, Any], name: str = "sweep") -> tuple[tuple[str, dict[str, Any]], ...]:
    """``[sweep.grid]`` (every combination, in the file's order) or ``[[sweep.variants]]``."""
    unknown = sorted(set(sweep) - {"grid", "variants"})
    if unknown:
        raise ValueError(f"unknown key '{name}.{unknown[0]}'; a sweep is 'grid' or 'variants'")
    if "grid" in sweep and "variants" in sweep:
        raise ValueError(f"give {name}.grid or {name}.variants, not both")
    if "variants" in sweep:
        return _variants(sweep["variants"], name)
    grid = _flatten(_table(sweep, "grid"))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{name}.grid.{key} must be a non-empty list, got {values!r}")
    if not grid:
        return (("base", {}),)
    points = []
    for combination in itertools.product(*grid.values()):
        values = dict(zip(grid, combination, strict=True))
        points.append((_label(values), values))
    return tuple(points)


def _variants(variants: Any, name: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    if not isinstance(variants, list) or not variants:
        raise ValueError(
            f"{name}.variants must be a non-empty array of tables ([[{name}.variants]])"
        )
    points = []
    for index, variant in enumerate(variants):
        values = _flatten(dict(variant))
        label = values.pop("label", None) or _label(values)
        if not isinstance(label, str):
            raise ValueError(f"{name}.variants[{index}].label must be a string, got {label!r}")
        points.append((label, values))
    labels = [label for label, _ in points]
    if len(set(labels)) != len(labels):
        raise ValueError(f"{name}.variants: labels must differ, got {labels}")
    return tuple(points)


def _label(values: Mapping[str, Any]) -> str:
    shown = {
        key.rsplit(".", 1)[-1]: '""' if value == "" else value for key, value in values.items()
    }
    return ", ".join(f"{key}={value}" for key, value in shown.items()) or "base"


def _config_part(quick: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[quick]`` table without its experiment-level keys (``repeat``, ``sweep``)."""
    return {key: value for key, value in quick.items() if key not in ("repeat", "sweep")}


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as dotted keys: ``{variables: {default: {capacity: 9}}}`` and
    ``{"variables.default.capacity": 9}`` both give the latter."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _deep_set(config: dict[str, Any], dotted: str, value: Any) -> None:
    """``config[a][b][c] = value`` for ``a.b.c``, creating the tables on the way."""
    *parents, leaf = dotted.split(".")
    table = config
    for part in parents:
        child = table.setdefault(part, {})
        if not isinstance(child, dict):
            raise ValueError(f"{dotted}: {part!r} is not a table")
        table = child
    table[leaf] = value


def validate_points(experiment: Experiment, quick: bool) -> list[Point]:
    """Every point's config checked as its runner will build it, before any point runs; the
    points to run. A quick run checks the full run's points too, so that ``--quick`` (what the
    tests run) catches a bad value in the full sweep."""
    points = experiment.points(quick)
    for point in points + (experiment.points() if quick else []):
        try:
            check_point_config(experiment.kind, point.config)
        except ValueError as exc:
            raise ValueError(
                f"experiment {experiment.path}: point {point.label!r}: {exc}"
            ) from None
    return points


def check_point_config(kind: str, config: dict[str, Any]) -> Any:
    """The point's config as its runner's config class (``ValueError`` names the key)."""
    if kind == "hash_mismatch":
        return from_mapping(HashMismatchConfig, config, "config")
    from sniper.cluster import load_train_config

    return load_train_config(None, config | {"output": "", "progress": False})


def find_experiments(directory: Path) -> Iterator[Path]:
    """The experiment files of ``directory`` (its ``*.toml``), by name."""
    return iter(sorted(directory.glob("*.toml")))


def print_experiments(directory: Path) -> None:
    """``sniper experiment list``: each experiment's name and the seed finding it reproduces."""
    paths = list(find_experiments(directory))
    if not paths:
        raise ValueError(f"no experiment files (*.toml) in {directory}")
    width = max(len(path.stem) for path in paths)
    for path in paths:
        try:
            experiment = load_experiment(path)
        except ValueError as exc:
            print(f"{path.stem:<{width}}  (unreadable: {exc})")
            continue
        seed = experiment.seed
        text = seed.finding if seed is not None else experiment.description
        points = len(experiment.sweep)
        print(f"{path.stem:<{width}}  {points} point(s) x {experiment.repeat}  {text}")


def as_dict(experiment: Experiment) -> dict[str, Any]:
    """The experiment as plain data (written beside the results)."""
    return dataclasses.asdict(experiment) | {"path": str(experiment.path)}
