"""Workload shapes: how many variables, how many signs each gets per batch, key skew.

Benchmarks and experiments take their shape from a JSON file. Two are built in: ``seed_ctr`` (the
CTR job of the seed logs: 76 variables, batch 1024, one variable with 270k signs per batch) and
``criteo`` (the Criteo Kaggle data: 26 variables of one sign per example, 13 dense features,
the released columns' cardinalities), the shape most users have, and ``criteo_two_labels``
(that shape with a click and a purchase label, for multi-task models). A file may name a
``base`` workload and give only the fields it changes. The file is data,
validated at the edge into frozen dataclasses; an error names the field that is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "BUILTIN_WORKLOADS",
    "PlantedLabel",
    "VariableSpec",
    "Workload",
    "WorkloadError",
    "load_workload",
]

BUILTIN_WORKLOADS = ("seed_ctr", "criteo", "criteo_two_labels")


class WorkloadError(ValueError):
    """A workload file is missing, unreadable or has a field of the wrong type or range."""


@dataclass(frozen=True)
class VariableSpec:
    """One sparse variable of a workload."""

    name: str
    """Variable name; also decides its ps through ``sniper.hashing.ps_for_variable``."""
    field: int
    """Feature field index, used to derive distinct sign spaces per variable."""
    signs_per_batch: int
    """Total signs of this variable in one batch, over all examples."""
    vocabulary: int
    """Number of distinct signs the variable draws from."""


@dataclass(frozen=True)
class PlantedLabel:
    """One label of a workload: what synthetic data plants for it."""

    name: str
    positive_rate: float
    """The share of examples whose label is 1."""


@dataclass(frozen=True)
class Workload:
    """A training job's shape, as benchmarks and synthetic data generators need it."""

    name: str
    batch_size: int
    embedding_dim: int
    dense_features: int
    positive_rate: float
    zipf_exponent: float
    variables: tuple[VariableSpec, ...]
    labels: tuple[PlantedLabel, ...] = ()
    """The labels of a multi-task workload; empty: one label, ``label``, at
    :attr:`positive_rate`."""

    @property
    def label_specs(self) -> tuple[PlantedLabel, ...]:
        """Every label, the one of a single-label workload included."""
        return self.labels or (PlantedLabel("label", self.positive_rate),)

    @property
    def signs_per_batch(self) -> int:
        """Signs of all variables in one batch."""
        return sum(v.signs_per_batch for v in self.variables)

    def variable(self, name: str) -> VariableSpec:
        """Return the variable called ``name``; ``KeyError`` names it when it is absent."""
        for spec in self.variables:
            if spec.name == name:
                return spec
        raise KeyError(f"workload {self.name!r} has no variable {name!r}")

    def largest(self) -> VariableSpec:
        """The variable with the most signs per batch (the one that dominates a step)."""
        return max(self.variables, key=lambda v: v.signs_per_batch)


def load_workload(name_or_path: str | Path) -> Workload:
    """Load a built-in workload by name (``seed_ctr``) or a workload JSON file by path."""
    text = _read_text(name_or_path)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"workload {name_or_path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise WorkloadError(f"workload {name_or_path}: expected a JSON object")
    if "base" in raw:
        base = _field(raw, "base", str, str(name_or_path))
        if base not in BUILTIN_WORKLOADS:
            raise WorkloadError(
                f"workload {name_or_path}: base must be a built-in workload "
                f"({', '.join(BUILTIN_WORKLOADS)}), got {base!r}"
            )
        raw = json.loads(_read_text(base)) | raw
    return _parse(raw, str(name_or_path))


def _read_text(name_or_path: str | Path) -> str:
    if str(name_or_path) in BUILTIN_WORKLOADS:
        package = resources.files("sniper.data") / "_workloads" / f"{name_or_path}.json"
        return package.read_text(encoding="utf-8")
    path = Path(name_or_path)
    if not path.is_file():
        raise WorkloadError(
            f"workload {name_or_path!r} is neither a built-in ({', '.join(BUILTIN_WORKLOADS)}) "
            "nor a readable JSON file"
        )
    return path.read_text(encoding="utf-8")


def _parse(raw: dict[str, Any], source: str) -> Workload:
    distribution = _field(raw, "key_distribution", dict, source)
    kind = distribution.get("kind")
    if kind != "zipf":
        raise WorkloadError(f"{source}: key_distribution.kind must be 'zipf', got {kind!r}")
    variables = _field(raw, "variables", list, source)
    if not variables:
        raise WorkloadError(f"{source}: variables must not be empty")
    labels = raw.get("labels", [])
    if not isinstance(labels, list):
        kind = type(labels).__name__
        raise WorkloadError(f"{source}: field 'labels' has the wrong type ({kind})")
    return Workload(
        name=_field(raw, "name", str, source),
        batch_size=_positive(raw, "batch_size", source),
        embedding_dim=_positive(raw, "embedding_dim", source),
        dense_features=_field(raw, "dense_features", int, source),
        positive_rate=float(_field(raw, "positive_rate", (int, float), source)),
        zipf_exponent=float(_field(distribution, "exponent", (int, float), source)),
        variables=tuple(
            _parse_variable(v, f"{source}: variables[{i}]") for i, v in enumerate(variables)
        ),
        labels=_parse_labels(labels, source),
    )


def _parse_labels(raw: list[Any], source: str) -> tuple[PlantedLabel, ...]:
    """``labels``: ``[{"name": ..., "positive_rate": ...}, ...]``, names unique."""
    labels = []
    for i, entry in enumerate(raw):
        where = f"{source}: labels[{i}]"
        if not isinstance(entry, dict):
            raise WorkloadError(f"{where}: expected an object")
        rate = float(_field(entry, "positive_rate", (int, float), where))
        if not 0 < rate < 1:
            raise WorkloadError(f"{where}: field 'positive_rate' must be in (0, 1), got {rate}")
        labels.append(PlantedLabel(_field(entry, "name", str, where), rate))
    names = [label.name for label in labels]
    if len(set(names)) != len(names):
        raise WorkloadError(f"{source}: labels must have distinct names, got {names}")
    return tuple(labels)


def _parse_variable(raw: Any, where: str) -> VariableSpec:
    if not isinstance(raw, dict):
        raise WorkloadError(f"{where}: expected an object")
    return VariableSpec(
        name=_field(raw, "name", str, where),
        field=_field(raw, "field", int, where),
        signs_per_batch=_positive(raw, "signs_per_batch", where),
        vocabulary=_positive(raw, "vocabulary", where),
    )


def _field(raw: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in raw:
        raise WorkloadError(f"{where}: missing field {key!r}")
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WorkloadError(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _positive(raw: dict[str, Any], key: str, where: str) -> int:
    value: int = _field(raw, key, int, where)
    if value < 1:
        raise WorkloadError(f"{where}: field {key!r} must be positive, got {value}")
    return value
