"""The model spec: [variables] keys, inheritance from the default, and errors that name the key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sniper._config import load_config
from sniper.cluster import DataShape, ModelSpec, TableSpec, TrainConfig
from sniper.placement import FILE_CAPACITY
from tests.data._helpers import criteo_line

CRITEO = DataShape(
    "criteo:day.tsv",
    tuple(f"C{j}" for j in range(1, 27)),
    13,
    dict.fromkeys((f"C{j}" for j in range(1, 27)), 1024) | {"C3": 200_000},
)


def test_defaults_and_overrides() -> None:
    spec = ModelSpec.parse(
        {
            "default": {"dim": 8, "params": {"lr": 0.1}},
            "C3": {"capacity": 100_000, "min_count": 2, "shards": 2},
            "C4": {"optimizer": "ftrl", "params": {"alpha": 0.1}},
            "C5": {"initializer": "uniform", "init": {"low": -0.1, "high": 0.1}},
        }
    )
    tables = spec.resolve(CRITEO)
    assert list(tables) == list(CRITEO.variables)
    assert tables["C1"] == TableSpec(dim=8, capacity=FILE_CAPACITY, shards=1, params={"lr": 0.1})
    assert tables["C3"] == TableSpec(
        dim=8, capacity=100_000, shards=2, params={"lr": 0.1}, min_count=2
    )
    assert tables["C4"].optimizer == "ftrl" and tables["C4"].params == {"alpha": 0.1}
    assert tables["C5"].initializer_args() == ("uniform", -0.1, 0.1)
    assert tables["C1"].initializer_args() == ("normal", 0.0, 0.01)


def test_another_optimizer_does_not_inherit_the_defaults_params() -> None:
    spec = ModelSpec.parse({"C4": {"optimizer": "ftrl"}, "default": {"optimizer": "sgd"}})
    assert spec.default.params == {} and spec.overrides["C4"].params == {}
    assert ModelSpec.parse({}).default.params == {"lr": 0.05}


def test_sizes_come_from_the_data() -> None:
    known = DataShape("synthetic", ("a", "b"), 3, {"a": 100_000, "b": 5}, {"a": 10, "b": 10**9})
    tables = ModelSpec.parse({}).resolve(known)
    assert (tables["a"].capacity, tables["a"].shards) == (1024, 3)  # at least 1024 rows
    assert (tables["b"].capacity, tables["b"].shards) == (4_000_000, 1)  # at most 4M


ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"default": {"dim": 0}}, "variables.default.dim must be in [1, 4096], got 0"),
    ({"C2": {"dim": "wide"}}, "variables.C2.dim must be an integer, got 'wide'"),
    ({"C2": 16}, "variables.C2 must be a table of keys such as dim and optimizer, got 16"),
    (
        {"C2": {"size": 3}},
        "variables.C2: unknown key 'size'; known keys: capacity, dim, eviction, init, "
        "initializer, min_count, optimizer, params, pooling, shards",
    ),
    (
        {"C2": {"optimizer": "rmsprop"}},
        "variables.C2.optimizer must be one of sgd, adagrad, adam, ftrl, got 'rmsprop'",
    ),
    (
        {"C2": {"params": {"momentum": 0.9}}},
        "variables.C2.params has 'momentum', which adagrad does not take; it takes eps, "
        "initial_accumulator_value, lr",
    ),
    (
        {"C2": {"params": {"lr": -1}}},
        "variables.C2.params: lr must be a positive number within float32's range",
    ),
    (
        {"C2": {"initializer": "xavier"}},
        "variables.C2.initializer must be one of normal, uniform, constant, got 'xavier'",
    ),
    (
        {"C2": {"init": {"sigma": 1}}},
        "variables.C2.init has 'sigma', which normal does not take; it takes mean, std",
    ),
    (
        {"C2": {"initializer": "uniform", "init": {"low": 1, "high": 0}}},
        "variables.C2.init: uniform initializer needs low < high, got [1.0, 0.0)",
    ),
    ({"C2": {"capacity": 2, "shards": 4}}, "variables.C2.capacity must be 0 (automatic) or in"),
    ({"C2": {"min_count": -1}}, "variables.C2.min_count must be 0 or more, got -1"),
    ({"C2": {"eviction": "fifo"}}, "variables.C2.eviction must be one of lru, got 'fifo'"),
]


@pytest.mark.parametrize(("raw", "message"), ERRORS)
def test_errors_name_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        ModelSpec.parse(raw)


def test_a_variable_the_data_lacks_is_named() -> None:
    spec = ModelSpec.parse({"C27": {"dim": 4}})
    with pytest.raises(ValueError) as caught:
        spec.resolve(CRITEO)
    assert str(caught.value) == (
        "variables.C27: the data (criteo:day.tsv) has no variable 'C27'; its variables are "
        "C1, C2, C3, C4, C5, C6, C7, C8 ... (26 in all)"
    )


def test_the_train_config_checks_its_spec_and_data_keys(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    cases = [
        ("[variables.C1]\ndim = -1\n", "variables.C1.dim must be in [1, 4096], got -1"),
        ("variables = { C1 = 3 }\n", "variables.C1 must be a table"),
        (
            'eval_data = "synthetic"\n',
            "eval_data must be criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH, got",
        ),
        ("eval_every_steps = 5\n", "eval_every_steps needs eval_data"),
        ('data = "csvx"\n', "data must be synthetic, criteo:PATH, parquet:PATH, csv:PATH or "),
        ('data = "csv:x"\n', "data = 'csv:x' needs a [features] table: which column is the "),
    ]
    for text, message in cases:
        config.write_text(text)
        with pytest.raises(ValueError, match=re.escape(message)):
            load_config(TrainConfig, config, {})


def test_sniper_train_refuses_a_spec_that_does_not_fit_before_starting(tmp_path: Path) -> None:
    day = tmp_path / "day.tsv"
    day.write_text(criteo_line("1", ["1"] * 13, ["ab"] * 26) * 4)
    config = tmp_path / "c.toml"
    config.write_text(f'data = "criteo:{day}"\n[variables.embedding_3]\ndim = 8\n')
    done = subprocess.run(
        [sys.executable, "-m", "sniper", "train", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"sniper: error: variables.embedding_3: the data (criteo:{day}) has no variable "
        "'embedding_3'; its variables are C1, C2, C3, C4, C5, C6, C7, C8 ... (26 in all)"
    ]
    assert "started" not in done.stdout  # no ps or hub was started


def test_pooling_is_a_key_of_a_variable_and_checked() -> None:
    spec = ModelSpec.parse({"C2": {"pooling": "none"}, "default": {"pooling": "mean"}})
    assert (spec.default.pooling, spec.overrides["C2"].pooling) == ("mean", "none")
    with pytest.raises(
        ValueError,
        match=r"^variables\.C2\.pooling must be one of sum, mean, sqrtn, none, got 'max'$",
    ):
        ModelSpec.parse({"C2": {"pooling": "max"}})


def test_the_entries_that_set_a_pooling_are_known_even_when_they_say_sum() -> None:
    spec = ModelSpec.parse({"C1": {"pooling": "sum"}, "C2": {"dim": 8}})
    assert spec.pooling_given == {"C1"}
    spec = ModelSpec.parse({"default": {"pooling": "sum"}, "C1": {"pooling": "mean"}})
    assert spec.pooling_given == {"default", "C1"}
