"""A ps checkpoint is all or nothing: found by name, checksummed, confined to the ps's
checkpoint_root, replaced atomically (also when the saving process is killed with -9), and a
restore replaces a variable's rows rather than merging into them. Real files, real processes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest

from sniper.roles import PsEngine, PsRole, PsRoleConfig, write_checkpoint
from sniper.roles._checkpoint import (
    CheckpointPathError,
    CorruptCheckpointError,
    check_checkpoint_files,
    load_checkpoint,
    variable_file,
)
from sniper.rpc import VariableConfig
from sniper.scheduler import open_scheduler
from sniper.store import TableExport

pytestmark = pytest.mark.anyio

NAMES = ("user/id", "item id", "ctx")  # a slash and a space: file names come from a hash
SIGNS = np.arange(1, 9, dtype=np.uint64)
OFFSETS = np.array([0, 4, 8], dtype=np.int64)


@asynccontextmanager
async def ps(root: Path) -> AsyncIterator[PsRole]:
    async with open_scheduler("thread_pool", workers=2) as scheduler:
        role = PsRole(PsEngine(scheduler), PsRoleConfig(checkpoint_root=str(root)))
        for name in NAMES:
            await role.create_variable(VariableConfig(name, 4, 64, optimizer="adam"))
        yield role


async def step(role: PsRole, batch: int, signs: np.ndarray = SIGNS) -> None:
    variables = {name: (signs, OFFSETS) for name in NAMES}
    await role.feed_sample(batch, variables)
    await role.embedding_lookup(batch, list(NAMES))
    await role.push_grad(batch, {name: np.ones((2, 4), np.float32) for name in NAMES})


async def rows(role: PsRole, signs: np.ndarray = SIGNS) -> dict[str, np.ndarray]:
    return {name: await role.pull(name, signs) for name in NAMES}


async def test_restore_replaces_the_rows_and_keeps_optimizer_state(tmp_path: Path) -> None:
    async with ps(tmp_path) as role:
        await step(role, 1)
        saved = await rows(role)
        assert (await role.save("ck")).rows == 3 * len(SIGNS)
        later = SIGNS + np.uint64(100)  # rows that exist only after the save
        await step(role, 2, later)
        await step(role, 3)
        done = await role.restore("ck")
        assert set(done.variables) == set(NAMES) and done.rows == 3 * len(SIGNS)
        after = await rows(role)
        for name in NAMES:
            np.testing.assert_array_equal(after[name], saved[name])
            exported = role.engine.table(name).export()
            assert set(exported.signs.tolist()) == set(SIGNS.tolist())  # replaced, not merged
            assert exported.steps.tolist() == [1] * len(SIGNS)  # Adam's step counts came back
        await step(role, 2)  # the restore rolled batch 2's push back: a resume feeds it again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no staging left behind


async def test_files_are_found_by_name_whatever_the_manifest_order(tmp_path: Path) -> None:
    async with ps(tmp_path) as role:
        await step(role, 1)
        await role.save("ck")
    manifest_path = tmp_path / "ck" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["variables"].reverse()
    manifest_path.write_text(json.dumps(manifest))
    loaded = {config.name: data for config, data in load_checkpoint(tmp_path / "ck")}
    assert set(loaded) == set(NAMES)
    assert sorted(f.name for f in (tmp_path / "ck").iterdir()) == sorted(
        ["manifest.json", *(variable_file(n) for n in NAMES)]
    )


@pytest.mark.parametrize(
    ("config", "recorded"),
    [
        (
            VariableConfig("ctx", 4, 64),
            {
                "name": "ctx",
                "dim": 4,
                "capacity": "64",
                "optimizer": {"name": "adagrad"},
                "shards": 1,
                "eviction": "lru",
                "admission": {},
            },
        ),
        (
            VariableConfig(
                "user/id",
                4,
                64,
                optimizer="adam",
                optimizer_params={"lr": 0.1},
                initializer=("uniform", -0.5, 0.5),
                shards=2,
                admission_min_count=2,
                seed=7,
            ),
            {
                "name": "user/id",
                "dim": 4,
                "capacity": "64",
                "optimizer": {"name": "adam", "params": {"lr": 0.1}},
                "initializer": {"kind": "uniform", "a": -0.5, "b": 0.5},
                "shards": 2,
                "eviction": "lru",
                "admission": {"minCount": 2},
                "seed": "7",
            },
        ),
    ],
)
def test_the_manifest_records_a_config_as_create_variable_s_json(
    tmp_path: Path, config: VariableConfig, recorded: dict[str, object]
) -> None:
    """The manifest keeps the form checkpoints have always had (the CreateVariable message's
    JSON, camelCase keys): older checkpoints restore, and newer ones read the same."""
    empty = TableExport(
        signs=np.zeros(0, np.uint64),
        weights=np.zeros((0, 4), np.float32),
        state=np.zeros((0, 2, 4), np.float32),
        steps=np.zeros(0, np.int32),
    )
    write_checkpoint(tmp_path / "ck", [(config, lambda: empty)])
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert manifest["variables"][0]["config"] == recorded
    [(loaded, _)] = load_checkpoint(tmp_path / "ck")
    assert loaded == config
    assert VariableConfig.from_dict(recorded) == config


def _rewrite(directory: Path, variable: str, **arrays: np.ndarray) -> None:
    """Replace ``variable``'s arrays and fix its checksum: damage only the checks see."""
    file = directory / variable_file(variable)
    with np.load(file) as old:
        content = {key: old[key] for key in old.files} | arrays
    np.savez(file, **content)
    manifest = json.loads((directory / "manifest.json").read_text())
    for entry in manifest["variables"]:
        if entry["name"] == variable:
            entry["sha256"] = hashlib.sha256(file.read_bytes()).hexdigest()
    (directory / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("flip", "the file does not match its checksum"),
        ("missing", "the file is missing"),
        ("nan", "weights has NaN or Inf"),
        ("inf_state", "state has NaN or Inf"),
        ("float64", "weights must be float32, got float64"),
        ("strings", "weights must be float32, got <U1"),
        ("swapped", "the file holds another variable's rows"),
    ],
)
async def test_a_damaged_checkpoint_is_refused_and_changes_nothing(
    tmp_path: Path, damage: str, message: str
) -> None:
    async with ps(tmp_path) as role:
        await step(role, 1)
        await role.save("ck")
        await step(role, 2)
        before = await rows(role)
        directory, name = tmp_path / "ck", "item id"
        file = directory / variable_file(name)
        if damage == "flip":
            content = bytearray(file.read_bytes())
            content[len(content) // 2] ^= 0xFF
            file.write_bytes(bytes(content))
        elif damage == "missing":
            file.unlink()
        elif damage == "swapped":
            _rewrite(directory, name, name=np.array("ctx"))
        else:
            with np.load(file) as old:
                weights, state = old["weights"], old["state"]
            replacement = {
                "nan": {"weights": np.full_like(weights, np.nan)},
                "inf_state": {"state": np.full_like(state, -np.inf)},
                "float64": {"weights": weights.astype(np.float64)},
                "strings": {"weights": np.full(weights.shape, "x")},
            }[damage]
            _rewrite(directory, name, **replacement)
        with pytest.raises(CorruptCheckpointError) as info:
            await role.restore("ck")
        assert (
            str(info.value) == f"checkpoint {directory}: {file.name} (variable {name!r}): {message}"
        )
        after = await rows(role)
        for variable in NAMES:
            np.testing.assert_array_equal(after[variable], before[variable])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("flip", "var: the file does not match its checksum"),
        ("truncate", "var: the file does not match its checksum"),
        ("delete", "var: the file is missing"),
        ("delete manifest", "manifest.json is missing"),
        ("truncate manifest", "manifest.json is not JSON"),
    ],
)
async def test_the_files_are_checked_without_loading_them(
    tmp_path: Path, damage: str, message: str
) -> None:
    """What a job's launcher checks of each ps part before any ps restores it."""
    async with ps(tmp_path) as role:
        await step(role, 1)
        await role.save("ck")
    directory, name = tmp_path / "ck", "item id"
    check_checkpoint_files(directory)
    file, manifest = directory / variable_file(name), directory / "manifest.json"
    if damage == "flip":
        content = bytearray(file.read_bytes())
        content[len(content) // 2] ^= 0x01
        file.write_bytes(bytes(content))
    elif damage == "truncate":
        file.write_bytes(file.read_bytes()[:-1])
    elif damage == "delete":
        file.unlink()
    elif damage == "delete manifest":
        manifest.unlink()
    else:
        manifest.write_text(manifest.read_text()[:-2])
    message = message.replace("var:", f"{file.name} (variable {name!r}):")
    with pytest.raises(
        CorruptCheckpointError, match=re.escape(f"checkpoint {directory}: {message}")
    ):
        check_checkpoint_files(directory)


@pytest.mark.parametrize("where", ["../outside", "/tmp", "link/ck", ".", "sub/.."])
async def test_save_and_restore_stay_under_the_checkpoint_root(tmp_path: Path, where: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)  # a symlink out of the root
    async with ps(root) as role:
        for call in (role.save, role.restore):
            with pytest.raises(CheckpointPathError, match="is not under this ps's checkpoint_root"):
                await call(where)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]
    assert sorted(p.name for p in root.iterdir()) == ["link"]


