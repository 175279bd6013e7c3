"""Initializers by name: a config's ``initializer`` and ``init``, and CreateVariable's form."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sniper.store import (
    DEFAULT_INITIALIZER,
    INITIALIZERS,
    Initializer,
    constant,
    make_initializer,
    normal,
    uniform,
)


def test_make_initializer_fills_defaults_and_round_trips_through_args() -> None:
    assert make_initializer("normal", {}) == normal(0.01) == DEFAULT_INITIALIZER
    assert make_initializer("normal", {"mean": 1.0}) == normal(0.01, mean=1.0)
    assert make_initializer("uniform", {"high": 2.0}) == uniform(-0.01, 2.0)
    assert make_initializer("constant", {"value": 3.0}) == constant(3.0)
    for name in INITIALIZERS:
        initializer = make_initializer(name, {})
        assert initializer.name == name
        assert Initializer.from_args(*initializer.args()) == initializer
    assert normal(0.5, mean=2.0).args() == ("normal", 2.0, 0.5)
    assert uniform(-1, 1).args() == ("uniform", -1.0, 1.0)


def test_an_unnamed_initializer_is_the_default() -> None:
    assert Initializer.from_args("", 5.0, 6.0) == DEFAULT_INITIALIZER


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: make_initializer("xavier", {}),
            "initializer must be one of normal, uniform, constant, got 'xavier'",
        ),
        (
            lambda: make_initializer("uniform", {"sigma": 1.0}),
            "init has 'sigma', which uniform does not take; it takes low, high",
        ),
        (
            lambda: make_initializer("uniform", {"low": 1.0, "high": 0.0}, value_prefix="init: "),
            r"init: uniform initializer needs low < high, got \[1.0, 0.0\)",
        ),
        (
            lambda: Initializer.from_args("zeros", 0.0, 0.0),
            "initializer.kind must be one of normal, uniform, constant, got 'zeros'",
        ),
    ],
)
def test_errors_name_the_field(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        call()
