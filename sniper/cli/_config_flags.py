"""A flag for every field of a config dataclass, typed by its annotation and explained by its
attribute docstring.

Config classes are the single declaration of a key: its type, its default, its docstring.
``sniper train`` and ``sniper serve`` read them from a TOML file (``--config``), and this
module turns each field ``name`` into ``--name`` (underscores as dashes) with no default of its
own, so that only the flags a user gives override the file. A command's hand-written flags
come first and win: a field that already has a flag (a stricter type, a short help written for
the command line) gets no second one.

Annotations map to flags as the TOML values they stand for: ``int``, ``float`` and ``str`` as
themselves, ``bool`` as ``--name``/``--no-name``, a ``Literal`` as its choices, ``tuple[T, ...]``
as comma-separated values, and a table (``dict``) as a TOML inline table
(``--variables '{default = {dim = 8}}'``). The values are checked again, with the file's,
when the config is built (``sniper._config.load_config``): an error names the key either way.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import re
import textwrap
import tomllib
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

__all__ = ["add_config_flags", "attribute_docs", "config_overrides"]


def add_config_flags(parser: argparse.ArgumentParser, config_class: type, title: str) -> None:
    """Add ``--field-name`` for each field of the dataclass ``config_class`` that ``parser``
    has no flag for yet, in an argument group named ``title``; each defaults to None."""
    hints = typing.get_type_hints(config_class)
    docs = attribute_docs(config_class)
    taken = {action.dest for action in parser._actions}
    group = parser.add_argument_group(title)
    for field in dataclasses.fields(config_class):
        flag = "--" + field.name.replace("_", "-")
        if field.name in taken or flag in parser._option_string_actions:
            continue
        group.add_argument(
            flag,
            default=None,
            help=_help(docs.get(field.name, ""), _default_of(field)),
            **_argument(field.name, hints[field.name]),
        )


def config_overrides(config_class: type, args: argparse.Namespace) -> dict[str, Any]:
    """The values ``args`` holds for the fields of ``config_class`` (None where no flag was
    given): the overrides ``load_config`` applies over the TOML file."""
    return {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(config_class)
        if hasattr(args, f.name)
    }


def attribute_docs(config_class: type) -> dict[str, str]:
    """The docstring under each field of ``config_class`` and its bases (a subclass's wins),
    read from their source: Python keeps no attribute docstrings at run time."""
    docs: dict[str, str] = {}
    for klass in reversed(config_class.__mro__):
        docs.update(_own_attribute_docs(klass))
    return docs


@functools.cache
def _own_attribute_docs(klass: type) -> dict[str, str]:
    """The string literal after each annotated assignment in the body of ``klass`` itself."""
    if not dataclasses.is_dataclass(klass):
        return {}
    try:
        source = inspect.getsource(klass)
    except (OSError, TypeError):  # no source file (a frozen or generated class)
        return {}
    (node,) = ast.parse(textwrap.dedent(source)).body
    assert isinstance(node, ast.ClassDef)
    docs: dict[str, str] = {}
    for statement, following in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
_SENTENCE_END = re.compile(r"(?<=\.)\s+(?=[A-Z])")


def _help(doc: str, default: str) -> str:
    """The first sentence of a field's docstring as plain text (reST roles and literals
    unwrapped, ``%`` escaped for argparse), then the field's default: the rest of a long
    docstring is for the reader of the code or the TOML reference, not for ``--help``."""
    text = _SENTENCE_END.split(" ".join(doc.split()), maxsplit=1)[0]
    text = _ROLE.sub(lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], text)
    text = text.replace("``", "").replace("%", "%%")
    return f"{text} (default {default})" if text else f"default {default}"


def _default_of(field: dataclasses.Field[Any]) -> str:
    """A field's default as it would be spelled on the command line (strings quoted)."""
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        value = field.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, str | dict):
        return json.dumps(value).replace("%", "%%")
    return str(value)


def _argument(name: str, annotation: Any) -> dict[str, Any]:
    """``add_argument``'s keywords for a field annotated ``annotation``."""
    origin, params = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        present = [p for p in params if p is not type(None)]
        if len(present) == 1:  # Optional[T]: the flag gives a T
            return _argument(name, present[0])
    elif annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    elif annotation in (int, float, str):
        return {"type": annotation, "metavar": name.upper()}
    elif origin is Literal:
        return {"type": type(params[0]), "choices": params}
    elif origin is tuple and len(params) == 2 and params[1] is Ellipsis:
        return {"type": _comma_separated(params[0]), "metavar": "A,B,..."}
    elif origin is dict:
        return {"type": _toml_table, "metavar": "'{KEY = VALUE, ...}'"}
    raise TypeError(f"no flag for {name}: its type {annotation!r} has no command-line form")


def _comma_separated(item: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    """An argument type: ``64,32`` as ``(64, 32)`` of ``item``s."""

    def parse(text: str) -> tuple[Any, ...]:
        try:
            return tuple(item(part.strip()) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated values, got {text!r}"
            ) from None

    return parse


def _toml_table(text: str) -> dict[str, Any]:
    """An argument type: a TOML inline table, ``{ps = {num_cpus = 2}}``."""
    try:
        table: dict[str, Any] = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a TOML inline table: {exc}") from None
    if not isinstance(table, dict):
        raise argparse.ArgumentTypeError(f"expected a TOML inline table, got {text!r}")
    return table
