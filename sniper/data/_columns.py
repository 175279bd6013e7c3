"""One Arrow chunk of a user's table into sniper's arrays, as a :class:`FeatureSpec` says.

Each function takes an Arrow array (a column of a chunk of rows) and returns numpy: signs and
offsets of a sparse column, float32 values of a dense column, 0/1 of a label. Every value is
checked here, with an error naming the file, the row and the column (:class:`TableError`);
the reader (:mod:`sniper.data._table_reader`) only streams chunks and cuts batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from sniper._hashing import feature_signs
from sniper.data._batch import Ragged
from sniper.data._features import ColumnSpec, LabelSpec

__all__ = [
    "TableError",
    "Where",
    "check_dense_type",
    "check_label_type",
    "check_sparse_type",
    "dense_values",
    "first_unparsed",
    "float64",
    "label_values",
    "sparse_signs",
]


class TableError(ValueError):
    """A user's table does not fit its feature spec; the message names file, row and column."""


@dataclass(frozen=True)
class Where:
    """Where a chunk lies: its file, and the file row of each of its rows (for errors)."""

    file: str
    rows: NDArray[np.int64]

    def row(self, index: int) -> int:
        """The file row (0-based, header excluded) of the chunk's row ``index``."""
        return int(self.rows[index])


def _is_sign_type(kind: Any) -> bool:
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or (pa.types.is_dictionary(kind) and _is_sign_type(kind.value_type))
    )


def check_sparse_type(file: str, name: str, kind: Any, column: ColumnSpec) -> None:
    """A sparse column must hold integers or strings, one or a list per row."""
    inner = kind
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = kind.value_type
    if not _is_sign_type(inner):
        raise TableError(
            f"{file}: column {name!r} is {kind}, which cannot be a sign: a sparse column holds "
            "integers or strings, one or a list (list<...>, large_list<...>) per row"
        )
    if column.separator and inner is kind and not _is_sign_type(kind):
        raise TableError(f"{file}: column {name!r} has a separator but is {kind}, not text")


def check_dense_type(file: str, name: str, kind: Any) -> None:
    """A dense column must hold numbers (or booleans)."""
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise TableError(
            f"{file}: dense column {name!r} is {kind}: dense features are numbers (put a "
            "string column in features.sparse)"
        )


def check_label_type(file: str, label: LabelSpec, kind: Any) -> None:
    """A label is numeric or boolean; a string label needs ``positive``."""
    text = (
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind)
    )
    if text and label.regression:
        raise TableError(
            f"{file}: regression label column {label.column!r} holds strings: a target is a number"
        )
    if text and not label.positive:
        raise TableError(
            f"{file}: label column {label.column!r} holds strings; say which are positive: "
            f'label = {{ column = "{label.column}", positive = \'== "yes"\' }}'
        )
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    if not (text or numeric):
        raise TableError(
            f"{file}: label column {label.column!r} is {kind}: labels are numbers, booleans "
            "or strings"
        )
    rule = label.rule()
    if numeric and rule is not None and isinstance(rule[1], str):
        raise TableError(
            f"{file}: label column {label.column!r} holds numbers, but positive compares "
            f"with the string {rule[1]!r}"
        )


def sparse_signs(
    variable: str, array: Any, column: ColumnSpec
) -> tuple[Ragged, tuple[NDArray[np.bool_], NDArray[np.int64]]]:
    """A sparse column's bags as ``(signs, offsets)`` in ``variable``'s salt, and which of
    its values became signs with each row's count of values before (:func:`bag_weights`
    drops the same ones).

    A null row is an empty bag; a null or (for delimited text) empty value is dropped.
    """
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if column.separator and not (
        pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    ):
        array = pc.split_pattern(array, column.separator)
    size = len(array)
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
        values = array.flatten()
    else:
        lengths = np.ones(size, dtype=np.int64)
        values = array
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    keep = np.ones(len(values), dtype=bool)
    if values.null_count:
        keep &= values.is_valid().to_numpy(zero_copy_only=False)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = pc.cast(values, pa.string())  # an integer's sign is its decimal text's
    data, starts = _utf8(values)
    if column.separator:
        keep &= starts[1:] > starts[:-1]
    signs = feature_signs(variable, data, starts)
    lengths = np.asarray(lengths, dtype=np.int64)
    counts = lengths
    if not keep.all():
        signs = signs[keep]
        rows = np.repeat(np.arange(size), lengths)
        lengths = np.bincount(rows[keep], minlength=size).astype(np.int64)
    offsets = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return (signs, offsets), (keep, counts)


