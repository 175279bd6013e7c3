"""``[features]``: how a user's table (Parquet, CSV, TSV of any schema) becomes batches.

A user's table names its own columns: ``user_id`` as int64, ``genres`` as ``list<string>``,
``age`` as a number, ``clicked`` or ``rating`` as the label. The feature spec maps them::

    [features]
    label = "clicked"        # or labels = ["click", "buy"]
                             # or label = { column = "rating", positive = ">= 4" }
    sparse = ["user_id", "item_id", "genres"]
    dense = ["age", "price"]
    [features.columns.price]
    transform = "log1p"      # none, log1p, standardize, clip (with bounds = [low, high])
    fill = 0.0               # a null value
    [features.columns.history]
    table = "item_id"        # item_id's variable: one table, its values in the same bag

Each sparse column is one variable (embedding table) named after it, unless ``table`` names
another sparse column's: columns sharing a variable pour their values into one bag per
example, and a value gets one sign in both (the variable's salt, see
:func:`sniper.hashing.feature_sign`). Columns the spec does not name are never read.

The spec is validated here, once, with errors naming the key (``features.columns.price.
transform must be one of ...``); what only the data can say (a column's type) is checked by
:class:`~sniper.data.TableReader` against each file.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sniper._config import from_mapping

__all__ = ["POOLINGS", "ColumnSpec", "FeatureSpec", "LabelSpec"]

POOLINGS = ("sum", "mean", "sqrtn", "none")
"""How a variable's bag becomes the model's input: ``sum`` (the default), ``mean``, ``sqrtn``
(the sum over the square root of the count), or ``none`` (every value's row, unpooled)."""
_SPEC_KEYS = ("label", "labels", "sparse", "dense", "columns", "skip_null_labels")
_RULE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(.+?)\s*$")


@dataclass(frozen=True)
class ColumnSpec:
    """``[features.columns.NAME]``: one column's settings. Every field is a TOML key."""

    transform: Literal["none", "log1p", "standardize", "clip"] = "none"
    """A dense column's transform: ``log1p`` (values must be above -1), ``standardize``
    (``(x - mean) / std``, from ``stats`` or a pass over the data), ``clip`` (to ``bounds``)."""
    fill: float = 0.0
    """A dense column's value where the table has none (before the transform)."""
    bounds: tuple[float, ...] = ()
    """``clip``'s ``[low, high]``."""
    stats: tuple[float, ...] = ()
    """``standardize``'s ``[mean, std]``; empty: measured on the training data, its nulls
    counted as ``fill`` (as the model sees them), and then shared by every hub, evaluation
    and checkpoint. Give ``stats`` for a mean and std of the values present alone."""
    table: str = ""
    """A sparse column: share this other sparse column's variable (one table, one bag)."""
    separator: str = ""
    """A sparse string column holds a list as delimited text (``"Comedy|Drama"``, with
    ``"|"``): the values between separators are the bag (empty ones dropped)."""
    pooling: str = ""
    """How the variable's bag is pooled: ``sum``, ``mean``, ``sqrtn`` or ``none`` (a sequence:
    each value's row reaches the model, unpooled); empty: as its
    ``[variables]`` entry says (``variables.NAME.pooling``, then ``variables.default.pooling``,
    then sum). Written out, ``sum`` included, it is the variable's, and a ``[variables]`` entry
    of the variable's own name that says otherwise is refused."""
    weights: str = ""
    """A numeric list column parallel to this one: its values weigh the bag's signs."""

    def __post_init__(self) -> None:
        if self.transform not in ("none", "log1p", "standardize", "clip"):
            raise ValueError(
                f"transform must be none, log1p, standardize or clip, got {self.transform!r}"
            )
        if self.pooling and self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.transform == "clip":
            if len(self.bounds) != 2 or not self.bounds[0] <= self.bounds[1]:
                raise ValueError(
                    f"bounds must be [low, high] with low <= high for clip, got {list(self.bounds)}"
                )
        elif self.bounds:
            raise ValueError('bounds applies to transform = "clip" only')
        if self.stats and (
            self.transform != "standardize" or len(self.stats) != 2 or not self.stats[1] > 0
        ):
            raise ValueError(
                "stats must be [mean, std] with std > 0, for standardize only, got "
                f"{list(self.stats)}"
            )

    @property
    def is_dense_only(self) -> bool:
        """Whether a dense key is set (which a sparse column cannot take)."""
        return (self.transform, self.fill, self.bounds, self.stats) != ("none", 0.0, (), ())

    @property
    def is_sparse_only(self) -> bool:
        """Whether a sparse key is set (which a dense column cannot take)."""
        return (self.table, self.separator, self.pooling, self.weights) != ("", "", "", "")


@dataclass(frozen=True)
class LabelSpec:
    """One label: a column, and which of its values are positive.

    Without ``positive`` the column holds 0 and 1 (or true and false). ``positive`` is a
    comparison with a value: ``">= 4"`` for a rating, ``'== "yes"'`` for a string column.
    ``regression = true`` makes the column's numbers the target themselves (a model fits them
    with squared error and the report gives RMSE), not a binary label.
    """

    column: str
    """The label's column."""
    positive: str = ""
    """Which values are positive, as a comparison: ``">= 4"``, ``'== "yes"'``; empty: the
    column holds 0 and 1, or true and false."""
    regression: bool = False
    """The column's numbers are the target themselves (squared error; the report gives RMSE)."""

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise ValueError("column must name the label column")
        if self.regression and self.positive:
            raise ValueError(
                "positive makes a binary label of the column; a regression label takes its "
                "numbers as they are: give one of them"
            )
        if self.positive:
            self.rule()

    def rule(self) -> tuple[str, float | str] | None:
        """``(operator, value)`` of :attr:`positive` (a number, or a string for ``==``/``!=``),
        None without one."""
        if not self.positive:
            return None
        match = _RULE.fullmatch(self.positive)
        if match is None:
            raise ValueError(
                'positive must be a comparison such as ">= 4" or \'== "yes"\', got '
                f"{self.positive!r}"
            )
        op, text = match.groups()
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            value: float | str = text[1:-1]
        else:
            try:
                value = float(text)
            except ValueError:
                value = text
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"positive compares with a finite number, got {text!r}")
        if isinstance(value, str) and op not in ("==", "!="):
            raise ValueError(f"positive compares strings with == or != only, got {self.positive!r}")
        return op, value


