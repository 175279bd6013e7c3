"""``sniper train --launcher inprocess``: the whole job in one process, its roles on threads
passing arrays without gRPC; the same job as the local processes' (checkpoints, resume,
auto_shard and the report), and the same batches trained."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from sniper.cluster import (
    ServeConfig,
    TrainConfig,
    load_serve_config,
    load_train_config,
    plan_training,
)
from sniper.cluster._checkpoint import JobCheckpoint, load_job, step_name
from sniper.cluster._inprocess import _hub_config
from sniper.cluster._placement import workload_placement
from sniper.cluster._process import serve_config_command
from sniper.cluster._serve import hub_cluster
from sniper.cluster._servers import hub_configs
from sniper.data import load_workload
from sniper.placement import Placement
from sniper.roles import HubConfig
from sniper.roles._checkpoint import MANIFEST
from tests.cluster._sniper import sniper

JOB = """\
scale = 0.005
num_batches = 30
hidden = [16]
num_ps = 3
"""


def _train(tmp_path: Path, output: str, *args: str) -> dict[str, object]:
    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet", "--output", output, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, object] = json.loads((tmp_path / output).read_text())
    report["stdout"] = done.stdout
    return report


def test_one_process_trains_what_processes_train_and_resumes(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    local = _train(tmp_path, "local.json", "--launcher", "local")
    threads = _train(tmp_path, "threads.json", "--launcher", "inprocess")
    for key in ("steps", "examples", "eval_batches"):
        assert threads[key] == local[key], key
    # One process's CPU is not any one ps's: the report leaves the per-ps figure out.
    assert threads["ps_cpu_seconds"] == [] and len(local["ps_cpu_seconds"]) == 3  # type: ignore[arg-type]

    first = _train(
        tmp_path,
        "first.json",
        *("--launcher", "inprocess", "--checkpoint-dir", "ck", "--checkpoint-every", "10"),
        *("--max-steps", "10"),
    )
    assert first["steps"] == 10 and first["checkpoints"] == 1
    resumed = _train(
        tmp_path, "resumed.json", "--launcher", "inprocess", "--resume", "ck", "--metrics-port", "0"
    )
    for role in ("the trainer", "ps 0", "ps 2", "hub 0"):  # every role serves its metrics
        assert f"metrics of {role} on http://127.0.0.1:" in str(resumed["stdout"]), role
    assert resumed["resumed_from_step"] == 10
    assert (resumed["steps"], resumed["examples"]) == (local["steps"], local["examples"])


def test_the_number_of_ps_follows_the_launcher_unless_set_and_a_resumed_job_keeps_its_own(
    tmp_path: Path,
) -> None:
    # One ps in one process (a second would share its loop and scheduler), two as processes.
    (tmp_path / "job.toml").write_text(JOB.replace("num_ps = 3\n", ""))
    one = _train(
        tmp_path,
        "one.json",
        *("--launcher", "inprocess", "--checkpoint-dir", "ck", "--checkpoint-every", "10"),
        *("--max-steps", "10"),
    )
    assert "started 1 ps and 1 hub(s) in this process" in str(one["stdout"])
    assert load_job(tmp_path / "ck").num_ps == 1
    fresh = _train(tmp_path, "fresh.json", "--launcher", "local", "--max-steps", "5")
    assert "started 2 ps on 127.0.0.1" in str(fresh["stdout"])
    resumed = _train(tmp_path, "resumed.json", "--launcher", "local", "--resume", "ck")
    assert "started 1 ps on 127.0.0.1" in str(resumed["stdout"])
    assert resumed["resumed_from_step"] == 10
    # Set, it wins over the checkpoint's: the variables are regrouped for it (the step of 10
    # again: the resumed run saved its end).
    regrouped = _train(
        tmp_path,
        "regrouped.json",
        *("--launcher", "inprocess", "--resume", f"ck/{step_name(10)}", "--num-ps", "2"),
    )
    assert "started 2 ps and 1 hub(s) in this process" in str(regrouped["stdout"])
    assert regrouped["steps"] == resumed["steps"]


def test_a_config_s_number_of_ps_as_a_library_resolves_it() -> None:
    # TrainConfig is public: its default 0 is resolved where a launcher is, never divided by.
    assert TrainConfig(launcher="inprocess").with_num_ps(None).num_ps == 1
    assert TrainConfig(launcher="local").with_num_ps(None).num_ps == 2
    assert TrainConfig(launcher="inprocess", num_ps=3).with_num_ps(None).num_ps == 3
    assert TrainConfig().worker_threads(TrainConfig().num_ps) >= 1


def test_inprocess_starts_its_own_roles(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    refused = sniper(
        tmp_path, "train", "--config", "job.toml", "--launcher", "inprocess", "--ps", "h:1"
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        "launcher inprocess starts its own ps and hubs: drop --ps, --hub and --cluster-spec "
        "(or use launcher local)"
    )
    # Set in the file, not on the command line, it is refused the same way.
    (tmp_path / "job.toml").write_text(JOB + 'launcher = "inprocess"\n')
    again = sniper(tmp_path, "train", "--config", "job.toml", "--hub", "h:1")
    assert again.returncode == 2 and "launcher inprocess starts its own" in again.stderr


def test_the_hubs_of_one_process_read_on_its_loop() -> None:
    """The one-process job's hubs read on the loop every role shares (one thread fewer at the
    GIL: CHANGELOG.md, 2026-11-24, 7a9b29a); a hub of its own process, on a thread."""
    config = TrainConfig(num_hubs=2)
    hubs = [_hub_config(config, index, None, Placement(2)) for index in range(2)]
    assert [(hub.hub_index, hub.read_on_loop) for hub in hubs] == [(0, True), (1, True)]
    assert not HubConfig().read_on_loop


def _held(job: JobCheckpoint) -> dict[str, int]:
    """The ps each variable of a job checkpoint was saved by."""
    return {
        entry["name"]: index
        for index in range(job.num_ps)
        for entry in json.loads((job.ps_directory(index) / MANIFEST).read_text())["variables"]
    }


def test_a_fresh_job_places_variables_balanced_unless_told_to_hash(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    config = load_train_config(tmp_path / "job.toml", {})
    workload = load_workload(config.workload)
    balanced = plan_training(config, workload).placement(config.num_ps)
    assert balanced.owners  # hashing leaves seed_ctr's 3 ps uneven: variables move
    # What `sniper placement --scale 0.005 --num-ps 3` shows is the job's placement.
    assert workload_placement(workload, config.num_ps, "balanced", config.scale)[0] == balanced
    (tmp_path / "bad.toml").write_text(JOB + 'placement = "round_robin"\n')
    refused = sniper(tmp_path, "train", "--config", "bad.toml", "--quiet")
    assert refused.returncode == 2
    assert "placement must be one of 'balanced', 'hash', got 'round_robin'" in refused.stderr
    for launcher, placement in [
        ("inprocess", "balanced"),
        ("local", "balanced"),
        ("inprocess", "hash"),
    ]:
        name = f"{launcher}-{placement}"
        (tmp_path / f"{name}.toml").write_text(JOB + f'placement = "{placement}"\n')
        done = sniper(
            tmp_path,
            *("train", "--config", f"{name}.toml", "--quiet", "--launcher", launcher),
            *("--checkpoint-dir", name, "--checkpoint-every", "20", "--output", f"{name}.json"),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads((tmp_path / f"{name}.json").read_text())
        expected = balanced if placement == "balanced" else Placement(config.num_ps)
        assert report["steps"] > 20 and report["placement_version"] == expected.version, name
        # The hubs start with the placement, in a process of their own too: every ps is fed
        # each batch once, never answering NOT_FOUND to a feed by hashing first.
        fed = [ops["FeedSample"]["count"] for ops in report["ps_ops"]]
        assert fed == [30] * config.num_ps, name
        job = load_job(tmp_path / name)
        assert job.placement == expected, name
        # Each ps saved exactly the variables the placement gives it: they were created,
        # fed, trained and saved there.
        assert _held(job) == {n: expected.owner(n) for n in _held(job)}, name
        assert len(_held(job)) == 76


def test_the_hubs_a_job_starts_feed_by_its_placement_from_their_first_batch(
    tmp_path: Path,
) -> None:
    """A hub process gets the job's placement in its config, through the TOML file the
    launcher writes, and builds its cluster with it: it never feeds by hashing first."""
    placement = Placement(2, {"embedding_11": 1}, 1)
    ps = [("127.0.0.1", 1), ("127.0.0.1", 2)]
    (config,) = hub_configs(TrainConfig(num_ps=2), ps, None, placement)
    serve_config_command(config, tmp_path / "hub.toml")
    loaded = load_serve_config(tmp_path / "hub.toml", {})
    assert (loaded.placement_owners, loaded.placement_version) == ({"embedding_11": 1}, 1)
    assert anyio.run(_started_placement, loaded, backend="asyncio") == placement
    # A hub started by hand with no placement hashes until SetPlacement reaches it.
    by_hand = load_serve_config(None, {"role": "hub", "ps": "h:1,h:2"})
    assert anyio.run(_started_placement, by_hand, backend="asyncio") == Placement(2)


async def _started_placement(config: ServeConfig) -> Placement:
    """The placement a hub server of ``config`` feeds by when it starts (its gRPC clients
    made in the loop it would serve on, and closed)."""
    cluster = hub_cluster(config)
    try:
        return cluster.placement
    finally:
        cluster.close()
