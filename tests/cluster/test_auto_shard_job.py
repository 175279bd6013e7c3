"""auto_shard in a real job: ``sniper train`` moves variables between ps processes while it
trains (from the balanced placement a fresh job starts with), ``sniper placement`` shows where
they are (asking the ps, or reading a checkpoint), and a resumed job puts every variable back
where the checkpoint had it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sniper.cluster._checkpoint import load_job
from sniper.hashing import ps_for_variable
from tests.cluster._sniper import sniper
from tests.rpc._grpcio import start_server, stop_server

JOB = """\
scale = 0.01
num_batches = 60
num_ps = 4
hidden = [16]
auto_shard = true
auto_shard_ratio = 1.0
auto_shard_window = 8
checkpoint_every = 20
"""


def test_variables_move_are_shown_and_stay_moved_after_resume(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    running = [
        start_server(tmp_path, "--workers", "1", "--checkpoint-root", str(tmp_path / "job"))
        for _ in range(4)
    ]
    addresses = ",".join(f"127.0.0.1:{s.port}" for s in running)
    try:
        done = sniper(
            tmp_path,
            *("train", "--config", "job.toml", "--quiet", "--ps", addresses),
            *("--checkpoint-dir", "job", "--max-steps", "40", "--output", "first.json"),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads((tmp_path / "first.json").read_text())
        assert report["moves"], done.stderr[-3000:]
        # Version 1 is the balanced placement the job started from; each move adds one.
        assert report["placement_version"] == 1 + len(report["moves"])
        assert "auto_shard moved" in done.stderr

        job = load_job(tmp_path / "job")
        assert job.step == 40 and job.placement is not None
        assert job.placement.version == report["placement_version"]

        shown = sniper(tmp_path, "placement", "--ps", addresses)
        assert shown.returncode == 0, shown.stderr
        away = dict(re.findall(r"^(\w+)\s+(\d)\s.*hashed to ps \d", shown.stdout, re.M))
        assert {name: int(ps) for name, ps in away.items()} == dict(job.placement.owners)
        for name, ps in away.items():
            assert ps_for_variable(name, 4) != int(ps)
    finally:
        for server in running:
            stop_server(server)

    recorded = sniper(tmp_path, "placement", "--checkpoint", "job")
    assert recorded.returncode == 0, recorded.stderr
    assert f"placement version {job.placement.version}, 4 ps" in recorded.stdout
    for name in job.placement.owners:
        assert name in recorded.stdout

    # Fresh ps processes: each restores its part, and the trainer and hub use the placement.
    resumed = sniper(
        tmp_path,
        "train",
        "--config",
        "job.toml",
        "--quiet",
        "--resume",
        "job",
        "--output",
        "r.json",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = json.loads((tmp_path / "r.json").read_text())
    assert again["resumed_from_step"] == 40
    assert again["steps"] > 40
    # Versions go on from the checkpoint's: the resumed job started from its placement.
    assert again["placement_version"] == job.placement.version + len(again["moves"])
