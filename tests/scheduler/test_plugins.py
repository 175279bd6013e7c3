"""Scheduler backends from other distributions, found through the ``sniper.schedulers`` group.

Each test installs a real distribution into ``tmp_path`` (a package plus a ``.dist-info`` with
``METADATA`` and ``entry_points.txt``) and puts it on ``sys.path``, which is all that
``importlib.metadata`` needs to find it: the same thing ``pip install`` leaves behind.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sniper._contracts import check_scheduler
from sniper.scheduler import SCHEDULER_NAMES, _registry, open_scheduler, scheduler_names

from ._helpers import WAIT

pytestmark = pytest.mark.timeout(60)

THEIR_SCHEDULER = '''\
"""A third-party backend: sniper's thread pool under another name."""

from sniper.scheduler._thread_pool import ThreadPoolScheduler


class TheirScheduler(ThreadPoolScheduler):
    name = "theirs"


def helper():
    """Not a scheduler: an entry point pointing here is a packaging mistake."""
'''

PACKAGES = ("theirpkg", "otherpkg")


def install(root: Path, package: str, entry_points: dict[str, str]) -> None:
    """Install ``package`` 0.1 with ``entry_points`` in the ``sniper.schedulers`` group."""
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("")
    (root / package / "scheduler.py").write_text(THEIR_SCHEDULER)
    (root / package / "raising.py").write_text('raise RuntimeError("needs a GPU driver")\n')
    info = root / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    lines = [f"{name} = {target}" for name, target in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(["[sniper.schedulers]", *lines, ""]))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` to install distributions into, forgotten after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_registry.PLUGINS, "warned", set())
    yield tmp_path
    for module in list(sys.modules):
        if module.split(".")[0] in PACKAGES:
            del sys.modules[module]


@pytest.fixture
def theirs(site: Path) -> Path:
    install(site, "theirpkg", {"theirs": "theirpkg.scheduler:TheirScheduler"})
    return site


def test_a_plugin_opens_by_name_and_runs_a_task(theirs: Path) -> None:
    assert scheduler_names() == (*SCHEDULER_NAMES, "theirs")
    with open_scheduler("theirs", workers=2) as scheduler:
        assert type(scheduler).__qualname__ == "TheirScheduler"
        assert scheduler.submit("k", pow, 2, 10).result(timeout=WAIT) == 1024
        stats = scheduler.statistics()
        assert (stats.backend, stats.workers) == ("theirs", 2)


@pytest.mark.anyio
async def test_a_plugin_keeps_the_scheduler_contract(theirs: Path) -> None:
    await check_scheduler(lambda **options: open_scheduler("theirs", workers=2, **options))


def test_plugins_are_listed_after_the_built_ins_in_order(site: Path) -> None:
    target = "theirpkg.scheduler:TheirScheduler"
    install(site, "theirpkg", {"zeta": target, "alpha": target})
    assert scheduler_names() == (*SCHEDULER_NAMES, "alpha", "zeta")
    assert SCHEDULER_NAMES == ("adaptive", "inline", "per_variable", "thread_pool", "work_stealing")


def test_an_unknown_name_lists_the_plugins_too(theirs: Path) -> None:
    message = (
        "no scheduler named 'fifo'; valid names are: "
        "adaptive, inline, per_variable, thread_pool, work_stealing, theirs"
    )
    with pytest.raises(LookupError, match=f"^{re.escape(message)}$"):
        open_scheduler("fifo", workers=1)


def test_a_plugin_that_cannot_be_imported_names_its_distribution(site: Path) -> None:
    install(site, "theirpkg", {"gone": "theirpkg.missing:TheirScheduler"})
    assert "gone" in scheduler_names()  # listing reads metadata only
    message = (
        "the scheduler plugin 'gone = theirpkg.missing:TheirScheduler' (from theirpkg 0.1) "
        "failed to import: ModuleNotFoundError: No module named 'theirpkg.missing'; "
        "fix or reinstall theirpkg 0.1, or choose another scheduler"
    )
    with pytest.raises(LookupError, match=f"^{re.escape(message)}$") as info:
        open_scheduler("gone", workers=1)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_a_plugin_whose_import_raises_names_the_error(site: Path) -> None:
    install(site, "theirpkg", {"gpu": "theirpkg.raising:GpuScheduler"})
    message = (
        "the scheduler plugin 'gpu = theirpkg.raising:GpuScheduler' (from theirpkg 0.1) "
        "failed to import: RuntimeError: needs a GPU driver;"
    )
    with pytest.raises(LookupError, match=f"^{re.escape(message)}"):
        open_scheduler("gpu", workers=1)


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        ("theirpkg.scheduler:helper", "<function helper at 0x"),
        ("theirpkg.scheduler:ThreadPoolScheduler.name", "'thread_pool'"),
        ("builtins:dict", "<class 'dict'>"),
    ],
)
def test_an_entry_point_that_is_not_a_scheduler_class(site: Path, target: str, shown: str) -> None:
    install(site, "theirpkg", {"wrong": target})
    start = f"the scheduler plugin 'wrong = {target}' (from theirpkg 0.1) points at {shown}"
    end = (
        ", which is not a sniper.scheduler.Scheduler subclass; "
        "the entry point must name the backend class"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(start)}.*{re.escape(end)}$"):
        open_scheduler("wrong", workers=1)


def test_built_in_names_win_over_plugins(site: Path, caplog: pytest.LogCaptureFixture) -> None:
    install(site, "theirpkg", {"inline": "theirpkg.scheduler:TheirScheduler"})
    with caplog.at_level(logging.WARNING, logger="sniper.scheduler"):
        assert scheduler_names() == SCHEDULER_NAMES
        assert scheduler_names() == SCHEDULER_NAMES
    assert caplog.messages == [
        "ignoring the scheduler plugin 'inline = theirpkg.scheduler:TheirScheduler' "
        "(from theirpkg 0.1): 'inline' is a built-in scheduler, which always wins; "
        "register the plugin under another name"
    ]
    with open_scheduler("inline", workers=1) as scheduler:
        assert type(scheduler).__module__ == "sniper.scheduler._inline"
    assert "theirpkg.scheduler" not in sys.modules


def test_a_name_two_distributions_register_is_refused(site: Path) -> None:
    install(site, "theirpkg", {"twice": "theirpkg.scheduler:TheirScheduler"})
    install(site, "otherpkg", {"twice": "otherpkg.scheduler:TheirScheduler"})
    assert scheduler_names().count("twice") == 1
    with pytest.raises(LookupError, match=r"^the scheduler name 'twice' is registered by") as info:
        open_scheduler("twice", workers=1)
    message = str(info.value)
    assert "'twice = theirpkg.scheduler:TheirScheduler' (from theirpkg 0.1)" in message
    assert "'twice = otherpkg.scheduler:TheirScheduler' (from otherpkg 0.1)" in message
    assert message.endswith("; uninstall all but one")


def _env_with(path: Path) -> dict[str, str]:
    existing = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(path), existing]))}


def test_importing_sniper_imports_no_plugin_and_no_contract_checks(site: Path) -> None:
    """A broken plugin cannot break ``import sniper``, and the checks stay out of it too."""
    install(site, "theirpkg", {"gpu": "theirpkg.raising:GpuScheduler"})
    code = (
        "import sys, sniper, sniper.scheduler, sniper.hashing, sniper.store\n"
        "print(','.join(sniper.scheduler.scheduler_names()))\n"
        "loaded = [m for m in sys.modules if m.startswith(('theirpkg', 'sniper._contracts'))]\n"
        "assert not loaded, loaded\n"
        "import sniper._contracts\n"
        "assert 'hypothesis' not in sys.modules, 'the checks import hypothesis only to run'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=_env_with(site),
        capture_output=True,
        text=True,
        timeout=WAIT * 3,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "adaptive,inline,per_variable,thread_pool,work_stealing,gpu\n"


def test_sniper_serve_runs_a_ps_on_a_plugin_scheduler(theirs: Path) -> None:
    """``--scheduler theirs`` is accepted wherever ``sniper serve`` checks a scheduler name."""
    command = [sys.executable, "-m", "sniper", "serve", "--role", "ps", "--port", "0"]
    command += ["--scheduler", "theirs", "--workers", "1", "--exit-on-stdin-eof"]
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env_with(theirs),
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # "" if it exits instead; the timeout covers a hang
    finally:
        # Closing stdin stops a server started with --exit-on-stdin-eof.
        _, stderr = process.communicate(timeout=WAIT * 3)
    assert re.fullmatch(r"listening on 127\.0\.0\.1:[0-9]+\n", first), stderr
    assert process.returncode == 0, stderr


def test_sniper_serve_reports_a_plugin_that_is_not_a_class_in_one_line(site: Path) -> None:
    install(site, "theirpkg", {"wrong": "theirpkg.scheduler:helper"})
    command = [sys.executable, "-m", "sniper", "serve", "--role", "ps", "--port", "0"]
    done = subprocess.run(
        [*command, "--scheduler", "wrong", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=WAIT * 3,
        env=_env_with(site),
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "sniper: error: the scheduler plugin 'wrong = theirpkg.scheduler:helper' (from "
        "theirpkg 0.1) points at <function helper at 0x"
    )
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
