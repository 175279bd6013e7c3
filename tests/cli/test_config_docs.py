"""docs/config.md is the reference of every config key, generated from the config classes:
it is up to date, names every field of every config, and its defaults are the classes'."""

from __future__ import annotations

import dataclasses

from sniper.cli._config_docs import CONFIG_DOCS, _configs, render


def test_docs_config_md_is_up_to_date() -> None:
    assert CONFIG_DOCS.read_text() == render(), (
        "docs/config.md is stale: run python -m sniper.cli._config_docs"
    )


def test_every_key_of_every_config_is_in_the_reference() -> None:
    text = CONFIG_DOCS.read_text()
    for _, config_class, _ in _configs():
        for field in dataclasses.fields(config_class):
            assert f"| `{field.name}` |" in text, (config_class.__name__, field.name)
    assert '| `nonfinite_dense` | `"error"` or `"fill"` | `"error"` | What a NaN' in text
    assert "| `max_inflight_mb` | float | `1024.0` | Request bytes" in text