@dataclass(frozen=True)
class FeatureSpec:
    """A ``[features]`` table, validated: labels, sparse and dense columns, per-column keys.

    Build it with :meth:`from_table` (a TOML table; errors name ``features.KEY``);
    :meth:`to_table` gives the table back, so a launcher hands hubs and checkpoints the spec as
    TOML or JSON.
    """

    labels: tuple[LabelSpec, ...]
    """The label columns, in the order :attr:`~sniper.data.Batch.labels` lists them: a
    column's name or a table each (below); ``label = "COLUMN"`` writes one."""
    sparse: tuple[str, ...] = ()
    """The sparse columns: named in ``sparse``, then those only ``[features.columns]`` gives a
    ``table``."""
    dense: tuple[str, ...] = ()
    """The dense columns, in the order :attr:`~sniper.data.Batch.dense` lists them."""
    columns: Mapping[str, ColumnSpec] = field(default_factory=dict)
    """``[features.columns.NAME]`` of the columns that have one."""
    skip_null_labels: bool = False
    """Drop a row whose label is null, where it would be an error naming the file and row."""

    def __post_init__(self) -> None:
        if not self.labels:
            raise ValueError('features: give label = "COLUMN" (or labels = [...])')
        if not self.sparse and not self.dense:
            raise ValueError("features: name at least one sparse or dense column")
        names = [label.column for label in self.labels]
        _unique("features.labels", names)
        _unique("features.sparse", self.sparse)
        _unique("features.dense", self.dense)
        for name in self.sparse:
            if name in self.dense:
                raise ValueError(f"features: column {name!r} is both sparse and dense")
        for name in (*self.sparse, *self.dense):
            if name in names:
                raise ValueError(f"features: column {name!r} is the label and a feature")
        for name, column in self.columns.items():
            where = f"features.columns.{name}"
            if name in self.sparse and column.is_dense_only:
                raise ValueError(
                    f"{where}: {name!r} is sparse; transform, fill, bounds and stats are for "
                    "dense columns"
                )
            if name in self.dense and column.is_sparse_only:
                raise ValueError(
                    f"{where}: {name!r} is dense; table, separator, pooling and weights are for "
                    "sparse columns"
                )
            if name not in self.sparse and name not in self.dense:
                raise ValueError(
                    f"{where}: {name!r} is neither in features.sparse nor in features.dense"
                )
            if column.table:
                owner = self.columns.get(column.table, ColumnSpec())
                if column.table not in self.sparse or owner.table:
                    raise ValueError(
                        f"{where}.table: {column.table!r} must be a sparse column with a "
                        "variable of its own"
                    )
            if column.weights and column.pooling == "none":
                raise ValueError(
                    f'{where}.weights: an unpooled column (pooling = "none") takes no weights'
                )
            if column.weights in (*self.sparse, *self.dense, *names):
                raise ValueError(
                    f"{where}.weights: {column.weights!r} is already a label or feature column"
                )
        for variable in self.variables:
            poolings = {
                self.column(c).pooling or "sum"
                for c in self.sparse
                if self.variable_of(c) == variable
            }
            if len(poolings) > 1:
                raise ValueError(
                    f"features: the columns of variable {variable!r} disagree on pooling "
                    f"({', '.join(sorted(poolings))}): the columns that share a table (its "
                    "columns' table key) are one bag, pooled one way; give them one pooling, "
                    "or each its own variable (a target item and its history: two variables)"
                )

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> FeatureSpec:
        """The spec of a ``[features]`` TOML table; every error names its key."""
        unknown = sorted(set(table) - set(_SPEC_KEYS))
        if unknown:
            raise ValueError(
                f"features: unknown key {unknown[0]!r}; known keys: {', '.join(_SPEC_KEYS)}"
            )
        if "label" in table and "labels" in table:
            raise ValueError("features: give label or labels, not both")
        raw = table.get("labels", [table["label"]] if "label" in table else [])
        if not isinstance(raw, list):
            raise ValueError(f"features.labels must be a list, got {raw!r}")
        labels = tuple(
            _label(f"features.label{'s' if 'labels' in table else ''}", item) for item in raw
        )
        columns_raw = table.get("columns", {})
        if not isinstance(columns_raw, Mapping):
            raise ValueError(f"features.columns must be a table, got {columns_raw!r}")
        columns = {}
        for name, value in columns_raw.items():
            where = f"features.columns.{name}"
            if not isinstance(value, Mapping):
                raise ValueError(f"{where} must be a table, got {value!r}")
            try:
                columns[str(name)] = from_mapping(ColumnSpec, value, where, prefix=f"{where}.")
            except ValueError as exc:
                text = str(exc)
                raise ValueError(text if text.startswith(where) else f"{where}.{text}") from None
        sparse = list(_names("features.sparse", table.get("sparse", [])))
        sparse += [name for name, column in columns.items() if column.table and name not in sparse]
        skip = table.get("skip_null_labels", False)
        if not isinstance(skip, bool):
            raise ValueError(f"features.skip_null_labels must be true or false, got {skip!r}")
        return cls(
            labels=labels,
            sparse=tuple(sparse),
            dense=_names("features.dense", table.get("dense", [])),
            columns=columns,
            skip_null_labels=skip,
        )

    def to_table(self) -> dict[str, Any]:
        """The ``[features]`` table of this spec (TOML and JSON values; defaults left out)."""
        labels = [
            label.column
            if not label.positive and not label.regression
            else {"column": label.column, "regression": True}
            if label.regression
            else {"column": label.column, "positive": label.positive}
            for label in self.labels
        ]
        table: dict[str, Any] = {"labels": labels} if len(labels) > 1 else {"label": labels[0]}
        table |= {"sparse": list(self.sparse), "dense": list(self.dense)}
        columns = {}
        for name, column in self.columns.items():
            values = {
                f.name: list(value) if isinstance(value, tuple) else value
                for f in dataclasses.fields(column)
                if (value := getattr(column, f.name)) != f.default
            }
            columns[name] = values
        if columns:
            table["columns"] = columns
        if self.skip_null_labels:
            table["skip_null_labels"] = True
        return table

    def column(self, name: str) -> ColumnSpec:
        """The settings of column ``name`` (the defaults if it has no table)."""
        return self.columns.get(name, _DEFAULT_COLUMN)

    def variable_of(self, column: str) -> str:
        """The variable sparse column ``column`` feeds: its ``table``, else its own name."""
        return self.column(column).table or column

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables, one per sparse column but shared ones once, in the columns' order."""
        return tuple(dict.fromkeys(self.variable_of(name) for name in self.sparse))

    @property
    def label_names(self) -> tuple[str, ...]:
        """The label columns' names, in order."""
        return tuple(label.column for label in self.labels)

    @property
    def regression_labels(self) -> tuple[str, ...]:
        """The names of the labels that are regression targets (``regression = true``)."""
        return tuple(label.column for label in self.labels if label.regression)

    def pooling_of(self, variable: str) -> str:
        """How ``variable``'s bag is pooled as these columns say: ``sum``, ``mean``, ``sqrtn`` or
        ``none`` (sum where none says; the job's ``[variables]`` may say otherwise then)."""
        return self.pooling_said(variable) or "sum"

    def pooling_said(self, variable: str) -> str:
        """The pooling a column of ``variable`` writes out, or empty where none does."""
        if variable not in self.variables:
            raise KeyError(
                f"no variable {variable!r} in the feature spec; it has {', '.join(self.variables)}"
            )
        said = (
            self.column(name).pooling for name in self.sparse if self.variable_of(name) == variable
        )
        return next((pooling for pooling in said if pooling), "")

    def with_stats(self, stats: Mapping[str, tuple[float, float]]) -> FeatureSpec:
        """This spec with ``standardize``'s ``[mean, std]`` of the columns in ``stats``."""
        columns = dict(self.columns)
        for name, (mean, std) in stats.items():
            columns[name] = dataclasses.replace(columns[name], stats=(mean, std))
        return dataclasses.replace(self, columns=columns)

    @property
    def needs_stats(self) -> tuple[str, ...]:
        """The ``standardize`` columns without ``stats``: a pass over the data measures them."""
        return tuple(
            name
            for name in self.dense
            if self.column(name).transform == "standardize" and not self.column(name).stats
        )


_DEFAULT_COLUMN = ColumnSpec()


def _label(key: str, item: object) -> LabelSpec:
    if isinstance(item, str):
        return LabelSpec(item)
    if isinstance(item, Mapping):
        unknown = sorted(set(item) - {"column", "positive", "regression"})
        if unknown:
            raise ValueError(
                f"{key}: unknown key {unknown[0]!r}; known keys: column, positive, regression"
            )
        regression = item.get("regression", False)
        if not isinstance(regression, bool):
            raise ValueError(f"{key}.regression must be true or false, got {regression!r}")
        try:
            return LabelSpec(item.get("column", ""), str(item.get("positive", "")), regression)
        except ValueError as exc:
            raise ValueError(f"{key}.{exc}") from None
    raise ValueError(
        f"{key} must be a column name or {{ column = ..., positive = ... }}, got {item!r}"
    )


def _names(key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{key} must be a list of column names, got {value!r}")
    return tuple(value)


def _unique(key: str, names: tuple[str, ...] | list[str]) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{key} names {name!r} twice")
        seen.add(name)
