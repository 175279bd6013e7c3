"""Save and restore a ps's variables to a directory.

Layout: ``manifest.json`` lists each variable with its CreateVariable configuration and the
file holding its rows (``var-0000.npz``: signs, weights, optimizer state, steps). Files are
written under temporary names and renamed into place, manifest last, so a crash mid-save never
leaves a manifest that points at a half-written file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from sniper.rpc._generated.sniper.v1 import CreateVariableRequest
from sniper.store import EmbeddingTable, TableExport

__all__ = ["MANIFEST", "load_checkpoint", "save_checkpoint"]

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def _write_atomically(path: Path, write: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as handle:
        if isinstance(write, bytes):
            handle.write(write)
        else:
            np.savez(handle, **write)  # type: ignore[arg-type]
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


def save_checkpoint(
    directory: Path, variables: list[tuple[CreateVariableRequest, EmbeddingTable]]
) -> int:
    """Write every variable into ``directory``; returns the number of rows written."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    rows = 0
    for index, (config, table) in enumerate(variables):
        data = table.export()
        file_name = f"var-{index:04d}.npz"
        _write_atomically(
            directory / file_name,
            {
                "signs": data.signs,
                "weights": data.weights,
                "state": data.state,
                "steps": data.steps,
            },
        )
        entries.append({"name": config.name, "file": file_name, "config": config.to_dict()})
        rows += len(data.signs)
    manifest = {"format": FORMAT_VERSION, "variables": entries}
    _write_atomically(directory / MANIFEST, json.dumps(manifest, indent=1).encode())
    return rows


def load_checkpoint(directory: Path) -> list[tuple[CreateVariableRequest, TableExport]]:
    """Read a checkpoint; ``ValueError`` says what is missing or malformed."""
    path = directory / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no {MANIFEST}: not a sniper checkpoint")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"checkpoint {directory}: {MANIFEST} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint {directory}: {MANIFEST} is not a format {FORMAT_VERSION} sniper manifest"
        )
    entries = manifest.get("variables")
    if not isinstance(entries, list):
        raise ValueError(f"checkpoint {directory}: {MANIFEST} has no list of variables")
    return [_load_entry(directory, i, entry) for i, entry in enumerate(entries)]


def _load_entry(
    directory: Path, index: int, entry: object
) -> tuple[CreateVariableRequest, TableExport]:
    where = f"checkpoint {directory}: variables[{index}]"
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("config"), dict)
        or not isinstance(entry.get("file"), str)
        or "/" in entry["file"]
    ):
        raise ValueError(f"{where} needs a config object and a file name")
    try:
        config = CreateVariableRequest().from_dict(entry["config"])
        with np.load(directory / entry["file"]) as arrays:
            data = TableExport(
                signs=arrays["signs"],
                weights=arrays["weights"],
                state=arrays["state"],
                steps=arrays["steps"],
            )
    except (KeyError, TypeError, AttributeError, ValueError, OSError) as exc:
        raise ValueError(f"{where} is malformed: {type(exc).__name__}: {exc}") from None
    return config, data
