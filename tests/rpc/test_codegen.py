"""The committed generated code matches the .proto files.

Regenerate with ``python -m sniper.rpc._codegen``.
"""

from __future__ import annotations

from pathlib import Path

from sniper.rpc._codegen import GENERATED, generate, generated_files


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    generate(tmp_path)
    fresh, committed = generated_files(tmp_path), generated_files(GENERATED)
    assert sorted(fresh) == sorted(committed)
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated files {stale}: run python -m sniper.rpc._codegen"
