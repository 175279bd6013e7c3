"""Every shipped training config loads: its keys, types and model spec are valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from sniper.cluster import load_train_config

CONFIGS = sorted(
    (Path(__file__).resolve().parent.parent / "experiments" / "configs").glob("*.toml")
)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads(path: Path) -> None:
    config = load_train_config(path, {})
    config.model_spec()


def test_there_are_configs() -> None:
    assert len(CONFIGS) >= 3
