"""A job checkpoint whose ps parts stay on each ps's own disk: the ps save under their own
checkpoint_root, the trainer keeps job.json (with each part's manifest digest, from the ps'
answers) and its model under checkpoint_dir, and a resume checks that each ps restored the
very part it saved."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from sniper.cluster._checkpoint import load_job
from sniper.roles._checkpoint import manifest_digest
from tests.cluster._sniper import sniper
from tests.rpc._grpcio import ServerProcess, start_server, stop_server

DATA = ["--scale", "0.01", "--num-batches", "40"]


def servers(tmp_path: Path) -> list[ServerProcess]:
    """Two ps, each saving under its own root (its "disk"), and a hub feeding them."""
    ps = [
        start_server(tmp_path, "--workers", "1", "--checkpoint-root", str(tmp_path / f"disk-{i}"))
        for i in range(2)
    ]
    addresses = ",".join(f"127.0.0.1:{p.port}" for p in ps)
    hub = start_server(
        tmp_path,
        command=[
            *(sys.executable, "-m", "sniper", "serve", "--role", "hub", "--port", "0"),
            *("--ps", addresses, *DATA),
        ],
    )
    return [*ps, hub]


def train(
    tmp_path: Path, running: list[ServerProcess], *args: str
) -> subprocess.CompletedProcess[str]:
    ps = ",".join(f"127.0.0.1:{s.port}" for s in running[:2])
    (tmp_path / "job.toml").write_text("scale = 0.01\nnum_batches = 40\nhidden = [16]\n")
    return sniper(
        tmp_path,
        "train",
        "--config",
        "job.toml",
        "--quiet",
        "--ps",
        ps,
        "--hub",
        f"127.0.0.1:{running[2].port}",
        *args,
    )


def test_parts_on_each_ps_disk_are_recorded_and_checked_on_resume(tmp_path: Path) -> None:
    running = servers(tmp_path)
    try:
        done = train(
            tmp_path,
            running,
            "--checkpoint-dir",
            "job",
            "--checkpoint-every",
            "10",
            "--max-steps",
            "20",
        )
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        for server in running:
            stop_server(server)
    job = load_job(tmp_path / "job")  # the trainer's directory alone: no ps part in it
    step = job.directory.name
    assert sorted(p.name for p in job.directory.iterdir()) == ["job.json", "trainer.npz"]
    for i in range(2):
        part = tmp_path / f"disk-{i}" / step / f"ps-{i}"
        assert job.ps_manifests[i] == manifest_digest(part)

    # A part that is not the one saved (here: an older step's copied over it) is refused.
    older = sorted((tmp_path / "disk-0").glob("step-*"))[0] / "ps-0"
    target = tmp_path / "disk-0" / step / "ps-0"
    shutil.rmtree(target)
    shutil.copytree(older, target)
    running = servers(tmp_path)
    try:
        refused = train(tmp_path, running, "--resume", "job")
        assert refused.returncode == 1, refused.stderr[-3000:]  # the data's failure, not usage
        assert refused.stderr.endswith(
            "ps 0 restored a part whose manifest is not the one it saved (another job's, or a "
            "stale copy, under its checkpoint_root); give each ps the checkpoint_root it saved "
            "under\n"
        )
    finally:
        for server in running:
            stop_server(server)
