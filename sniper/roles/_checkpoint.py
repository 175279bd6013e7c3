"""Save and restore a ps's variables to a directory, all or nothing.

Layout of a checkpoint directory ``DIR``:

- ``manifest.json``: the format, and per variable its configuration (the JSON form of its
  CreateVariable message, :meth:`~sniper.rpc.VariableConfig.to_dict`), its file and that
  file's SHA-256;
- one ``var-<sha256 of the name, 16 hex>.npz`` per variable: signs, weights, optimizer state,
  steps, and the variable's name again.

A file is found from its variable's name and must hold that name, so one variable's rows can
never load into another, whatever order the manifest lists them in.

**Atomic.** A save writes everything into a fresh private directory beside ``DIR`` (made with
``mkdtemp``: nothing planted there in advance can be followed), fsyncs it, and only then moves
it to ``DIR``; an older checkpoint at ``DIR`` is moved aside first and removed after. A crash
leaves either the old checkpoint, the new one, or no ``DIR`` at all (restoring then says there
is no checkpoint), never a mix of two saves.

**Checked.** A restore verifies every checksum and every array (dtype, shape, finite weights
and state) before it returns anything; a damaged checkpoint raises
:class:`CorruptCheckpointError` naming the file and what is wrong, and changes nothing.

**Confined.** A ps saves and restores only under its ``checkpoint_root``
(:func:`confined`): ``../x``, an absolute path elsewhere, or a symlink out of the root is
refused, because any client that can reach a ps could otherwise make it write where the ps
process may write. A restore reads a checkpoint's files only as regular files, never through a
symlink (:func:`_open_file`): one planted inside the root could otherwise point at any file the
ps process may read (a save never writes one).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from sniper.rpc import VariableConfig
from sniper.store import EmbeddingTable, TableExport

__all__ = [
    "MANIFEST",
    "CheckpointPathError",
    "CorruptCheckpointError",
    "check_checkpoint_files",
    "confined",
    "load_checkpoint",
    "manifest_digest",
    "replace_file",
    "save_checkpoint",
    "variable_file",
    "write_checkpoint",
]

MANIFEST = "manifest.json"
FORMAT_VERSION = 2
_ARRAYS = {"signs": np.uint64, "weights": np.float32, "state": np.float32, "steps": np.int32}


class CorruptCheckpointError(ValueError):
    """A checkpoint's files do not match its manifest, or hold arrays no table could have."""


class CheckpointPathError(PermissionError):
    """A Save or Restore named a directory outside the ps's ``checkpoint_root``."""


def confined(root: Path, directory: str) -> Path:
    """``directory`` (relative to ``root``, or absolute) resolved, if it lies inside ``root``."""
    if not directory:
        raise ValueError("directory must not be empty")
    base = root.resolve()
    path = (base / directory).resolve()
    if base not in path.parents:  # the root itself is refused too: a save replaces its target
        raise CheckpointPathError(
            f"directory {directory!r} is not under this ps's checkpoint_root {str(base)!r}; "
            "name a directory under it (start the ps with another checkpoint_root to move it)"
        )
    return path


def variable_file(name: str) -> str:
    """The file name of variable ``name``'s rows: derived from the name, safe for any name."""
    return f"var-{hashlib.sha256(name.encode()).hexdigest()[:16]}.npz"


def save_checkpoint(directory: Path, variables: list[tuple[VariableConfig, EmbeddingTable]]) -> int:
    """Write every variable as a checkpoint at ``directory`` (see the module doc); the rows."""
    return write_checkpoint(directory, [(config, table.export) for config, table in variables])


def write_checkpoint(
    directory: Path, variables: Iterable[tuple[VariableConfig, Callable[[], TableExport]]]
) -> int:
    """Write a checkpoint of exported rows; each export is made when its file is written, so
    only one variable's rows are in memory at a time. Returns the rows written."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        entries, rows = [], 0
        for config, export in variables:
            data = export()
            file_name = variable_file(config.name)
            digest = _write_new(staging / file_name, _npz_bytes(config.name, data))
            entries.append(
                {
                    "name": config.name,
                    "file": file_name,
                    "sha256": digest,
                    "config": config.to_dict(),
                }
            )
            rows += len(data.signs)
        manifest = {"format": FORMAT_VERSION, "variables": entries}
        _write_new(staging / MANIFEST, json.dumps(manifest, indent=1).encode())
        _fsync_directory(staging)
        _replace_directory(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return rows


def _npz_bytes(name: str, data: TableExport) -> bytes:
    buffer = io.BytesIO()
    np.savez(
        buffer,
        name=np.array(name),
        signs=data.signs,
        weights=data.weights,
        state=data.state,
        steps=data.steps,
    )
    return buffer.getvalue()


def _write_new(path: Path, content: bytes) -> str:
    """Create ``path`` (never an existing file or a symlink), write, fsync; its SHA-256."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    return hashlib.sha256(content).hexdigest()


def replace_file(path: Path, content: bytes) -> str:
    """Write ``path`` whole or not at all: a new temporary file beside it (never following a
    symlink), fsynced, renamed over it, the directory fsynced. Returns the SHA-256."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    digest = _write_new(tmp, content)
    os.replace(tmp, path)
    _fsync_directory(path.parent)
    return digest


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_directory(staging: Path, directory: Path) -> None:
    """Move ``staging`` to ``directory``; an older checkpoint there is moved aside first."""
    old = None
    if directory.is_symlink() or directory.exists():
        is_checkpoint = directory.is_symlink() or (directory / MANIFEST).is_file()
        if not is_checkpoint and any(directory.iterdir()):
            raise FileExistsError(
                f"{directory} exists and is not a sniper checkpoint; "
                "choose an empty or new directory"
            )
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        os.replace(directory, old / "checkpoint")
    os.replace(staging, directory)
    _fsync_directory(directory.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def manifest_digest(directory: Path) -> str:
    """SHA-256 of a checkpoint's manifest (see :attr:`sniper.rpc.Checkpointed.manifest_sha256`)."""
    return hashlib.sha256(_read_file(directory / MANIFEST)).hexdigest()


