"""The cluster spec: servers on separate hosts, each started on its own by a launcher that
only says its role and index, and a trainer elsewhere. The hosts are network namespaces joined
by veth pairs on a private test subnet (root needed, as in CI); traffic stays inside them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sniper.cluster._hosts import load_cluster_spec
from tests.cluster._sniper import sniper
from tests.rpc._grpcio import start_server, stop_server

SUBNET = "10.213.77"
DATA = ["--scale", "0.01", "--num-batches", "30"]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _namespaces_unavailable() -> str | None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "network namespaces need root and iproute2's ip"
    probe = f"snprobe{os.getpid()}"
    try:
        ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"ip netns add failed: {exc.stderr.strip()}"
    ip("netns", "del", probe)
    return None


@pytest.fixture
def hosts() -> Iterator[dict[str, str]]:
    """Namespaces ``ps0``, ``ps1``, ``hub``; each node (the root namespace too, where the
    trainer runs) has one address, on every veth end it owns, and a /32 route to each peer
    over their direct link: no bridge, no forwarding, nothing leaves the machine."""
    reason = _namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tag = f"sn{os.getpid() % 100000}"
    names = {"ps0": f"{tag}a", "ps1": f"{tag}b", "hub": f"{tag}c"}
    address = {
        "root": f"{SUBNET}.254",
        "ps0": f"{SUBNET}.1",
        "ps1": f"{SUBNET}.2",
        "hub": f"{SUBNET}.3",
    }
    links = [("root", "ps0"), ("root", "ps1"), ("root", "hub"), ("hub", "ps0"), ("hub", "ps1")]
    try:
        for ns in names.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        for number, (left, right) in enumerate(links):
            ends = {left: f"{tag}l{number}", right: f"{tag}r{number}"}
            ip("link", "add", ends[left], "type", "veth", "peer", "name", ends[right])
            for node, device in ends.items():
                at = [] if node == "root" else ["-n", names[node]]
                if node != "root":
                    ip("link", "set", device, "netns", names[node])
                peer = right if node == left else left
                ip(*at, "addr", "add", f"{address[node]}/32", "dev", device)
                ip(*at, "link", "set", device, "up")
                ip(*at, "route", "add", f"{address[peer]}/32", "dev", device, "src", address[node])
        yield {node: address[node] for node in names} | {
            f"ns:{node}": ns for node, ns in names.items()
        }
    finally:
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_servers_on_three_hosts_train_from_a_fourth(hosts: dict[str, str], tmp_path: Path) -> None:
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        f'[[ps]]\nhost = "{hosts["ps0"]}"\nport = 7000\n'
        f'[[ps]]\nhost = "{hosts["ps1"]}"\nport = 7000\n'
        f'[[hub]]\nhost = "{hosts["hub"]}"\nport = 7100\n'
    )
    servers = []
    try:
        for node, role, index, extra in (
            ("ps0", "ps", 0, ["--workers", "1"]),
            ("ps1", "ps", 1, ["--workers", "1"]),
            ("hub", "hub", 0, DATA),
        ):
            command = [
                *("ip", "netns", "exec", hosts[f"ns:{node}"]),
                *(sys.executable, "-m", "sniper", "serve", "--cluster-spec", str(spec)),
                *("--role", role, "--index", str(index), *extra),
            ]
            servers.append(start_server(tmp_path, command=command))
        assert [s.listening_line.strip() for s in servers] == [
            f"listening on {hosts['ps0']}:7000",
            f"listening on {hosts['ps1']}:7000",
            f"listening on {hosts['hub']}:7100",
        ]
        (tmp_path / "job.toml").write_text(
            'scale = 0.01\nnum_batches = 30\nhidden = [16]\noutput = "report.json"\n'
        )
        done = sniper(
            tmp_path, "train", "--config", "job.toml", "--quiet", "--cluster-spec", str(spec)
        )
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["steps"] == 27  # 30 batches less every 10th, held out
        assert report["config"]["num_ps"] == 2
    finally:
        for server in servers:
            stop_server(server)


def test_a_bad_cluster_spec_is_one_line_naming_the_entry(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.toml"
    cases = [
        (
            '[[ps]]\nhost = "a"\nport = 0\n[[hub]]\nhost = "b"\nport = 1\n',
            f"cluster spec {spec} [[ps]] 0: port must be in [1, 65535], got 0",
        ),
        (
            '[[ps]]\nhost = "a"\nport = 1\n',
            f"cluster spec {spec}: a cluster spec needs at least one [[ps]] and one [[hub]]",
        ),
        (
            '[[ps]]\nhost = "a"\nport = 1\n[[hub]]\nhost = "a"\nport = 1\n',
            f"cluster spec {spec}: a:1 is given to two servers; each needs its own",
        ),
        (
            '[trainer]\nhost = "a"\n',
            f"cluster spec {spec}: unknown table 'trainer'; a spec has [[ps]] and [[hub]]",
        ),
    ]
    for text, message in cases:
        spec.write_text(text)
        with pytest.raises(ValueError) as info:
            load_cluster_spec(spec)
        assert str(info.value) == message
    spec.write_text('[[ps]]\nhost = "a"\nport = 1\n[[hub]]\nhost = "b"\nport = 2\n')
    done = sniper(
        tmp_path,
        "serve",
        "--cluster-spec",
        str(spec),
        "--role",
        "ps",
        "--index",
        "1",
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "sniper: error: --index 1 is not a ps of the cluster spec: it lists 1 (ps 0 to 0)\n"
    )
