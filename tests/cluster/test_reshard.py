"""Checkpoints of P ps restored on Q ps: every row and its optimizer state arrive exactly once,
on the ps the placement hash names, through real PsRoles, real files and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sniper.cluster import reshard
from sniper.hashing import ps_for_variable
from sniper.roles import PsEngine, PsRole, PsRoleConfig
from sniper.roles._checkpoint import CorruptCheckpointError
from sniper.rpc import VariableConfig
from sniper.scheduler import open_scheduler

pytestmark = pytest.mark.anyio

NAMES = [f"var_{i}" for i in range(9)]


def rows_of(role: PsRole, name: str) -> dict[int, tuple[object, ...]]:
    """Every row of variable ``name`` by sign: its weights, optimizer state and step count."""
    data = role.engine.table(name).export()
    return {
        int(s): (w.tobytes(), st.tobytes(), int(k))
        for s, w, st, k in zip(data.signs, data.weights, data.state, data.steps, strict=True)
    }


async def trained_job(root: Path, num_ps: int) -> dict[str, dict[int, tuple[object, ...]]]:
    """``num_ps`` ps, each with the variables it owns, trained a few steps and saved to
    ``root/ps-i``; returns every row by variable and sign (weights, state, steps)."""
    expected: dict[str, dict[int, tuple[object, ...]]] = {}
    for index in range(num_ps):
        async with open_scheduler("thread_pool", workers=2) as scheduler:
            role = PsRole(PsEngine(scheduler), PsRoleConfig(checkpoint_root=str(root)))
            mine = [n for n in NAMES if ps_for_variable(n, num_ps) == index]
            for name in mine:
                await role.create_variable(VariableConfig(name, 4, 512, optimizer="adam", shards=3))
            rng = np.random.default_rng(index)
            for batch in range(3):
                signs = rng.integers(1, 300, size=60).astype(np.uint64)
                offsets = np.array([0, 20, 40, 60], dtype=np.int64)
                if not mine:
                    break
                await role.feed_sample(batch, {n: (signs, offsets) for n in mine})
                await role.embedding_lookup(batch, mine)
                grads = {n: rng.normal(size=(3, 4)).astype(np.float32) for n in mine}
                await role.push_grad(batch, grads)
            await role.save(f"ps-{index}")
            for name in mine:
                expected[name] = rows_of(role, name)
    return expected


async def restored_rows(root: Path, num_ps: int) -> dict[str, dict[int, tuple[object, ...]]]:
    found: dict[str, dict[int, tuple[object, ...]]] = {}
    for index in range(num_ps):
        async with open_scheduler("inline", workers=1) as scheduler:
            role = PsRole(PsEngine(scheduler), PsRoleConfig(checkpoint_root=str(root)))
            done = await role.restore(f"ps-{index}")
            assert all(ps_for_variable(n, num_ps) == index for n in done.variables)
            for name in done.variables:
                assert name not in found, f"{name} restored on two ps"
                found[name] = rows_of(role, name)
    return found


@pytest.mark.parametrize(("old", "new"), [(2, 3), (3, 1)])
async def test_every_row_arrives_exactly_once_on_its_new_owner(
    tmp_path: Path, old: int, new: int
) -> None:
    expected = await trained_job(tmp_path / "old", old)
    rows = reshard(
        [tmp_path / "old" / f"ps-{i}" for i in range(old)],
        [tmp_path / "new" / f"ps-{j}" for j in range(new)],
    )
    assert sum(rows) == sum(len(v) for v in expected.values())
    assert await restored_rows(tmp_path / "new", new) == expected


async def test_a_variable_in_two_sources_is_refused(tmp_path: Path) -> None:
    await trained_job(tmp_path / "old", 1)
    source = tmp_path / "old" / "ps-0"
    with pytest.raises(CorruptCheckpointError, match="is in both"):
        reshard([source, source], [tmp_path / "new" / "ps-0"])
    assert not (tmp_path / "new").exists()


async def test_sniper_reshard_on_the_command_line(tmp_path: Path) -> None:
    expected = await trained_job(tmp_path / "old", 2)
    done = subprocess.run(
        [sys.executable, "-m", "sniper", "reshard", "--num-ps", "3", "--out", str(tmp_path)]
        + [str(tmp_path / "old" / f"ps-{i}") for i in range(2)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    total = sum(len(v) for v in expected.values())
    printed = [line.rsplit(": ", 1) for line in done.stdout.splitlines()]
    assert [p for p, _ in printed] == [str(tmp_path / f"ps-{j}") for j in range(3)]
    assert sum(int(n.split()[0].replace(",", "")) for _, n in printed) == total
    bad = subprocess.run(
        [
            *(sys.executable, "-m", "sniper", "reshard", "--num-ps", "2", "--out", str(tmp_path)),
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr == (
        f"sniper: error: {tmp_path / 'missing'} has no manifest.json: not a sniper checkpoint\n"
    )
