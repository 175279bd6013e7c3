"""A ``capacity = 0`` table on a user's table is sized from the ids the data holds (counted in
one pass before any process starts), as on Parquet converted from synthetic data, a resumed job
keeps its checkpoint's sizes, a table that runs out of rows says so at the end of the run, and
a written capacity smaller than the rows the batches in flight hold is refused before any
process starts."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sniper.cluster import TrainConfig, plan_training
from sniper.data import ParquetReader, convert, load_workload
from sniper.placement import (
    COUNT_HEADROOM,
    INFLIGHT_HEADROOM,
    MAX_AUTO_CAPACITY,
    auto_capacity,
    counted_capacity,
)
from tests.cluster._sniper import sniper

WORKLOAD = load_workload("seed_ctr")
FEATURES: dict[str, Any] = {"label": "clicked", "sparse": ["user", "country"]}


def write_ids(path: Path, users: np.ndarray, seed: int = 0) -> None:
    """A table of ``users`` (one row each), a country of 30 and a click that depends on the
    user: a model learns it only if it keeps every user's row."""
    rng = np.random.default_rng(seed)
    clicked = (users * 2654435761 % 1000 < 300).astype(np.int64)
    table = pa.table(
        {
            "user": pa.array(users, pa.int64()),
            "country": pa.array([f"c{c}" for c in rng.integers(0, 30, len(users))]),
            "clicked": pa.array(clicked),
        }
    )
    pq.write_table(table, path, row_group_size=100_000)


@pytest.mark.parametrize("users", [1_300_000, 4_200_000])
def test_a_users_table_gets_rows_for_the_ids_it_holds(
    tmp_path: Path, users: int, caplog: pytest.LogCaptureFixture
) -> None:
    # More users than the 1,048,576 rows a table of a file got before it was counted: they
    # were evicted and their rows trained from scratch again (train AUC 0.50 against 0.82).
    write_ids(tmp_path / "t.parquet", np.arange(users))
    config = TrainConfig(data=f"parquet:{tmp_path / 't.parquet'}", features=FEATURES)
    with caplog.at_level(logging.INFO, "sniper.train"):
        tables = plan_training(config, WORKLOAD).tables
    wanted = min(users * COUNT_HEADROOM, MAX_AUTO_CAPACITY)
    assert abs(tables["user"].capacity - wanted) <= 0.03 * wanted
    assert tables["country"].capacity == 1024  # the least a table sniper sizes gets
    assert "counting their distinct ids" in caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if users * COUNT_HEADROOM <= MAX_AUTO_CAPACITY:
        assert warnings == []
    else:  # past the most rows sniper gives a table: said before the run, with the key to set
        (warning,) = warnings
        assert warning.startswith("variables.user: the data holds about 4,")
        assert "set variables.user.capacity" in warning


def test_a_resumed_job_keeps_its_checkpoints_sizes_or_grows_them_to_its_data(
    tmp_path: Path,
) -> None:
    write_ids(tmp_path / "t.parquet", np.arange(5_000))
    config = TrainConfig(data=f"parquet:{tmp_path / 't.parquet'}", features=FEATURES)
    kept = {"user": {"capacity": 9_000, "shards": 2}, "country": {"capacity": 2_048}}
    tables = plan_training(config, WORKLOAD, kept=kept).tables
    assert (tables["user"].capacity, tables["user"].shards) == (9_000, 2)
    assert (tables["country"].capacity, tables["country"].shards) == (2_048, 1)
    # Data of more ids than the checkpoint's rows: the table grows, its shards stay.
    kept["user"]["capacity"] = 1_500
    grown = plan_training(config, WORKLOAD, kept=kept).tables["user"]
    assert abs(grown.capacity - 5_000 * COUNT_HEADROOM) <= 0.03 * 5_000
    assert grown.shards == 2
    # A recorded entry without a capacity is counted, as a variable the checkpoint lacks.
    counted = plan_training(config, WORKLOAD, kept={"user": {"shards": 2}}).tables["user"]
    assert counted.capacity == grown.capacity and counted.shards == 2
    # A size the config sets is the config's: check_resume refuses it if it shrank. (It holds
    # the 5,000 users of the 5 batches in flight: fewer rows would be refused.)
    written = {"user": {"capacity": 8_000}}
    fixed = TrainConfig(data=config.data, features=FEATURES, variables=written)
    assert plan_training(fixed, WORKLOAD, kept=kept).tables["user"].capacity == 8_000


def test_a_variable_of_no_ids_gets_the_least_rows(tmp_path: Path) -> None:
    table = pa.table({"user": pa.array([None] * 300, pa.string()), "clicked": [0, 1, 1] * 100})
    pq.write_table(table, tmp_path / "t.parquet")
    features = {"label": "clicked", "sparse": ["user"]}
    config = TrainConfig(data=f"parquet:{tmp_path / 't.parquet'}", features=features)
    assert plan_training(config, WORKLOAD).tables["user"].capacity == 1024


