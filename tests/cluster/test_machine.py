"""A job asks no more processes and threads of its machine than it has (sniper.cluster._machine):
refused as one config error naming the numbers, before any process starts."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from sniper._config import load_config
from sniper.cluster import TrainConfig
from sniper.cluster._machine import check_machine, most_tasks
from tests.cluster._sniper import sniper

CONFIGS = sorted((Path(__file__).parents[2] / "experiments" / "configs").glob("*.toml"))


def local(config: TrainConfig) -> TrainConfig:
    return dataclasses.replace(config, launcher="local").with_num_ps(None)


def test_100000_ps_are_refused_before_any_process_starts(tmp_path: Path) -> None:
    done = sniper(tmp_path, "train", "--launcher", "local", "--num-ps", "100000", timeout=60)
    cores = os.cpu_count() or 1
    limit = max(8, 4 * cores)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "started" not in done.stdout
    assert done.stderr == (
        f"sniper: error: num_ps = 100000 and num_hubs = 1 would start 100001 processes on this "
        f"machine of {cores} core(s): at most {limit} (4 per core, at least 8); name servers "
        "started elsewhere (--ps, --hub, --cluster-spec) or use ray\n"
    )


def test_workers_beyond_the_cores_are_refused() -> None:
    config = local(TrainConfig(workers=100))
    with pytest.raises(ValueError) as info:
        check_machine(config, ps_named=False, hubs_named=False, cores=16, memory_mb=2**16)
    assert str(info.value) == (
        "workers = 100 threads per ps is more than this machine's 16 core(s) can run: at most "
        "64 (4 per core, at least 8)"
    )


def test_processes_beyond_the_memory_are_refused() -> None:
    config = local(TrainConfig(num_ps=6, num_hubs=2))
    with pytest.raises(ValueError) as info:
        check_machine(config, ps_named=False, hubs_named=False, cores=2, memory_mb=1024)
    assert str(info.value) == (
        "num_ps = 6 and num_hubs = 2 would start 8 processes of about 256 MiB each (2048 MiB) "
        "on this machine of 1024 MiB"
    )


def test_servers_named_elsewhere_do_not_count() -> None:
    config = local(TrainConfig(num_ps=500, num_hubs=1))
    check_machine(config, ps_named=True, hubs_named=False, cores=1, memory_mb=2048)


def test_the_default_and_every_experiment_config_fit_a_small_machine() -> None:
    assert most_tasks(1) == 8
    assert len(CONFIGS) >= 9
    for config in [TrainConfig(), *(load_config(TrainConfig, path, {}) for path in CONFIGS)]:
        check_machine(local(config), ps_named=False, hubs_named=False, cores=1, memory_mb=2048)
