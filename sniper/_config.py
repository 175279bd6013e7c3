"""TOML configuration files into frozen dataclasses, validated at the edge.

Defaults come from the dataclass, then the TOML file, then command-line overrides. Every
value is checked against its field's annotation before the dataclass sees it, so a wrong type
names the key (``workers must be an integer, got 'two'``) instead of failing deep inside.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

__all__ = [
    "RunSettings",
    "Validated",
    "check_at_least",
    "check_positive",
    "fields_of",
    "from_mapping",
    "load_config",
]

T = TypeVar("T")


def _check(key: str, value: Any, expected: Any) -> Any:
    """``value`` converted to the field type, or ``ValueError`` naming ``key``."""
    origin = get_origin(expected)
    if origin is Literal:
        if value not in get_args(expected):
            choices = ", ".join(map(repr, get_args(expected)))
            raise ValueError(f"{key} must be one of {choices}, got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{key} must be a table, got {value!r}")
        _, item_type = get_args(expected)
        return {str(k): _check(f"{key}.{k}", v, item_type) for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{key} must be a list, got {value!r}")
        return tuple(
            _check(f"{key}[{i}]", item, get_args(expected)[0]) for i, item in enumerate(value)
        )
    if expected is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, got {value!r}")
        return value
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{key} must be an integer, got {value!r}")
        return value
    if expected is float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{key} must be a finite number, got {value!r}")
        return float(value)
    if expected is str and not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {value!r}")
    return value


def load_config(cls: type[T], path: Path | None, overrides: dict[str, Any]) -> T:
    """Build ``cls`` from its defaults, the TOML file at ``path``, then non-None overrides."""
    values: dict[str, Any] = {}
    where = f"config {path}" if path is not None else "config"
    if path is not None:
        try:
            values = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    values.update({k: v for k, v in overrides.items() if v is not None})
    return from_mapping(cls, values, where)


def from_mapping(cls: type[T], values: Mapping[str, Any], where: str, prefix: str = "") -> T:
    """Build ``cls`` from ``values`` (a TOML table): unknown keys and wrong types are errors.

    Errors name the key, after ``prefix`` (``variables.C3.`` gives ``variables.C3.dim must be
    an integer``); an unknown key's error starts with ``where``.
    """
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(known))}"
        )
    # Value errors name their key already, whether it came from the file or a flag.
    checked = {key: _check(prefix + key, value, hints[key]) for key, value in values.items()}
    return cls(**checked)


def check_at_least(config: object, minimum: int, *names: str) -> None:
    """Each field ``names`` of ``config`` is at least ``minimum``, or ``ValueError`` names it."""
    for name in names:
        if getattr(config, name) < minimum:
            raise ValueError(f"{name} must be at least {minimum}, got {getattr(config, name)}")


def check_positive(config: object, *names: str) -> None:
    """Each field ``names`` of ``config`` is positive, or ``ValueError`` names it."""
    for name in names:
        if not getattr(config, name) > 0:
            raise ValueError(f"{name} must be positive, got {getattr(config, name)}")


@dataclasses.dataclass(frozen=True)
class Validated:
    """The root of sniper's config classes: ``__post_init__`` validates, cooperatively.

    A config composed of several (``ServeConfig`` is a data source, ps settings and gRPC
    settings at once) runs every part's checks once: each class calls
    ``super().__post_init__()`` first, and this one ends the chain.
    """

    def __post_init__(self) -> None:
        """Nothing to check here: the end of the chain."""


@dataclasses.dataclass(frozen=True)
class RunSettings(Validated):
    """Keys every process of a job shares."""

    seed: int = 0
    """Seeds the synthetic data, the tables' initializers and the dense model."""
    stats_interval: float = 10.0
    """Seconds between statistics lines in the log."""
    metrics_port: int = -1
    """Serve Prometheus metrics on this port (0: a free one, printed; -1: none)."""
    metrics_host: str = "127.0.0.1"
    """Interface of the metrics endpoint (loopback by default: it has no authentication)."""
    tls_cert: str = ""
    """This process's TLS certificate (PEM; with ``tls_key``): its servers speak TLS."""
    tls_key: str = ""
    tls_ca: str = ""
    """The CA (PEM) that signs every role's certificate: clients verify servers with it, and
    servers then require client certificates (mutual TLS)."""
    auth_token_file: str = ""
    """A file holding the bearer token every call must carry (health checks excepted)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "stats_interval")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(
                "metrics_port must be -1 (none), 0 (a free port) or a port, "
                f"got {self.metrics_port}"
            )


def fields_of(config: object, part: type) -> dict[str, Any]:
    """The values ``config`` holds for the fields of ``part`` (one of its config classes):
    how a launcher builds a role's config from the job's, without naming a key twice."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(part)}
