"""``sniper data inspect``: what a user's table holds, and a ``[features]`` table to start from.

The suggestion is a guess from the types, for the user to edit: strings, lists of integers or
strings, and integers named like ids (``user_id``) or too large to be numbers (beyond
``2**53`` in the rows read: hashed ids) become sparse columns (one variable each), other
numbers and booleans dense ones, and the label is the first column named like one (a name of
:data:`_LABEL_NAMES`, such as ``label``, ``click`` or ``rating``, then one that begins with
``label_`` or ``target_`` or ends with ``_label`` or ``_target``), else the first boolean
column. Every other column named like a label is no feature either: a second target (a
multi-label table's ``buy`` beside ``click``, a ``rating`` beside a ``click``) as a feature
would hand the model its answer, so the suggestion names them in a comment, for the user to add
to ``labels`` (or to ``dense``, a value known before the outcome). A target under a name of
no list (``made_purchase``) cannot be told from a flag (``is_mobile``), so beside a label
every dense column of only 0 and 1 in the rows read is named in a comment as well. Columns it
cannot use (floats in lists, structs, timestamps) are left out, and said so in a comment.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sniper.data._files import TABLE_KINDS, expand_paths, table_files

__all__ = ["inspect_table", "suggest_features"]

_LABEL_NAMES = (
    "label",
    "labels",
    "clicked",
    "click",
    "is_click",
    "is_clicked",
    "target",
    "y",
    "rating",
    "converted",
    "conversion",
    "is_converted",
    "buy",
    "bought",
    "is_buy",
    "purchased",
    "purchase",
    "is_purchase",
    "is_purchased",
    "liked",
    "is_liked",
    "ordered",
    "favorited",
    "add_to_cart",
    "added_to_cart",
)
"""Names of a target, the first found (in this order) the suggested label; the README's
tables' labels among them. Only names that say an outcome happened: ``clicks`` or
``orders`` are as often counts of the past, features."""
_LABEL_AFFIXES = ("label", "target")
"""A name that begins or ends with one of these (``label_buy``, ``ctr_target``) is a target's
too, unless it names an id (``target_item_id`` is a feature)."""


def inspect_table(data: str | Path) -> str:
    """A report of a Parquet, CSV or TSV table: its columns and types, rows, row groups
    (Parquet), and a suggested ``[features]`` table (TOML that parses).

    ``data`` is what training reads: a file, a directory or a glob, as ``parquet:PATH``,
    ``csv:PATH`` or ``tsv:PATH`` (:func:`~sniper.data._files.table_files`' files), or a bare
    path whose files' suffix says the format (a directory's ``*.parquet`` files, else its
    ``*.csv``, else its ``*.tsv``, else all of them). The columns and the suggestion are the
    first file's; Parquet's rows and row groups count every file (their footers), CSV's the
    first file's; a file whose columns differ from the first's is named, as training would
    refuse it.
    """
    kind, files = _table(str(data))
    first = files[0]
    lines = [f"file: {first}"] if len(files) == 1 else [f"files: {len(files):,}, first {first}"]
    if kind == "parquet":
        schema, sample, summary = _parquet(files)
    else:
        schema, sample, summary = _csv(files, kind)
    lines.append(f"format: {kind}, {summary}")
    lines += _differing(files, schema, kind)
    lines.append("columns:")
    width = max((len(name) for name in schema.names), default=0)
    lines += [f"  {field.name:<{width}}  {field.type}" for field in schema]
    lines += ["", "suggested [features] table (edit it; a guess from the types):", ""]
    lines.append(suggest_features(schema, sample, csv=kind != "parquet"))
    return "\n".join(lines)


_SUFFIXES = (("parquet", ".parquet"), ("csv", ".csv"), ("tsv", ".tsv"))
"""A bare directory's tables, by preference: Spark's and others' part files beside their
``_SUCCESS`` marker are read by suffix."""


def _table(data: str) -> tuple[str, list[Path]]:
    """The format and files of ``data`` (see :func:`inspect_table`)."""
    kind, colon, path = data.partition(":")
    if colon and kind in TABLE_KINDS:
        return kind, table_files(kind, path)
    if Path(data).is_dir():
        for kind, suffix in _SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                return kind, expand_paths(data, "table", suffix)
    files = expand_paths(data, "table")
    suffix = files[0].suffix
    kind = "tsv" if suffix == ".tsv" else "csv" if suffix in (".csv", ".txt") else "parquet"
    return kind, files


def _parquet(files: list[Path]) -> tuple[Any, Any, str]:
    """The first file's schema and first row group, and the rows and row groups of all."""
    rows = groups = 0
    for file in files:
        meta = _footer(file)
        rows += meta.num_rows
        groups += meta.num_row_groups
    parquet = pq.ParquetFile(files[0])
    schema = parquet.schema_arrow
    sample = parquet.read_row_group(0) if parquet.num_row_groups else schema.empty_table()
    return schema, sample, f"{rows:,} rows in {groups:,} row groups"


