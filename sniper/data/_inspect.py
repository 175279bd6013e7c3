"""``sniper data inspect``: what a user's file holds, and a ``[features]`` table to start from.

The suggestion is a guess from the types alone, for the user to edit: integers, strings and
lists of them become sparse columns (one variable each), other numbers dense ones, and the
label is the first column named like one (a name of :data:`_LABEL_NAMES`, such as ``label``,
``click`` or ``rating``, then one that begins with ``label_`` or ``target_`` or ends with
``_label`` or ``_target``), else the first boolean column. Every other column named like a
label is no feature either: a second target (a multi-label table's ``buy`` beside ``click``, a
``rating`` beside a ``click``) as a feature would hand the model its answer, so the suggestion
names them in a comment, for the user to add to ``labels`` (or to ``dense``, a value known
before the outcome). Columns it cannot use (floats in lists, structs, timestamps) are left
out, and said so in a comment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

__all__ = ["inspect_table", "suggest_features"]

_LABEL_NAMES = (
    "label",
    "labels",
    "clicked",
    "click",
    "target",
    "y",
    "rating",
    "converted",
    "conversion",
    "buy",
    "purchased",
    "purchase",
    "liked",
)
"""Names of a target, the first found (in this order) the suggested label; the README's
tables' labels among them."""
_LABEL_AFFIXES = ("label", "target")
"""A name that begins or ends with one of these (``label_buy``, ``ctr_target``) is a target's
too, unless it names an id (``target_item_id`` is a feature)."""


def inspect_table(path: str | Path) -> str:
    """A report of the Parquet, CSV or TSV file at ``path``: its columns and types, rows, row
    groups (Parquet), and a suggested ``[features]`` table (TOML that parses)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{str(file)!r} is not a file")
    lines = [f"file: {file}"]
    if file.suffix in (".csv", ".tsv", ".txt"):
        delimiter = "\t" if file.suffix == ".tsv" else ","
        table = pacsv.read_csv(file, parse_options=pacsv.ParseOptions(delimiter=delimiter))
        schema, sample = table.schema, table
        lines.append(f"format: {'tsv' if delimiter == chr(9) else 'csv'}, {table.num_rows:,} rows")
    else:
        try:
            parquet = pq.ParquetFile(file)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{file}: not a Parquet, CSV or TSV file: {exc}") from None
        meta = parquet.metadata
        schema = parquet.schema_arrow
        sample = parquet.read_row_group(0) if meta.num_row_groups else schema.empty_table()
        lines.append(f"format: parquet, {meta.num_rows:,} rows in {meta.num_row_groups} row groups")
    lines.append("columns:")
    width = max((len(name) for name in schema.names), default=0)
    lines += [f"  {field.name:<{width}}  {field.type}" for field in schema]
    lines += ["", "suggested [features] table (edit it; a guess from the types):", ""]
    lines.append(suggest_features(schema, sample))
    return "\n".join(lines)


def suggest_features(schema: Any, sample: Any) -> str:
    """The TOML of a ``[features]`` table for ``schema`` (``sample``: rows to take a string
    label's positive value from)."""
    label = _label(schema)
    others = [str(n) for n in schema.names if n != label and _named_like_a_label(str(n))]
    sparse, dense, skipped = [], [], []
    for field in schema:
        if field.name == label or field.name in others:
            continue
        kind = field.type
        inner = kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else kind
        if pa.types.is_dictionary(inner):
            inner = inner.value_type
        if (
            pa.types.is_integer(inner)
            or pa.types.is_string(inner)
            or pa.types.is_large_string(inner)
        ):
            if inner is kind and pa.types.is_integer(kind) and not _is_id(field.name):
                dense.append(field.name)
            else:
                sparse.append(field.name)
        elif inner is kind and (pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            dense.append(field.name)
        else:
            skipped.append(f"{field.name} ({kind})")
    lines = ["[features]"]
    if label is None:
        lines.append('label = "LABEL_COLUMN"  # no column looks like a label: name yours')
    else:
        kind = schema.field(label).type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            values = [v for v in sample.column(label).to_pylist() if v is not None]
            first = values[0] if values else "yes"
            lines.append(f"label = {{ column = {_q(label)}, positive = {_q('== ' + _q(first))} }}")
        elif pa.types.is_boolean(kind):
            lines.append(f"label = {_q(label)}")
        else:
            lines.append(f'label = {_q(label)}  # 0/1, or {{ column = ..., positive = ">= 4" }}')
    lines.append(f"sparse = [{', '.join(map(_q, sparse))}]")
    lines.append(f"dense = [{', '.join(map(_q, dense))}]")
    if others:
        lines.append(
            f"# named like labels, so not features: {', '.join(others)} (a second target: "
            "add it to labels; a value known before the outcome: to dense)"
        )
    if skipped:
        lines.append(f"# not used (no sign or number): {', '.join(skipped)}")
    return "\n".join(lines)


def _label(schema: Any) -> str | None:
    """The suggested label: see the module doc."""
    lowered: dict[str, str] = {str(name).lower(): str(name) for name in schema.names}
    for name in _LABEL_NAMES:
        if name in lowered:
            return lowered[name]
    named = [name for name in lowered.values() if _named_like_a_label(name)]
    if named:
        return named[0]
    booleans = [str(f.name) for f in schema if pa.types.is_boolean(f.type)]
    return booleans[0] if booleans else None


def _named_like_a_label(name: str) -> bool:
    """Whether ``name`` is a target's (:data:`_LABEL_NAMES`, :data:`_LABEL_AFFIXES`)."""
    lowered = name.lower()
    if lowered in _LABEL_NAMES:
        return True
    return not _is_id(name) and any(
        lowered.startswith(f"{affix}_") or lowered.endswith(f"_{affix}") for affix in _LABEL_AFFIXES
    )


def _is_id(name: str) -> bool:
    lowered = name.lower()
    return lowered.endswith(("id", "_code", "code", "zip")) or lowered in ("user", "item")


def _q(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)
