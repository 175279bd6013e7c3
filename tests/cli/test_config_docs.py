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


def test_a_key_a_config_declares_again_is_shown_with_each_default() -> None:
    # sniper train's num_hubs (0: one per trainer rank) is its own; sniper serve's hub keeps
    # HubSettings' (1), shown under serve (the train section shows HubSettings without it).
    text = CONFIG_DOCS.read_text()
    train, serve = text.split("## `sniper serve`")
    assert (
        "| `num_hubs` | int | `0` | Hubs that split the data between them. 0 (the default)" in train
    )
    assert "| `num_hubs` | int | `1` | Hubs that split the data between them. |" in serve