def bag_weights(
    name: str, weights_name: str, array: Any, kept: tuple[Any, Any], where: Where
) -> NDArray[np.float32]:
    """The weights column of sparse column ``name``: a list of finite numbers per row, as long
    as the row's list of values; the weights of dropped values (``kept``: the values' keep
    mask and each row's count of values before dropping) go with them."""
    keep, counts = kept
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise TableError(
            f"{where.file}: weights column {weights_name!r} is {array.type}: weights are a "
            f"list of numbers parallel to column {name!r}'s"
        )
    values = array.flatten()
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise TableError(
            f"{where.file}: weights column {weights_name!r} is {array.type}: weights are numbers"
        )
    mine = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
    differ = np.flatnonzero(np.asarray(mine, dtype=np.int64) != counts)
    if differ.size:
        row = int(differ[0])
        raise TableError(
            f"{where.file}: row {where.row(row)}: weights column {weights_name!r} has "
            f"{int(mine[row])} values where column {name!r} has {int(counts[row])}"
        )
    flat = pc.fill_null(float64(values), np.nan).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(~np.isfinite(flat))
    if bad.size:
        row = int(np.repeat(np.arange(len(counts)), counts)[bad[0]])
        raise TableError(
            f"{where.file}: row {where.row(row)}: weights column {weights_name!r} holds a "
            "null, NaN or Inf"
        )
    return np.asarray(flat[keep], dtype=np.float32)


def float64(array: Any) -> Any:
    """``array`` (numbers, booleans or text) as float64. An integer beyond ``2**53`` becomes
    the nearest float, where Arrow's safe cast refuses it naming no file, row or column: a
    dense value is a number for the model, which takes float32 anyway, and a label or weight
    that large is refused by its own check. Text that is no number raises ``ArrowInvalid``."""
    return pc.cast(array, pa.float64(), safe=False)


def first_unparsed(text: Any) -> int:
    """The index of the first value of ``text`` (strings, some of which Arrow cannot parse
    as float64) that it cannot parse: halves ``text`` while the first half fails, then the
    second, so finding it costs as much as two casts of ``text``, not a cast per value."""
    start, stop = 0, len(text)
    while stop - start > 1:
        middle = (start + stop) // 2
        try:
            pc.cast(text.slice(start, middle - start), pa.float64())
        except pa.ArrowInvalid:
            stop = middle
        else:
            start = middle
    return start


