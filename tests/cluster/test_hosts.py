"""The cluster spec: servers on separate hosts, each started on its own by a launcher that
only says its role and index, and a trainer elsewhere, or two trainer ranks on two more. The
hosts are network namespaces joined by veth pairs on a private test subnet (root needed, as in
CI); traffic stays inside them."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sniper.cluster._hosts import RankHost, load_cluster_spec
from sniper.roles import interface_of
from tests.cluster._sniper import sniper, two_ranks_trained
from tests.rpc._grpcio import start_server, stop_server

SUBNET = "10.213.77"
SERVERS = '[[ps]]\nhost = "a"\nport = 1\n[[hub]]\nhost = "b"\nport = 2\n'
"""A spec's servers, for the trainers' cases."""
DATA = ["--scale", "0.01", "--num-batches", "30"]
_NETWORKS = itertools.count()
"""Each network gets names of its own: a namespace's veth ends are destroyed by a kernel
worker after ``ip netns del`` returns, so a later network reusing a name can find it taken."""


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


@contextmanager
def network(nodes: list[str], links: list[tuple[str, str]]) -> Iterator[dict[str, str]]:
    """A namespace for each of ``nodes``; each node (the root namespace ``root`` too) has one
    address, on every veth end it owns, and a /32 route to each peer over their direct link
    (``links``): no bridge, no forwarding, nothing leaves the machine. Yields each node's
    address, and its namespace as ``ns:NODE``."""
    reason = _namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tag = f"sn{os.getpid() % 100000}n{next(_NETWORKS)}"
    names = {node: f"{tag}{chr(ord('a') + i)}" for i, node in enumerate(nodes)}
    address = {"root": f"{SUBNET}.254"} | {
        node: f"{SUBNET}.{i + 1}" for i, node in enumerate(nodes)
    }
    pairs: list[str] = []
    try:
        for ns in names.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        for number, (left, right) in enumerate(links):
            ends = {left: f"{tag}l{number}", right: f"{tag}r{number}"}
            ip("link", "add", ends[left], "type", "veth", "peer", "name", ends[right])
            pairs.append(ends[left])
            for node, device in ends.items():
                at = [] if node == "root" else ["-n", names[node]]
                if node != "root":
                    ip("link", "set", device, "netns", names[node])
                peer = right if node == left else left
                ip(*at, "addr", "add", f"{address[node]}/32", "dev", device)
                ip(*at, "link", "set", device, "up")
                ip(*at, "route", "add", f"{address[peer]}/32", "dev", device, "src", address[node])
        yield {node: address[node] for node in address} | {
            f"ns:{node}": ns for node, ns in names.items()
        }
    finally:
        for device in pairs:  # one end still in the root namespace takes its pair with it
            subprocess.run(["ip", "link", "del", device], capture_output=True, check=False)
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture
def hosts() -> Iterator[dict[str, str]]:
    """Namespaces ``ps0``, ``ps1``, ``hub``, each linked to the others and to the root
    namespace, where the trainer runs."""
    links = [("root", "ps0"), ("root", "ps1"), ("root", "hub"), ("hub", "ps0"), ("hub", "ps1")]
    with network(["ps0", "ps1", "hub"], links) as addresses:
        yield addresses


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


def test_two_trainer_ranks_on_two_hosts_train_one_model(tmp_path: Path) -> None:
    """Rank 0 (the root namespace) and rank 1 (a namespace of its own) of a cluster spec,
    each started on its own, train against a ps and two hubs on a third host: the ranks meet
    at rank 0's rendezvous and all-reduce over the link between their hosts, each on its
    own hub."""
    links = [("root", "servers"), ("root", "rank1"), ("rank1", "servers")]
    with network(["servers", "rank1"], links) as hosts:
        servers_host = hosts["servers"]
        spec = tmp_path / "cluster.toml"
        spec.write_text(
            f'[[ps]]\nhost = "{servers_host}"\nport = 7000\n'
            f'[[hub]]\nhost = "{servers_host}"\nport = 7100\n'
            f'[[hub]]\nhost = "{servers_host}"\nport = 7101\n'
            f'[[trainer]]\nhost = "{hosts["root"]}"\nport = 7300\n'
            f'[[trainer]]\nhost = "{hosts["rank1"]}"\n'
        )
        (tmp_path / "job.toml").write_text(
            'scale = 0.01\nnum_batches = 30\nhidden = [16]\noutput = "report.json"\n'
            "collective_timeout = 120\n"
        )
        in_servers = ("ip", "netns", "exec", hosts["ns:servers"], sys.executable, "-m", "sniper")
        servers = []
        rank1 = None
        try:
            for role, index, extra in (
                ("ps", 0, ["--workers", "1"]),
                ("hub", 0, DATA),
                ("hub", 1, DATA),
            ):
                command = [
                    *in_servers,
                    *("serve", "--cluster-spec", str(spec), "--role", role, "--index", str(index)),
                    *extra,
                ]
                servers.append(start_server(tmp_path, command=command))
            rank1 = subprocess.Popen(
                [
                    *("ip", "netns", "exec", hosts["ns:rank1"], sys.executable, "-m", "sniper"),
                    *("train", "--config", "job.toml", "--quiet"),
                    *("--cluster-spec", str(spec), "--rank", "1"),
                ],
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            done = sniper(
                tmp_path,
                *("train", "--config", "job.toml", "--quiet"),
                *("--cluster-spec", str(spec), "--rank", "0"),
            )
            out, err = rank1.communicate(timeout=120)
            assert done.returncode == 0, done.stderr[-3000:] + err[-3000:]
            assert rank1.returncode == 0, err[-3000:]
        finally:
            if rank1 is not None and rank1.poll() is None:
                rank1.kill()
                rank1.communicate()
            for server in servers:
                stop_server(server)
    assert f"join this process (rank 0) at {hosts['root']}:7300" in done.stdout
    assert out.startswith("trainer rank 1: ")
    # Each hub's 15 batches less 1 held out, both ranks a step.
    two_ranks_trained(tmp_path / "report.json", steps=14)


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
            '[trainers]\nhost = "a"\n',
            f"cluster spec {spec}: unknown table 'trainers'; a spec has [[ps]], [[hub]] and "
            "[[trainer]]",
        ),
        (
            '[trainer]\nhost = "a"\n',
            f"cluster spec {spec}: trainer must be an array of tables ([[trainer]])",
        ),
        (
            SERVERS + '[[trainer]]\nhost = "t"\n',
            f"cluster spec {spec}: [[trainer]] 0 (rank 0) needs a host and a port: the other "
            "ranks join it there",
        ),
        (
            SERVERS + '[[trainer]]\nhost = "t"\nport = 3\n[[trainer]]\nhost = "u"\nport = 3\n',
            f"cluster spec {spec}: [[trainer]] 1: port is rank 0's alone (the ranks' "
            "rendezvous); a rank's collective takes free ports",
        ),
        (
            SERVERS + "[[trainer]]\nport = 3\n",
            f"cluster spec {spec} [[trainer]] 0: give host (the machine the other ranks reach "
            "this rank at) or interface (the network interface its collective uses)",
        ),
    ]
    for text, message in cases:
        spec.write_text(text)
        with pytest.raises(ValueError) as info:
            load_cluster_spec(spec)
        assert str(info.value) == message
    spec.write_text(SERVERS)
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
    for ranks, message in (
        ("", "--rank names a [[trainer]] of the cluster spec, and it lists none"),
        ('[[trainer]]\nhost = "t"\nport = 3\n', "--rank 1 is not a trainer of the cluster spec"),
    ):
        spec.write_text(SERVERS + ranks)
        done = sniper(tmp_path, "train", "--cluster-spec", str(spec), "--rank", "1", timeout=60)
        assert done.returncode == 2
        assert done.stderr.startswith(f"sniper: error: {message}"), done.stderr


def test_a_rank_runs_where_its_entry_says() -> None:
    assert interface_of("127.0.0.1") == "lo"
    assert RankHost(host="127.0.0.1").collective_interface() == "lo"
    assert RankHost(host="192.0.2.1", interface="lo").collective_interface() == "lo"
    with pytest.raises(ValueError, match=r"trainer host '192.0.2.1' \(192.0.2.1\) is not an addr"):
        interface_of("192.0.2.1")
