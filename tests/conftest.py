"""Shared fixtures: every async test runs on asyncio and on trio through anyio's plugin.

The files that start whole jobs as processes, kill them, or start Ray are marked ``slow``:
``make test-fast`` leaves them out for a quick inner loop; ``make test`` and CI run them all.
"""

from __future__ import annotations

# Imported at collection, not first inside a test: on import hypothesis runs trio's plugin
# hook, whose register_random warns, and under filterwarnings = error a test that happened
# to import hypothesis first (tests/test_bench_profile.py alone) failed on that warning.
import hypothesis  # noqa: F401
import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


SLOW = (
    "tests/cluster/test_kill_anytime.py",
    "tests/cluster/test_user_table.py",
    "tests/cluster/test_resume.py",
    "tests/cluster/test_ray.py",
    "tests/cluster/test_hosts.py",
    "tests/cluster/test_per_host_checkpoints.py",
    "tests/cluster/test_preempt.py",
    "tests/cluster/test_ranks.py",
    "tests/cluster/test_failure_lines.py",
    "tests/cluster/test_scoring.py",
    "tests/experiment/test_run.py",
    "tests/torch/test_kill.py",
    "tests/torch/test_predict.py",
    "tests/roles/test_train_cluster.py",
    "tests/test_bench_chaos.py",
    "tests/test_bench_profile.py",
    "tests/test_bench_e2e.py",
    "tests/test_docs.py",
    "tests/test_bench_limit.py",
)
"""Test files that each take a minute or more on two cores."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix() in SLOW:
            item.add_marker(pytest.mark.slow)