def dense_values(name: str, array: Any, column: ColumnSpec, where: Where) -> NDArray[np.float64]:
    """A dense column as float64: nulls take ``fill``; NaN or Inf in the file is refused
    naming the row; then the transform (``stats`` must be resolved for ``standardize``)."""
    valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
    values = pc.fill_null(float64(array), 0.0).to_numpy(zero_copy_only=False)
    values = np.array(values, dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TableError(
            f"{where.file}: row {where.row(row)}: column {name!r} is {values[row]}: dense "
            "values must be finite (a missing value is a null, which takes fill)"
        )
    if valid is not None:
        values[~valid] = column.fill
    return transformed(name, values, column, where)


FLOAT32_MAX = float(np.finfo(np.float32).max)


def model_input(name: str, values: NDArray[np.float64], where: Where) -> NDArray[np.float64]:
    """``values`` (a dense column after its fill and transform), refused where one lies beyond
    float32's range: the dense model takes float32, where it would become an infinity."""
    beyond = np.flatnonzero(np.abs(values) > FLOAT32_MAX)
    if beyond.size:
        row = int(beyond[0])
        raise TableError(
            f"{where.file}: row {where.row(row)}: column {name!r} is {values[row]:g} after its "
            f"fill and transform, beyond float32's range (±{FLOAT32_MAX:.3g}), which the dense "
            'model takes: scale it (transform = "standardize" or "log1p") or clip it'
        )
    return values


def transformed(
    name: str, values: NDArray[np.float64], column: ColumnSpec, where: Where
) -> NDArray[np.float64]:
    """``values`` after ``column``'s transform."""
    if column.transform == "log1p":
        low = np.flatnonzero(values <= -1)
        if low.size:
            row = int(low[0])
            raise TableError(
                f"{where.file}: row {where.row(row)}: column {name!r} is {values[row]}: log1p "
                "takes values above -1"
            )
        return np.log1p(values)
    if column.transform == "standardize":
        mean, std = column.stats
        return (values - mean) / std
    if column.transform == "clip":
        return np.clip(values, column.bounds[0], column.bounds[1])
    return values


def label_values(label: LabelSpec, array: Any, where: Where) -> NDArray[np.float32]:
    """A label column as 0.0/1.0, or a regression label's finite values; NaN where it is null
    (training and evaluation drop or refuse such rows before: ``sniper predict`` keeps them,
    writing their truth as null)."""
    if not array.null_count:
        return _present_label_values(label, array, where)
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    values = np.full(len(array), np.nan, dtype=np.float32)
    present = Where(where.file, where.rows[valid])
    values[valid] = _present_label_values(label, array.filter(pa.array(valid)), present)
    return values


def _present_label_values(label: LabelSpec, array: Any, where: Where) -> NDArray[np.float32]:
    """:func:`label_values` of a column without nulls."""
    rule = label.rule()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if label.regression:
        return _regression_values(label, array, where)
    if rule is None:
        values = float64(array).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero((values != 0) & (values != 1))
        if bad.size:
            row = int(bad[0])
            raise TableError(
                f"{where.file}: row {where.row(row)}: label column {label.column!r} is "
                f"{values[row]}: labels are 0 or 1; say which are positive: label = "
                f'{{ column = "{label.column}", positive = "{_positive_for(values[row])}" }}'
            )
        return np.asarray(values, dtype=np.float32)
    op, value = rule
    if isinstance(value, float):
        array = _label_numbers(label, array, where)
    compare = {
        ">=": pc.greater_equal,
        "<=": pc.less_equal,
        ">": pc.greater,
        "<": pc.less,
        "==": pc.equal,
        "!=": pc.not_equal,
    }[op]
    result = compare(array, pa.scalar(value))
    return np.asarray(result.to_numpy(zero_copy_only=False), dtype=np.float32)


def _positive_for(value: float) -> str:
    """A ``positive`` rule to suggest for a label of ``value``, neither 0 nor 1: ``> 0`` for
    labels of -1 and 1, ``>= 0.5`` for a probability, ``>= 4`` for a rating."""
    if value < 0:
        return "> 0"
    return ">= 0.5" if value < 1 else ">= 4"


def _label_numbers(label: LabelSpec, array: Any, where: Where) -> Any:
    """A label column compared with a number, as float64: a value that is not a number, or
    NaN or Inf (which no comparison should silently make a 0 or a 1), is refused, naming its
    file, row and column."""
    numbers = _label_as_numbers(
        label, array, where, f"which positive = {label.positive!r} cannot compare with a number"
    )
    bad = np.flatnonzero(~np.isfinite(numbers.to_numpy(zero_copy_only=False)))
    if bad.size:
        row = int(bad[0])
        raise TableError(
            f"{where.file}: row {where.row(row)}: label column {label.column!r} is "
            f"{numbers[row].as_py()}: a label compared with a number must be finite"
        )
    return numbers


def _label_as_numbers(label: LabelSpec, array: Any, where: Where, why: str) -> Any:
    """A label column cast to float64 as Arrow parses numbers; a value it cannot parse is
    refused, naming its file, row and column and ``why`` it had to be a number."""
    try:
        return float64(array)
    except pa.ArrowInvalid:
        row = first_unparsed(array)
    raise TableError(
        f"{where.file}: row {where.row(row)}: label column {label.column!r} is "
        f"{array[row].as_py()!r}, {why}"
    )


def _regression_values(label: LabelSpec, array: Any, where: Where) -> NDArray[np.float32]:
    """A regression label's values as float32; a value that is not a finite number is
    refused, naming its file, row and column."""
    numbers = _label_as_numbers(label, array, where, "and a regression target is a number")
    values: NDArray[np.float32] = numbers.to_numpy(zero_copy_only=False).astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row = int(bad[0])
        raise TableError(
            f"{where.file}: row {where.row(row)}: regression label column {label.column!r} "
            f"is {values[row]}: a target must be a finite number"
        )
    return values


def _utf8(values: Any) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """A string array's bytes and offsets (rebased to its slice), as numpy views."""
    if pa.types.is_string(values.type):
        offset_type: Any = np.int32
    else:
        offset_type = np.int64
    buffers = values.buffers()
    size = len(values)
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[values.offset : values.offset + size + 1]
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    return data, offsets.astype(np.int64)
