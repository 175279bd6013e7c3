"""CSV and TSV text read as the values a Parquet file of the same rows holds.

CSV has text and no types; a table's CSV must still give the signs and numbers its Parquet
gives, or a model trained on one and scored on the other is silently wrong. Every column a
spec reads is parsed as text, and:

- An **unquoted empty field is null** (missing); nothing else is. A quoted empty field,
  ``""``, is the empty string, as pyarrow's ``write_csv`` and PostgreSQL's ``COPY ... CSV``
  write a table's empty strings (and its nulls as empty fields). pyarrow's own default made
  ``""`` null too, and ``NA`` or ``null``, quoted or not: a Parquet ``""`` or ``"NA"`` had a
  sign that the same row's CSV read as an empty bag.
- A **sparse** value is its text, exactly: ``""``, ``NA`` and ``null`` have a sign each, as
  those strings in Parquet do, and an integer's sign is its decimal text's in both formats
  (a hashed id beyond ``2**63``, which pyarrow would guess a double, too).
- A **dense or label** value is a number: empty (quoted or not) or one of pyarrow's words
  for null (:data:`NULL_WORDS`: ``NA``, ``null``, ``NaN``, ...) is null, which a dense
  column's ``fill`` takes; one of its words for true or false (:data:`TRUE_WORDS`,
  :data:`FALSE_WORDS`) is 1 or 0, as a Parquet boolean column reads; other text is a number
  as Arrow parses it, spaces around it allowed, or an error naming file, row and column.
  A label of strings (``positive = '== "yes"'``) keeps its text, its null words null.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from sniper.data._columns import TableError, Where, first_unparsed

__all__ = ["FALSE_WORDS", "NULL_WORDS", "TRUE_WORDS", "as_numbers", "as_text", "convert_options"]

_DEFAULTS = pacsv.ConvertOptions()
NULL_WORDS: tuple[str, ...] = tuple(_DEFAULTS.null_values)
"""Text a dense or label column reads as null: pyarrow's CSV defaults (the empty field,
``NA``, ``null``, ``NaN``, ``N/A``, ...), the missing values of pandas, R and spreadsheets."""
TRUE_WORDS: tuple[str, ...] = tuple(_DEFAULTS.true_values)
FALSE_WORDS: tuple[str, ...] = tuple(_DEFAULTS.false_values)


def convert_options(columns: list[str]) -> Any:
    """pyarrow's options that parse ``columns`` as text, an unquoted empty field null and
    nothing else (see the module doc)."""
    return pacsv.ConvertOptions(
        include_columns=columns,
        column_types=dict.fromkeys(columns, pa.string()),
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )


def as_text(array: Any) -> Any:
    """A label column of strings: its text, :data:`NULL_WORDS` null."""
    return pc.if_else(pc.is_in(array, pa.array(NULL_WORDS)), pa.scalar(None, pa.string()), array)


def as_numbers(name: str, array: Any, where: Where) -> Any:
    """A dense or label column's text as float64 (see the module doc); text that is no number
    is refused, naming the file, its row and ``name``."""
    text = as_text(array)
    try:
        return pc.cast(text, pa.float64())
    except pa.ArrowInvalid:
        pass  # rarer forms, which a second pass handles: spaces, true and false, or an error
    text = pc.utf8_trim_whitespace(text)
    text = pc.if_else(pc.is_in(text, pa.array(TRUE_WORDS)), "1", text)
    text = pc.if_else(pc.is_in(text, pa.array(FALSE_WORDS)), "0", text)
    text = as_text(text)
    try:
        return pc.cast(text, pa.float64())
    except pa.ArrowInvalid:
        row = first_unparsed(text)
    raise TableError(
        f"{where.file}: row {where.row(row)}: column {name!r} is {array[row].as_py()!r}: a "
        "number was expected (true and false are 1 and 0; an empty field, NA or null is null)"
    )