JOB = """\
data = "parquet:{data}"
batch_size = 200
hidden = [8]
checkpoint_dir = "{checkpoints}"
checkpoint_every = 20

[variables.default]
dim = 4
{capacity}

[features]
label = "clicked"
sparse = ["user", "country"]
"""


def train(
    directory: Path, data: str, *args: str, capacity: str = "", checkpoints: str = "ck"
) -> Any:
    (directory / "job.toml").write_text(
        JOB.format(data=data, capacity=capacity, checkpoints=checkpoints)
    )
    done = sniper(directory, "train", "--config", "job.toml", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((directory / "train_report.json").read_text()), done.stdout


def rows_of(step: Path, name: str) -> int:
    """Rows of variable ``name`` in a job checkpoint's step (its one ps' part)."""
    manifest = json.loads((step / "ps-0" / "manifest.json").read_text())
    file = next(v["file"] for v in manifest["variables"] if v["name"] == name)
    with np.load(step / "ps-0" / file) as saved:
        return len(saved["signs"])


def test_a_table_that_runs_out_of_rows_says_so_and_a_resume_on_more_ids_grows_it(
    tmp_path: Path,
) -> None:
    write_ids(tmp_path / "a.parquet", np.arange(12_000))
    write_ids(tmp_path / "b.parquet", np.arange(6_000, 40_000), seed=1)  # half of a's too

    # The hub's read-ahead pins up to 20 batches' ids (4,000): a table must hold more.
    report, stdout = train(tmp_path, "a.parquet", capacity="capacity = 8000")
    capacity, evictions = report["evicted"]["user"]
    assert capacity == 8_000 and evictions >= 12_000 - 8_000
    assert f"variables.user: filled its 8,000 rows and evicted {evictions:,}" in stdout
    assert "country" not in report["evicted"]

    report, stdout = train(tmp_path, "a.parquet", checkpoints="ck0")
    assert report["evicted"] == {} and "evicted" not in stdout
    sized = json.loads(sorted((tmp_path / "ck0").glob("step-*/job.json"))[-1].read_text())
    capacity = sized["config"]["variables"]["user"]["capacity"]
    assert 12_000 <= capacity <= 12_000 * COUNT_HEADROOM * 1.03

    # Other data of more ids on resume: the table grows to them (the checkpoint's rows
    # imported by sign), where counting anew once sized it otherwise and the resume was
    # refused as a changed table; nothing is evicted.
    done = train(
        tmp_path, "b.parquet", "--resume", "ck0", "--allow-change", "data", checkpoints="ck0"
    )
    report, stdout = done
    assert report["evicted"] == {}
    last = sorted((tmp_path / "ck0").glob("step-*"))[-1]
    grown = json.loads((last / "job.json").read_text())["config"]["variables"]["user"]
    assert 34_000 <= grown["capacity"] <= 34_000 * COUNT_HEADROOM * 1.03
    # Every user of both: a's first 6,000, which b lacks, came through the growth.
    assert rows_of(last, "user") == 40_000
    # Other data is read from its start: its 170 batches, every 10th held out. The
    # checkpoint's position (batch 59 of a.parquet) once skipped b.parquet's first 60.
    assert report["steps"] - report["resumed_from_step"] == 153
    # A capacity written on a resume may grow a table too, not shrink it.
    more = ("--resume", "ck0", "--epochs", "2", "--allow-change", "epochs")
    train(tmp_path, "b.parquet", *more, capacity="capacity = 60000", checkpoints="ck0")
    last = sorted((tmp_path / "ck0").glob("step-*"))[-1]
    assert (
        json.loads((last / "job.json").read_text())["config"]["variables"]["user"]["capacity"]
        == 60_000
    )
    (tmp_path / "job.toml").write_text(
        JOB.format(data="b.parquet", capacity="capacity = 30000", checkpoints="ck0")
    )
    shrunk = sniper(tmp_path, "train", "--config", "job.toml", "--resume", "ck0")
    assert shrunk.returncode == 2
    assert "variables.*.capacity 60000 -> 30000 (the checkpoint fixed these" in shrunk.stderr


IN_FLIGHT = (
    "up to 21 batches are fed to the ps and not yet pushed at once (num_hubs 1 x (max_in_flight"
    " 8 + queue_size 8) + num_trainers 1 x (prefetch 4 + 1)), each keeping its rows until its push"
)
"""Why the batches in flight of a job of the default keys hold rows, as a refusal says."""


def too_small(capacity: int, why: str, first: str, distinct: int, least: int) -> str:
    """The refusal of ``variables.user.capacity = capacity``, whole."""
    fewer = " (or lower queue_size, max_in_flight or prefetch)" if "lookup" not in why else ""
    return (
        f"variables.user.capacity = {capacity} is too small for the batches in flight: {why}, "
        f"and the data's {first} {distinct:,} distinct user ids, so the job would stop part "
        f"way with RESOURCE_EXHAUSTED; set it to at least {least}{fewer}"
    )


def test_a_capacity_below_the_rows_the_batches_in_flight_hold_is_refused(tmp_path: Path) -> None:
    # Every example a new user: each batch of 200 holds 200 ids no other batch has, and the
    # ps keeps them until the batch's push. Such a job once trained until the hub read far
    # enough ahead, then stopped with RESOURCE_EXHAUSTED ("raise its capacity").
    path = tmp_path / "t.parquet"
    write_ids(path, np.arange(6_000))

    def planned(capacity: int, **keys: Any) -> int:
        config = TrainConfig(
            data=f"parquet:{path}",
            features=FEATURES,
            batch_size=200,
            num_hubs=1,
            variables={"user": {"capacity": capacity}},
            **keys,
        )
        return plan_training(config, WORKLOAD).tables["user"].capacity

    least = math.ceil(21 * 200 * INFLIGHT_HEADROOM)
    assert planned(least) == least
    refusal = too_small(least - 1, IN_FLIGHT, "first 21 hold", 4_200, least)
    with pytest.raises(ValueError, match=f"^{re.escape(refusal)}$"):
        planned(least - 1)

    # Fewer batches in flight hold fewer rows: 2 fed, 2 queued, 1 read ahead, 1 training, and
    # the batch of eval_data being scored.
    few = {"max_in_flight": 2, "queue_size": 2, "prefetch": 1, "eval_data": f"parquet:{path}"}
    least = math.ceil(7 * 200 * INFLIGHT_HEADROOM)
    assert planned(least, **few) == least
    why = (
        "up to 7 batches are fed to the ps and not yet pushed at once (num_hubs 1 x "
        "(max_in_flight 2 + queue_size 2) + num_trainers 1 x (prefetch 1 + 1) + 1 of "
        "eval_data), each keeping its rows until its push"
    )
    refusal = too_small(least - 1, why, "first 7 hold", 1_400, least)
    with pytest.raises(ValueError, match=f"^{re.escape(refusal)}$"):
        planned(least - 1, **few)

    # Mapped at its lookup, a batch holds rows only while it is looked up: one at a time.
    why = 'a ps maps a batch\'s ids to rows at its lookup (map_rows = "lookup"), one at a time'
    refusal = too_small(224, why, "first batch holds", 200, 225)
    with pytest.raises(ValueError, match=f"^{re.escape(refusal)}$"):
        planned(224, map_rows="lookup")
    assert planned(225, map_rows="lookup") == 225


def test_sniper_train_refuses_a_table_the_batches_in_flight_overfill_and_trains_at_the_least(
    tmp_path: Path,
) -> None:
    write_ids(tmp_path / "a.parquet", np.arange(12_000))  # 60 batches of 200 new users

    (tmp_path / "job.toml").write_text(
        JOB.format(data="a.parquet", capacity="capacity = 1000", checkpoints="ck")
    )
    refused = sniper(tmp_path, "train", "--config", "job.toml", "--num-hubs", "1")
    assert refused.returncode == 2, refused.stderr[-3000:]
    refusal = too_small(1000, IN_FLIGHT, "first 21 hold", 4_200, 4_725)
    assert refused.stderr.splitlines() == [f"sniper: error: {refusal}"]
    assert not (tmp_path / "ck").exists() and not (tmp_path / "train_report.json").exists()

    # At the least that works the job trains to its end, evicting the users it cannot hold.
    report, _ = train(tmp_path, "a.parquet", "--num-hubs", "1", capacity="capacity = 4725")
    assert report["steps"] == 60 - 6  # every 10th batch held out
    capacity, evictions = report["evicted"]["user"]
    assert capacity == 4_725 and evictions >= 12_000 - 4_725


def test_parquet_converted_from_synthetic_data_is_counted_as_any_file(tmp_path: Path) -> None:
    """A file ``sniper data convert synthetic`` wrote holds the ids its generator drew, fewer
    than the vocabulary it records (every id the generator could draw): its tables are sized
    from the ids counted in it, as a user's file's are. The generator's own data, whose source
    it is, keeps its vocabulary."""
    path = tmp_path / "converted.parquet"
    convert("synthetic", "seed_ctr", path, num_batches=10, batch_size=1_000, scale=0.02)
    tables = plan_training(TrainConfig(data=f"parquet:{path}"), WORKLOAD).tables
    table = pq.read_table(path)
    distinct = {
        name: len(np.unique(table[name].combine_chunks().values.to_numpy())) for name in tables
    }
    for name, spec in tables.items():
        wanted = counted_capacity(distinct[name])
        assert abs(spec.capacity - wanted) <= 0.03 * wanted, (name, distinct[name])
    recorded = ParquetReader(path).shape
    assert recorded is not None
    most = max(distinct, key=distinct.__getitem__)  # 10,874 ids of a vocabulary of 100,000
    assert tables[most].capacity < recorded[1][most] / 5
    generated = plan_training(TrainConfig(), WORKLOAD).tables  # seed_ctr at scale 0.02
    assert generated[most].capacity == auto_capacity(recorded[1][most])
