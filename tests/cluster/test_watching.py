"""Watching a training run: every role's Prometheus endpoint scraped during a real `sniper
train` (and parsed with prometheus_client's own parser), and the progress display on a
terminal, in a log, and silenced."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.cluster._sniper import reaped

# Two ps, not the one a job in one process runs by default: each is scraped and reported.
SMALL = (
    'scale = 0.01\nnum_batches = {batches}\nhidden = [16]\nstats_interval = 1\noutput = "r.json"\n'
    "num_ps = 2\n"
)


def sniper_train(
    tmp_path: Path, batches: int, *args: str, **popen: object
) -> subprocess.Popen[str]:
    (tmp_path / "job.toml").write_text(SMALL.format(batches=batches))
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "sniper", "train", "--config", "job.toml", *args],
        cwd=tmp_path,
        text=True,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} | popen,
    )


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and labels."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return scrape[(name, tuple(sorted(labels.items())))]


Scrapes = dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]

# The counters that must move between two scrapes, by role: each exists once its role has done
# the work it counts (a ps's lookup stages appear with its first lookup).
MOVING: list[tuple[str, str, dict[str, str]]] = [
    ("the trainer", "sniper_trainer_steps_total", {}),
    ("the trainer", "sniper_trainer_examples_total", {}),
    (
        "the trainer",
        "sniper_rpc_duration_seconds_count",
        {"role": "trainer", "rpc": "PushGrad", "stage": "total"},
    ),
    *[
        (
            ps,
            "sniper_rpc_duration_seconds_count",
            {"role": "ps", "rpc": "EmbeddingLookup", "stage": "kernel"},
        )
        for ps in ("ps 0", "ps 1")
    ],
    ("hub 0", "sniper_hub_batches_fed_total", {}),
]


def scrape_until(urls: dict[str, str], ready: Callable[[Scrapes], bool]) -> Scrapes:
    """Every role's scrape, again every 0.2 s until ``ready`` says so (or a minute passed: the
    caller's assertions then say what is missing). Polled, not slept: a loaded machine may
    take seconds to start training."""
    deadline = time.monotonic() + 60
    while True:
        scrapes = {role: samples(url) for role, url in urls.items()}
        if ready(scrapes) or time.monotonic() > deadline:
            return scrapes
        time.sleep(0.2)


def test_every_role_is_scraped_while_it_trains_and_the_counters_move(tmp_path: Path) -> None:
    launcher = sniper_train(tmp_path, 100_000, "--metrics-port", "0")
    try:
        assert launcher.stdout is not None
        urls: dict[str, str] = {}
        while len(urls) < 4:  # 2 ps, 1 hub, the trainer
            line = launcher.stdout.readline()
            assert line, launcher.communicate(timeout=30)[1][-3000:]
            if match := re.match(r"metrics of (.+) on (http://\S+)$", line.strip()):
                urls[match[1]] = match[2]
        assert set(urls) == {"ps 0", "ps 1", "hub 0", "the trainer"}
        first = scrape_until(
            urls,
            lambda now: all(
                (name, tuple(sorted(labels.items()))) in now[role] for role, name, labels in MOVING
            ),
        )
        missing = [
            f"{role}'s {name} {labels}"
            for role, name, labels in MOVING
            if (name, tuple(sorted(labels.items()))) not in first[role]
        ]
        assert not missing, f"not scraped within a minute: {', '.join(missing)}"
        second = scrape_until(
            urls,
            lambda now: all(
                value(now[role], name, **labels) > value(first[role], name, **labels)
                for role, name, labels in MOVING
            ),
        )
    finally:
        launcher.send_signal(signal.SIGTERM)
        with reaped(launcher):
            launcher.communicate(timeout=60)
    assert launcher.returncode == 128 + signal.SIGTERM

    for role, name, labels in MOVING:
        before, after = value(first[role], name, **labels), value(second[role], name, **labels)
        assert after > before, f"{role}'s {name} {labels} stayed at {before}"
    assert 0.0 < value(second["the trainer"], "sniper_trainer_loss") < 1.0
    for ps in ("ps 0", "ps 1"):
        assert value(second[ps], "sniper_up") == 1.0
        rows = [v for (name, _), v in second[ps].items() if name == "sniper_table_rows"]
        assert rows and sum(rows) > 0
        assert value(second[ps], "process_resident_memory_bytes") > 0
    # Buckets are cumulative and end at +Inf with the count.
    trainer = second["the trainer"]
    labels = {"role": "trainer", "rpc": "Dense", "stage": "total"}
    assert value(trainer, "sniper_rpc_duration_seconds_bucket", le="+Inf", **labels) == value(
        trainer, "sniper_rpc_duration_seconds_count", **labels
    )


def test_progress_is_a_bar_on_a_terminal_lines_in_a_log_and_nothing_when_quiet(
    tmp_path: Path,
) -> None:
    # A log (stderr is a pipe): one plain line a second.
    done = sniper_train(tmp_path, 400, "--max-steps", "150")
    out, err = done.communicate(timeout=240)
    assert done.returncode == 0, err[-3000:]
    # The report joins the trainer's view of each call with each ps's own stages.
    assert "ps 1:   wait" in out and "transport and codecs (about)" in out
    ps_ops = json.loads((tmp_path / "r.json").read_text())["ps_ops"]
    assert len(ps_ops) == 2 and all(ps["EmbeddingLookup.kernel"]["count"] > 0 for ps in ps_ops)
    lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert lines, err[-3000:]
    assert re.fullmatch(
        r"step \d+/150  [\d,]+ ex/s  loss \d\.\d{4}  held-out auc (\d\.\d{4}|-)  \d+ s", lines[-1]
    )

    quiet = sniper_train(tmp_path, 400, "--max-steps", "150", "--quiet")
    _, err = quiet.communicate(timeout=240)
    assert quiet.returncode == 0 and not [x for x in err.splitlines() if x.startswith("step ")]

    # A terminal: rich draws a bar with the same figures.
    primary, secondary = pty.openpty()
    bar = sniper_train(tmp_path, 400, "--max-steps", "150", stderr=secondary)
    os.close(secondary)
    drawn = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed: the run is over
            break
        if not chunk:
            break
        drawn += chunk
    bar.communicate(timeout=240)
    os.close(primary)
    assert bar.returncode == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn.decode(errors="replace"))
    assert re.search(r"step 150 .*ex/s  loss \d\.\d{4}  auc \d\.\d{4}", text), text[-2000:]
    assert "━" in text  # the bar itself
