"""docs/deploy.md's examples are checked against sniper itself: the cluster specs parse, the
Kubernetes manifests agree with their spec (names, replicas, ports, the trainer ranks' Indexed
Job, the commands sniper's own parser reads), and the Slurm script is valid bash that writes a
valid spec of servers and ranks."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from sniper.cli._main import build_parser
from sniper.cluster import load_serve_config, load_train_config
from sniper.cluster._hosts import ClusterSpec, load_cluster_spec

DOC = Path(__file__).resolve().parents[1] / "docs" / "deploy.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def spec_from(text: str, tmp_path: Path) -> ClusterSpec:
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return load_cluster_spec(path)


def test_the_generic_spec_parses(tmp_path: Path) -> None:
    servers, ranks = blocks("toml")
    spec = spec_from(servers, tmp_path)
    assert (len(spec.ps), len(spec.hubs)) == (2, 1)
    assert spec.server("hub", 0)["ps"] == "ps-0.example:7000,ps-1.example:7000"
    spec = spec_from(servers + ranks, tmp_path)
    assert spec.rank(0).address == "trainer-0.example:7300"
    assert spec.rank(1).host == "trainer-1.example"


def argv_in_pod(args: str, hostname: str, **env: str) -> list[str]:
    """The sniper arguments a container's ``sh -c`` runs, expanded by a real shell."""
    printed = subprocess.run(
        ["sh", "-c", args.replace("exec sniper ", "printf '%s\\n' ", 1)],
        env={"HOSTNAME": hostname, "PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return printed.stdout.splitlines()


def test_the_kubernetes_manifests_agree_with_their_spec(tmp_path: Path) -> None:
    (manifests,) = blocks("yaml")
    kinds: dict[str, list[dict[str, Any]]] = {}
    for doc in yaml.safe_load_all(manifests):
        kinds.setdefault(doc["kind"], []).append(doc)
    (service,) = kinds["Service"]
    (config_map,) = kinds["ConfigMap"]
    assert service["spec"]["clusterIP"] == "None"
    files = config_map["data"]
    spec = spec_from(files["cluster.toml"], tmp_path)
    (tmp_path / "server.toml").write_text(files["server.toml"])
    (tmp_path / "job.toml").write_text(files["job.toml"])
    job = load_train_config(tmp_path / "job.toml", {})
    parser = build_parser()
    mounts = "/etc/sniper/"
    sets = {s["metadata"]["name"]: s for s in kinds["StatefulSet"]}
    for role, servers in (("ps", spec.ps), ("hub", spec.hubs)):
        stateful = sets[f"sniper-{role}"]
        assert stateful["spec"]["serviceName"] == service["metadata"]["name"]
        assert stateful["spec"]["replicas"] == len(servers)
        (container,) = stateful["spec"]["template"]["spec"]["containers"]
        ports = {p["containerPort"] for p in container["ports"]}
        assert job.metrics_port in ports
        for index, server in enumerate(servers):
            pod = f"sniper-{role}-{index}"
            assert server.host == f"{pod}.{service['metadata']['name']}"
            assert server.port in ports
            assert server.port in {p["port"] for p in service["spec"]["ports"]}
            args = parser.parse_args(argv_in_pod(container["args"][0], pod))
            assert (args.role, args.index) == (role, index)
            assert args.cluster_spec == mounts + "cluster.toml"
            assert args.config == mounts + "server.toml"
            overrides = spec.server(role, index)
            served = load_serve_config(tmp_path / "server.toml", overrides)
            assert (served.host, served.port) == ("0.0.0.0", server.port)
            # The hubs read the data the trainer sizes its tables from.
            assert (served.data, served.batch_size) == (job.data, job.batch_size)
    probe = sets["sniper-ps"]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["grpc"] == {"port": spec.ps[0].port, "service": "sniper.v1.Ps"}
    (trainer,) = kinds["Job"]
    # An Indexed Job of one pod per rank: JOB_COMPLETION_INDEX is the rank, and rank 0's pod
    # has the DNS name the spec gives the ranks' rendezvous.
    name, ranks = trainer["metadata"]["name"], len(spec.trainers)
    assert trainer["spec"]["completionMode"] == "Indexed"
    assert trainer["spec"]["completions"] == trainer["spec"]["parallelism"] == ranks == 2
    template = trainer["spec"]["template"]
    assert template["spec"]["subdomain"] == service["metadata"]["name"]
    assert template["metadata"]["labels"]["app"] == service["spec"]["selector"]["app"]
    assert spec.rank(0).host == f"{name}-0.{service['metadata']['name']}"
    (container,) = template["spec"]["containers"]
    assert spec.rank(0).port in {p["containerPort"] for p in container["ports"]}
    assert spec.rank(0).port in {p["port"] for p in service["spec"]["ports"]}
    for rank in range(ranks):
        pod = f"{name}-{rank}-x"
        args = parser.parse_args(
            argv_in_pod(container["args"][0], pod, JOB_COMPLETION_INDEX=str(rank))
        )
        assert args.run.__module__ == "sniper.cli._train"
        assert (args.cluster_spec, args.config) == (mounts + "cluster.toml", mounts + "job.toml")
        assert args.rank == rank
        assert spec.rank(rank).interface == "eth0"
    ranked = {"num_ps": len(spec.ps), "num_hubs": len(spec.hubs), "num_trainers": ranks}
    assert load_train_config(tmp_path / "job.toml", ranked).num_trainers == ranks


def test_the_slurm_script_is_bash_and_writes_a_valid_spec(tmp_path: Path) -> None:
    (script,) = blocks("bash")
    path = tmp_path / "sniper.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    fake = tmp_path / "bin"
    fake.mkdir()
    nodes = "".join(f"node{i}\\n" for i in range(1, 7))
    (fake / "scontrol").write_text(f"#!/bin/sh\nprintf '{nodes}'\n")
    (fake / "scontrol").chmod(0o755)
    subprocess.run(
        ["bash", str(path)],
        env={
            "PATH": f"{fake}:{os.environ['PATH']}",
            "SLURM_JOB_NODELIST": "node[1-6]",
            "SPEC": str(tmp_path / "cluster.toml"),
            "SNIPER_SPEC_ONLY": "1",
        },
        check=True,
    )
    spec = load_cluster_spec(tmp_path / "cluster.toml")
    assert spec.ps_addresses == "node1:7000,node2:7000"
    assert spec.hub_addresses == "node3:7100,node4:7100"
    assert spec.server("ps", 1)["host"] == "0.0.0.0"
    assert [(t.host, t.port) for t in spec.trainers] == [("node5", 7300), ("node6", 0)]
