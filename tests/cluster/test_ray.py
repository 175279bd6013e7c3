"""`sniper train --launcher ray` on a real 3-node Ray cluster (ray.cluster_utils.Cluster: a
head and two nodes, each with its own custom resource), with one trainer or two ranks. Ray
binds to the machine's interface even when told 127.0.0.1, so the cluster and the job run
inside a network namespace of their own with only `lo` up (root needed, as in CI), and the
test checks that nothing is left running in it afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sniper.runtime import command_line
from tests.cluster._sniper import two_ranks_trained

CLUSTER = """
import json, os, signal, subprocess, sys, time
from pathlib import Path
from ray.cluster_utils import Cluster

KILL = sys.argv[1] if len(sys.argv) > 1 else None  # kill -9 an actor of this class once the
# job has a checkpoint (RoleActor: a ps or hub; RankActor: a trainer rank)


def an_actor():
    here = os.readlink("/proc/self/ns/net")
    for proc in Path("/proc").iterdir():
        try:
            if os.readlink(proc / "ns" / "net") != here:
                continue
            if (proc / "cmdline").read_bytes().startswith(f"ray::{KILL}".encode()):
                return int(proc.name)
        except OSError:
            continue
    raise AssertionError(f"no {KILL} process")

cluster = Cluster(
    initialize_head=True,
    head_node_args={"num_cpus": 2, "include_dashboard": False, "resources": {"trainer_slot": 1}},
)
head = cluster.head_node.node_id
nodes = [cluster.add_node(num_cpus=1, resources={"ps_slot": 1}) for _ in range(2)]
cluster.wait_for_nodes()
try:
    train = subprocess.Popen(
        [sys.executable, "-m", "sniper", "train", "--config", "job.toml", "--quiet",
         "--launcher", "ray", "--ray-address", cluster.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    if KILL:
        while not Path("ck/latest").is_file():
            assert train.poll() is None, train.communicate()[1][-3000:]
            time.sleep(0.05)
        os.kill(an_actor(), signal.SIGKILL)
    out, err = train.communicate(timeout=300)
finally:
    cluster.shutdown()
print(json.dumps({"rc": train.returncode, "out": out, "err": err[-3000:],
                  "restarted": [line for line in err.splitlines() if "restarting" in line],
                  "ps_nodes": [node.node_id for node in nodes],
                  "head": head}))
"""


@pytest.fixture
def namespace() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a network namespace needs root and iproute2's ip")
    name = f"snray{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


JOB = (
    'scale = 0.01\nnum_batches = {batches}\nhidden = [16]\noutput = "report.json"\n{extra}'
    "[resources.ps]\nnum_cpus = 0.5\nps_slot = 1\n[resources.hub]\nnum_cpus = 0.5\n"
)


def run_in(namespace: str, tmp_path: Path, *args: str, rc: int = 0) -> dict[str, object]:
    """Run the cluster script in the namespace; what it reports of the job (which exited
    ``rc``)."""
    (tmp_path / "cluster.py").write_text(CLUSTER)
    ran = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "cluster.py", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result: dict[str, object] = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["rc"] == rc, result["err"]
    # Nothing of Ray or sniper outlives the job in the namespace (Ray's workers and agents
    # exit on their own once its head is down, so they are given a while).
    deadline = time.monotonic() + 30
    while (left := pids_in(namespace)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], [command_line(int(pid)) for pid in left]
    return result


def pids_in(namespace: str) -> list[str]:
    return subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=True
    ).stdout.split()


def test_more_ps_than_the_ray_cluster_can_hold_is_refused_at_once_naming_the_numbers(
    namespace: str, tmp_path: Path
) -> None:
    """num_ps = 50 of half a CPU and a ps_slot each, on a cluster of 4 CPUs and 2 ps_slots:
    one line with the numbers, not a wait for a placement that cannot be made."""
    (tmp_path / "job.toml").write_text(JOB.format(batches=30, extra="num_ps = 50\n"))
    result = run_in(namespace, tmp_path, rc=2)
    err = str(result["err"]).strip()
    assert err.splitlines()[-1].startswith(
        "sniper: error: 50 ps with {'CPU': 0.5, 'ps_slot': 1.0} need 25 CPU in all; the Ray "
        "cluster has 4: ask for fewer, or less each ([resources.ps])"
    ), err


def test_ray_places_each_ps_on_its_own_node_and_leaves_nothing(
    namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "job.toml").write_text(JOB.format(batches=30, extra=""))
    result = run_in(namespace, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["steps"] == 27
    # Each ps asked for the one ps_slot a node has: the two ps are on the two nodes.
    out = str(result["out"])
    line = next(x for x in out.splitlines() if x.startswith("started 2 ps on Ray"))
    placed = re.findall(r"\(node (\w+)\)", line)
    assert sorted(placed) == sorted(node[:12] for node in result["ps_nodes"])  # type: ignore[attr-defined]


def test_a_killed_actor_is_placed_again_and_the_job_resumes(namespace: str, tmp_path: Path) -> None:
    extra = 'checkpoint_dir = "ck"\ncheckpoint_every = 10\n'
    (tmp_path / "job.toml").write_text(JOB.format(batches=80, extra=extra))
    result = run_in(namespace, tmp_path, "RoleActor")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["restarts"] == 1, result["err"]
    assert report["steps"] == 72  # every batch trained, those after the checkpoint again
    assert "restarting every process (restart 1 of 3)" in str(result["restarted"])


def test_two_trainer_ranks_rank_1_an_actor_placed_by_resources_trainer(
    namespace: str, tmp_path: Path
) -> None:
    extra = (
        "num_trainers = 2\nnum_hubs = 2\n[resources.trainer]\nnum_cpus = 0.5\ntrainer_slot = 1\n"
    )
    (tmp_path / "job.toml").write_text(JOB.format(batches=30, extra=extra))
    result = run_in(namespace, tmp_path)
    out = str(result["out"])
    # Rank 1 asked for the one trainer_slot, which only the head has.
    line = next(x for x in out.splitlines() if x.startswith("started trainer ranks on Ray"))
    assert re.findall(r"1 \(node (\w+)\)", line) == [str(result["head"])[:12]], line
    # Each hub's 15 batches less 1 held out, both ranks a step.
    two_ranks_trained(tmp_path / "report.json", steps=14)


def test_a_killed_rank_actor_restarts_the_ranks(namespace: str, tmp_path: Path) -> None:
    extra = (
        'checkpoint_dir = "ck"\ncheckpoint_every = 10\nnum_trainers = 2\nnum_hubs = 2\n'
        "[resources.trainer]\nnum_cpus = 0.5\n"
    )
    (tmp_path / "job.toml").write_text(JOB.format(batches=80, extra=extra))
    result = run_in(namespace, tmp_path, "RankActor")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["restarts"] == 1, result["err"]
    # The restart's own line: the stderr kept is its last 3,000 characters, which a slow run's
    # later log lines can push that line out of.
    assert "trainer 1 died" in str(result["restarted"]), result["err"]
    assert report["steps"] == 36  # each hub's 40 batches less 4 held out, a step of both ranks
    assert report["examples"] == 72 * report["config"]["batch_size"]  # every batch, once
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
