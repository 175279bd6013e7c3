"""Launchers by name: the built-ins opened lazily, plugins from ``sniper.launchers``, one
interface (``sniper.cluster.Launcher``) for all of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sniper.cluster import (
    LAUNCHER_NAMES,
    Launch,
    Launcher,
    TrainConfig,
    launcher_names,
    open_launcher,
    plan_training,
)
from sniper.cluster._inprocess import InProcessLauncher
from sniper.cluster._local import LocalLauncher
from sniper.data import load_workload

THEIR_LAUNCHER = '''\
"""A third-party launcher: the in-process one under another name, saying so."""

import contextlib

from sniper.cluster._inprocess import InProcessLauncher


class TheirLauncher(InProcessLauncher):
    @contextlib.contextmanager
    def start(self, launch):
        print("their launcher starts the job", flush=True)
        with super().start(launch) as attempt:
            yield attempt
'''


def test_the_built_ins_are_opened_by_name() -> None:
    assert LAUNCHER_NAMES == ("local", "inprocess", "ray")
    assert launcher_names()[:3] == LAUNCHER_NAMES
    assert type(open_launcher("local")) is LocalLauncher
    assert type(open_launcher("inprocess")) is InProcessLauncher
    assert all(isinstance(open_launcher(name), Launcher) for name in ("local", "inprocess"))


def test_an_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(LookupError, match=r"^no launcher named 'nope'; valid names are: local, "):
        open_launcher("nope")
    with pytest.raises(ValueError, match=r"^launcher must be one of 'auto', 'local', 'inprocess'"):
        TrainConfig(launcher="nope")


def test_ray_is_imported_only_when_its_launcher_is_opened() -> None:
    code = (
        "import sys\nfrom sniper.cluster import open_launcher\n"
        "open_launcher('local'), open_launcher('inprocess')\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m == 'sniper.cluster._ray'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["inprocess", "ray"])
def test_a_launcher_that_starts_its_own_roles_refuses_named_servers(name: str) -> None:
    config = TrainConfig(scale=0.005, num_batches=5, num_ps=1)
    plan = plan_training(config, load_workload("seed_ctr"))
    launch = Launch(config, plan, None, ps="127.0.0.1:7000")
    with (
        pytest.raises(ValueError, match=f"^launcher {name} starts its own ps and hubs"),
        open_launcher(name).start(launch),
    ):
        pass


def test_a_plugin_launcher_runs_sniper_train(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "theirpkg").mkdir(parents=True)
    (site / "theirpkg" / "__init__.py").write_text("")
    (site / "theirpkg" / "launcher.py").write_text(THEIR_LAUNCHER)
    info = site / "theirpkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: theirpkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[sniper.launchers]\ntheirs = theirpkg.launcher:TheirLauncher\n"
    )
    (tmp_path / "job.toml").write_text(
        'launcher = "theirs"\nscale = 0.005\nnum_batches = 20\nhidden = [8]\nprogress = false\n'
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "sniper", "train", "--config", "job.toml", "--output", "r.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ | {"PYTHONPATH": path},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "their launcher starts the job" in done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["config"]["launcher"] == "theirs" and report["steps"] > 0