def _footer(file: Path) -> Any:
    try:
        return pq.read_metadata(file)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{file}: not a Parquet, CSV or TSV file: {exc}") from None


def _csv(files: list[Path], kind: str) -> tuple[Any, Any, str]:
    """The first file, read whole: its schema as pyarrow guesses it, and its rows."""
    table = _read_csv(files[0], kind, whole=True)
    rows = f"{table.num_rows:,} rows"
    return table.schema, table, rows if len(files) == 1 else f"{rows} in the first file"


def _read_csv(file: Path, kind: str, *, whole: bool) -> Any:
    """``file`` read whole (a table), or its header and the types guessed from its first block
    (a schema); pyarrow's error is one naming the file."""
    options = pacsv.ParseOptions(delimiter="\t" if kind == "tsv" else ",")
    try:
        if whole:
            return pacsv.read_csv(file, parse_options=options)
        with pacsv.open_csv(file, parse_options=options) as stream:
            return stream.schema
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{file}: not {kind.upper()} with a header row: {exc}") from None


def _differing(files: list[Path], schema: Any, kind: str) -> list[str]:
    """A line naming the first file whose columns (Parquet: and types) differ from the
    first file's ``schema``, if one does."""
    for file in files[1:]:
        if kind == "parquet":
            same = _footer(file).schema.to_arrow_schema().equals(schema)
        else:
            same = _read_csv(file, kind, whole=False).names == schema.names
        if not same:
            return [
                f"differs: {file} has other columns or types than {files[0]} (training reads "
                "files of one schema; inspect it alone to see its own)"
            ]
    return []


def suggest_features(schema: Any, sample: Any, *, csv: bool = False) -> str:
    """The TOML of a ``[features]`` table for ``schema`` (``sample``: rows to take a string
    label's positive value from, and to tell ids by their size); ``csv``: ``schema`` is
    pyarrow's guess from CSV or TSV text, whose integers beyond ``2**63`` it guesses doubles."""
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
            if inner is kind and pa.types.is_integer(kind) and not _is_id(field.name, sample):
                dense.append(field.name)
            else:
                sparse.append(field.name)
        elif csv and pa.types.is_floating(kind) and _hashed(sample.column(field.name), whole=True):
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
    flags = [name for name in dense if label is not None and _zero_one(sample.column(name))]
    if flags:
        lines.append(
            f"# dense columns of only 0 and 1 here: {', '.join(flags)} (if one is an outcome, "
            "a second target, move it to labels: as a feature it hands the model its answer)"
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


def _zero_one(column: Any) -> bool:
    """Whether the sampled ``column`` (numbers or booleans) holds 0 and 1 and nothing else."""
    values = pc.unique(column.drop_null()).to_pylist()
    return len(values) == 2 and {float(v) for v in values} == {0.0, 1.0}


def _named_like_a_label(name: str) -> bool:
    """Whether ``name`` is a target's (:data:`_LABEL_NAMES`, :data:`_LABEL_AFFIXES`)."""
    lowered = name.lower()
    if lowered in _LABEL_NAMES:
        return True
    return not _is_id(name) and any(
        lowered.startswith(f"{affix}_") or lowered.endswith(f"_{affix}") for affix in _LABEL_AFFIXES
    )


def _is_id(name: str, sample: Any = None) -> bool:
    """Whether an integer column ``name`` holds ids: its name says so, or (in ``sample``)
    its values are too large to be numbers (:func:`_hashed`) and its name is no time's (a
    time in nanoseconds is beyond ``2**53`` too, and as ids would be a sign per event)."""
    lowered = name.lower()
    if lowered.endswith(("id", "_code", "code", "zip")) or lowered in ("user", "item"):
        return True
    timely = lowered.endswith(("time", "timestamp", "_ts", "_at", "date")) or lowered == "ts"
    return sample is not None and not timely and _hashed(sample.column(name))


EXACT = 2**53
"""The integers a float64 holds exactly: a column with values beyond it (either side) is of
ids, 64-bit hashes most often, not of numbers for a model, whose float32 would merge them."""


def _hashed(values: Any, *, whole: bool = False) -> bool:
    """Whether some of ``values`` lie beyond :data:`EXACT`; ``whole``: and all are whole
    numbers (a column of floats that are integers too large for int64, as CSV guesses
    them)."""
    low, high = pc.min_max(values).values()
    if low.as_py() is None or max(-low.as_py(), high.as_py()) <= EXACT:
        return False
    return not whole or bool(pc.all(pc.equal(values, pc.floor(values))).as_py())


def _q(text: str) -> str:
    """``text`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)
