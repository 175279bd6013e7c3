"""What ``num_trainers`` asks of a config, refused in one line before any process starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sniper.cluster import TrainConfig
from tests.cluster._sniper import sniper


def test_each_rank_gets_a_hub_of_its_own_unless_the_config_says() -> None:
    assert TrainConfig(num_trainers=2).num_hubs == 2
    assert TrainConfig(num_trainers=3, num_hubs=6).num_hubs == 6
    assert TrainConfig().num_hubs == 1
    with pytest.raises(
        ValueError,
        match=r"^num_hubs = 1 is fewer than num_trainers = 2: each rank reads hubs of its "
        r"own \(hub h is rank h % 2's\); give at least 2 hubs, or leave num_hubs out for one "
        r"per rank$",
    ):
        TrainConfig(num_trainers=2, num_hubs=1)


def test_the_in_process_launcher_is_one_rank() -> None:
    with pytest.raises(ValueError, match=r"num_trainers = 2 needs launcher = 'local'"):
        TrainConfig(num_trainers=2, num_hubs=2, launcher="inprocess")


def test_auto_shard_is_one_rank_s() -> None:
    with pytest.raises(ValueError, match=r"auto_shard with num_trainers = 2 is not supported"):
        TrainConfig(num_trainers=2, num_hubs=2, auto_shard=True)


def test_local_sgd_checkpoints_right_after_an_average() -> None:
    every_5 = TrainConfig(
        num_trainers=2,
        num_hubs=2,
        sync="local_sgd",
        sync_every=5,
        checkpoint_dir="ck",
        checkpoint_every=10,
    )
    with pytest.raises(ValueError, match=r"checkpoint_every = 10 must be a multiple of sync_"):
        dataclasses.replace(every_5, sync_every=4)
    with pytest.raises(ValueError, match=r"sync must be 'allreduce' or 'local_sgd', got 'x'"):
        TrainConfig(sync="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sync_every"):
        TrainConfig(sync_every=0)


def test_num_trainers_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="num_trainers"):
        TrainConfig(num_trainers=0)


def test_the_command_refuses_in_one_line(tmp_path: Path) -> None:
    done = sniper(tmp_path, "train", "--num-trainers", "2", "--launcher", "inprocess")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("sniper: error: num_trainers = 2")
    done = sniper(tmp_path, "train", "--num-trainers", "3", "--num-hubs", "2")
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("sniper: error: num_hubs = 2 is fewer than num_trainers = 3")
    )
    done = sniper(tmp_path, "train", "--rank", "1")
    assert done.returncode == 2
    assert "give --rank and --master together" in done.stderr


def test_a_resume_keeps_the_number_of_ranks(tmp_path: Path) -> None:
    from sniper.cluster import plan_training
    from sniper.cluster._checkpoint import JobCheckpoint
    from sniper.cluster._resume import check_resume, job_config
    from sniper.data import load_workload

    two = TrainConfig(num_trainers=2, num_batches=4)
    plan = plan_training(two, load_workload(two.workload))
    checkpoint = JobCheckpoint(tmp_path, 4, 2, 2, {}, {}, [], job_config(two, plan))
    check_resume(checkpoint, two, plan)  # num_hubs left out both times: one per rank
    check_resume(checkpoint, dataclasses.replace(two, num_hubs=2), plan)
    with pytest.raises(ValueError, match=r"num_hubs 2 -> 4 \(the checkpoint fixed these"):
        check_resume(checkpoint, dataclasses.replace(two, num_hubs=4), plan)
    one = TrainConfig(num_hubs=2, num_batches=4)
    with pytest.raises(ValueError, match=r"num_trainers 2 -> 1 \(the checkpoint fixed these"):
        check_resume(checkpoint, one, plan)
    # A checkpoint of a sniper before ranks was trained by one.
    older = {k: v for k, v in job_config(one, plan).items() if k != "num_trainers"}
    check_resume(JobCheckpoint(tmp_path, 4, 2, 2, {}, {}, [], older), one, plan)