def _open_file(path: Path) -> io.BufferedReader:
    """``path`` opened for reading if it is a regular file and not a symlink: a checkpoint's
    files are read where they are, never followed out of its directory (nor the root)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointPathError(
                f"checkpoint file {path} is a symlink; a checkpoint's files are read only as "
                "regular files inside it, never through a link (copy the file in instead)"
            ) from None
        raise
    try:
        return os.fdopen(fd, "rb")
    except OSError as exc:  # a directory opens, and the error names its descriptor
        os.close(fd)
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None


def _read_file(path: Path) -> bytes:
    """The bytes of ``path``, read as :func:`_open_file` opens it; an error names it."""
    with _open_file(path) as handle:
        try:
            return handle.read()
        except OSError as exc:  # a read's error names no file
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None


def load_checkpoint(directory: Path) -> list[tuple[VariableConfig, TableExport]]:
    """Read and verify a checkpoint (see the module doc); nothing is returned half-checked."""
    if not (directory / MANIFEST).is_file():
        raise FileNotFoundError(f"{directory} has no {MANIFEST}: not a sniper checkpoint")
    loaded = [_load_entry(directory, i, entry) for i, entry in enumerate(_entries(directory))]
    names = [config.name for config, _ in loaded]
    if len(set(names)) != len(names):
        raise CorruptCheckpointError(f"checkpoint {directory} lists a variable more than once")
    return loaded


def check_checkpoint_files(directory: Path) -> None:
    """Check a checkpoint's files against its manifest without loading them: the manifest is
    there and readable, and every variable's file is there and matches its SHA-256.

    What a job's launcher checks of each ps's part before any process starts, so that a
    damaged part is found (and another step chosen) before a ps is asked to restore it; the
    ps still checks everything again, arrays included, when it restores."""
    if not (directory / MANIFEST).is_file():
        raise CorruptCheckpointError(f"checkpoint {directory}: {MANIFEST} is missing")
    for index, entry in enumerate(_entries(directory)):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("sha256"), str)
        ):
            raise CorruptCheckpointError(
                f"checkpoint {directory}: variables[{index}] needs a name and a sha256"
            )
        file = directory / variable_file(entry["name"])
        where = f"checkpoint {directory}: {file.name} (variable {entry['name']!r})"
        try:
            with _open_file(file) as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        except FileNotFoundError:
            raise CorruptCheckpointError(f"{where}: the file is missing") from None
        if digest != entry["sha256"]:
            raise CorruptCheckpointError(f"{where}: the file does not match its checksum")


def _entries(directory: Path) -> list[object]:
    """The manifest's list of variables, checked to be one."""
    path = directory / MANIFEST
    try:
        manifest = json.loads(_read_file(path).decode())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(
            f"checkpoint {directory}: {MANIFEST} is not JSON ({exc})"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"checkpoint {directory}: {MANIFEST} is not a format {FORMAT_VERSION} sniper manifest"
        )
    entries = manifest.get("variables")
    if not isinstance(entries, list):
        raise CorruptCheckpointError(f"checkpoint {directory}: {MANIFEST} lists no variables")
    return entries


def _load_entry(directory: Path, index: int, entry: object) -> tuple[VariableConfig, TableExport]:
    where = f"checkpoint {directory}: variables[{index}]"
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("name"), str)
        and isinstance(entry.get("config"), dict)
        and isinstance(entry.get("sha256"), str)
    ):
        raise CorruptCheckpointError(f"{where} needs a name, a config and a sha256")
    name = entry["name"]
    file = directory / variable_file(name)
    where = f"checkpoint {directory}: {file.name} (variable {name!r})"
    try:
        config = VariableConfig.from_dict(entry["config"])
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CorruptCheckpointError(f"{where}: its config is malformed ({exc})") from None
    if config.name != name:
        raise CorruptCheckpointError(f"{where}: its config names {config.name!r}")
    try:
        content = _read_file(file)
    except FileNotFoundError:
        raise CorruptCheckpointError(f"{where}: the file is missing") from None
    if hashlib.sha256(content).hexdigest() != entry["sha256"]:
        raise CorruptCheckpointError(f"{where}: the file does not match its checksum")
    return config, _arrays(content, name, where)


def _arrays(content: bytes, name: str, where: str) -> TableExport:
    try:
        with np.load(io.BytesIO(content), allow_pickle=False) as arrays:
            stored = {key: arrays[key] for key in ("name", *_ARRAYS)}
    except Exception as exc:  # a damaged zip raises many kinds; all mean the same here
        raise CorruptCheckpointError(f"{where}: unreadable ({type(exc).__name__}: {exc})") from None
    if stored["name"].shape != () or str(stored["name"]) != name:
        raise CorruptCheckpointError(f"{where}: the file holds another variable's rows")
    for key, dtype in _ARRAYS.items():
        if stored[key].dtype != dtype:
            raise CorruptCheckpointError(
                f"{where}: {key} must be {np.dtype(dtype).name}, got {stored[key].dtype}"
            )
    for key in ("weights", "state"):
        values: NDArray[np.float32] = stored[key]
        if not np.isfinite(values).all():
            raise CorruptCheckpointError(f"{where}: {key} has NaN or Inf")
    return TableExport(
        signs=stored["signs"],
        weights=stored["weights"],
        state=stored["state"],
        steps=stored["steps"],
    )