async def test_a_symlink_planted_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    root = tmp_path / "root"
    root.mkdir()
    (root / "ck").symlink_to(victim)
    async with ps(root) as role:
        await step(role, 1)
        with pytest.raises(CheckpointPathError):  # the link resolves outside the root
            await role.save("ck")
        (root / "ck").unlink()
        (root / "ck").symlink_to(root / "elsewhere")  # inside the root, but a link
        (root / "elsewhere").mkdir()
        (root / "elsewhere" / "notes.txt").write_text("mine")
        with pytest.raises(FileExistsError, match="is not a sniper checkpoint"):
            await role.save("ck")
    assert (victim / "precious.txt").read_text() == "keep me"
    assert (root / "elsewhere" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("which", ["variable", "manifest"])
async def test_restore_never_follows_a_file_symlink_out_of_the_root(
    tmp_path: Path, which: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    async with ps(root) as role:
        await step(role, 1)
        await role.save("ck")
        before = await rows(role)
        # The same bytes, moved outside the root and linked back: the checksums still hold.
        name = variable_file("ctx") if which == "variable" else "manifest.json"
        outside = tmp_path / name
        (root / "ck" / name).rename(outside)
        (root / "ck" / name).symlink_to(outside)
        await step(role, 2)
        trained = await rows(role)
        message = f"checkpoint file {root.resolve() / 'ck' / name} is a symlink; "
        with pytest.raises(CheckpointPathError, match=re.escape(message)):
            await role.restore("ck")
        with pytest.raises(CheckpointPathError, match=re.escape(message)):
            check_checkpoint_files(root / "ck")
        after = await rows(role)  # step 2's push stands: nothing was restored
        assert all((after[n] == trained[n]).all() and (after[n] != before[n]).any() for n in NAMES)
    with pytest.raises(CheckpointPathError, match=re.escape(message)):
        load_checkpoint(root / "ck")


async def test_restore_never_follows_a_directory_symlink_out_of_the_root(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    async with ps(root) as role:
        await step(role, 1)
        await role.save("ck")
        (root / "ck").rename(tmp_path / "ck")
        (root / "ck").symlink_to(tmp_path / "ck")
        with pytest.raises(CheckpointPathError, match="'ck' is not under this ps's"):
            await role.restore("ck")


SAVER = """
import sys, anyio, numpy as np
from sniper.roles import PsEngine, PsRole, PsRoleConfig
from sniper.rpc import VariableConfig
from sniper.scheduler import open_scheduler

NAMES = [f"v{i}" for i in range(6)]
SIGNS = np.arange(1, 2001, dtype=np.uint64)

async def main() -> None:
    async with open_scheduler("inline", workers=1) as scheduler:
        role = PsRole(PsEngine(scheduler), PsRoleConfig(checkpoint_root=sys.argv[1]))
        for name in NAMES:
            await role.create_variable(VariableConfig(name, 8, 4096, optimizer="sgd"))
        generation = 0
        while True:
            generation += 1
            for name in NAMES:  # every row of every variable holds this save's number
                rows = np.full((len(SIGNS), 8), generation, np.float32)
                await role.push(name, SIGNS, rows)
            await role.save("ck")
            print(generation, flush=True)

anyio.run(main)
"""


def test_kill_9_during_repeated_saves_never_leaves_a_mix(tmp_path: Path) -> None:
    seen = set()
    for attempt in range(4):
        process = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        process.stdout.readline()  # one save done: later kills land mid-save or between
        time.sleep(0.05 + 0.07 * attempt)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        process.stdout.close()
        try:
            loaded = load_checkpoint(tmp_path / "ck")
        except FileNotFoundError:
            continue  # killed between moving the old one aside and the new one in
        generations = {float(data.weights[0, 0]) for _, data in loaded}
        assert len(loaded) == 6 and len(generations) == 1, generations
        assert all((data.weights == data.weights[0, 0]).all() for _, data in loaded)
        seen |= generations
    assert seen, "no checkpoint survived any kill"


async def test_without_a_checkpoint_root_save_and_restore_are_off(tmp_path: Path) -> None:
    async with open_scheduler("inline", workers=1) as scheduler:
        role = PsRole(PsEngine(scheduler))
        for call in (role.save, role.restore):
            with pytest.raises(CheckpointPathError, match="start it with --checkpoint-root DIR"):
                await call(str(tmp_path / "ck"))
    assert list(tmp_path.iterdir()) == []


async def test_push_refuses_rows_with_nan_and_writes_nothing(tmp_path: Path) -> None:
    async with ps(tmp_path) as role:
        rows = np.ones((len(SIGNS), 4), np.float32)
        rows[3, 1] = np.nan
        with pytest.raises(ValueError, match="rows of 'ctx' have NaN or Inf; nothing was written"):
            await role.push("ctx", SIGNS, rows)
        assert len(role.engine.table("ctx").export().signs) == 0
