"""``docs/config.md``: every config key, generated from the config classes.

Each key is a dataclass field whose type, default and docstring are its one declaration (the
CLI flags come from the same fields, :mod:`sniper.cli._config_flags`); this module writes them
out as a reference, grouped by the class that declares them, so the reference cannot drift
from the code. ``python -m sniper.cli._config_docs`` rewrites the file;
``tests/cli/test_config_docs.py`` fails when it is stale.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from sniper.cli._config_flags import attribute_docs

__all__ = ["CONFIG_DOCS", "render"]

CONFIG_DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")

_HEADER = """\
# Configuration keys

Every key of a training config (`sniper train --config job.toml`) and of a server config
(`sniper serve --config server.toml`), with its type, its default and what it means. Each is
also a flag (`--batch-size`, `--max-inflight-mb`...) that overrides the file.

Generated from the config classes' fields and docstrings by
`python -m sniper.cli._config_docs`; do not edit by hand (a test fails when it is stale).
"""


def _configs() -> list[tuple[str, type, str]]:
    """(title, class, what it configures) of each config documented, in order."""
    from sniper.cluster import ServeConfig, TableSpec, TrainConfig
    from sniper.data import ColumnSpec, FeatureSpec, LabelSpec
    from sniper.models import ModelConfig

    return [
        ("`sniper train`", TrainConfig, "the top level of a training config"),
        ("`sniper serve`", ServeConfig, "the top level of a server config"),
        ("`[variables.NAME]`", TableSpec, "one variable's table (`[variables.default]`: all)"),
        ("`[model]`", ModelConfig, "the dense model"),
        ("`[features]`", FeatureSpec, "how a table of your own maps to labels and features"),
        (
            "`[features.columns.NAME]`",
            ColumnSpec,
            "one column's settings (a sparse column's, or a dense one's)",
        ),
        (
            "a label written as a table",
            LabelSpec,
            '`label = { column = "rating", positive = ">= 4" }`, or one item of `labels`',
        ),
    ]


def render() -> str:
    """The reference as Markdown."""
    parts = [_HEADER]
    # A group of keys shared by two configs is shown once. A key that one config declares
    # again (TrainConfig's num_hubs, of another default) is shown there, and its group's own
    # with the config that keeps it.
    shown: dict[type, set[str]] = {}
    for title, config_class, what in _configs():
        parts.append(f"\n## {title}: {what}\n\n`{_path(config_class)}`.\n")
        groups = [
            (owner, [f for f in fields if f.name not in shown.get(owner, set())])
            for owner, fields in _groups(config_class)
        ]
        shared = [owner for owner, _ in groups if owner in shown]
        if shared:
            names = ", ".join(f"`{_path(owner)}`" for owner in shared)
            parts.append(f"\nIt takes the keys of {names} too (above).\n")
        for owner, fields in groups:
            if not fields:
                continue
            shown.setdefault(owner, set()).update(f.name for f in fields)
            group = (
                "its own keys" if owner is config_class else f"{_path(owner)}: {_summary(owner)}"
            )
            parts.append(f"\n### {group}\n\n| key | type | default | meaning |\n")
            parts.append("|---|---|---|---|\n")
            hints = typing.get_type_hints(config_class)
            docs = attribute_docs(config_class)
            for field in fields:
                parts.append(
                    f"| `{field.name}` | {_type(hints[field.name])} | {_default(field)} | "
                    f"{_text(docs.get(field.name, ''))} |\n"
                )
    return "".join(parts)


def _path(config_class: type) -> str:
    """Where a class is exported (its module's public package), or its bare name when it is
    not (the keys every process shares)."""
    package = ".".join(part for part in config_class.__module__.split(".") if part[0] != "_")
    if not hasattr(sys.modules[package], config_class.__name__):
        return config_class.__name__
    return f"{package}.{config_class.__name__}"


def _groups(config_class: type) -> list[tuple[type, list[dataclasses.Field[Any]]]]:
    """The fields of ``config_class``, grouped by the class that declares each (the most
    derived one that annotates it), in field order within a group and the MRO's order of
    classes, the class itself first."""
    declared: dict[type, list[dataclasses.Field[Any]]] = {}
    for field in dataclasses.fields(config_class):
        owner = next(k for k in config_class.__mro__ if field.name in _annotated(k))
        declared.setdefault(owner, []).append(field)
    return [(owner, fields) for owner in config_class.__mro__ if (fields := declared.get(owner))]


def _annotated(klass: type) -> dict[str, Any]:
    annotations: dict[str, Any] = vars(klass).get("__annotations__", {})
    return annotations


def _summary(klass: type) -> str:
    """The first line of a class's docstring, as plain text."""
    return _text((klass.__doc__ or "").strip().split("\n\n")[0])


def _type(annotation: Any) -> str:
    origin, params = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(f"`{json.dumps(p)}`" for p in params)
    if origin is tuple:
        return f"list of {_type(params[0])}"
    if origin is dict or origin is Mapping:
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    elif field.default is dataclasses.MISSING:
        return "required"
    else:
        value = field.default
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, tuple):
        return f"`{json.dumps(list(value))}`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{json.dumps(value)}`"
    if isinstance(value, str):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def _text(doc: str) -> str:
    """A docstring as one Markdown table cell: one line, reST roles and literals unwrapped."""
    text = " ".join(doc.split())
    text = _ROLE.sub(lambda m: f"`{m[1].rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`").replace("|", "\\|")


def main() -> None:
    CONFIG_DOCS.write_text(render())
    print(f"wrote {CONFIG_DOCS}", file=sys.stderr)


if __name__ == "__main__":
    main()
