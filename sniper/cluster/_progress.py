"""What ``sniper train`` shows while it trains, and the trainer's metrics endpoint.

On a terminal, a rich progress bar (step, examples/s, loss, held-out AUC; a bar and an ETA
when ``max_steps`` bounds the run). Elsewhere (a log file, CI), one plain line every
``interval`` seconds, which a log reader can grep. ``--quiet``: neither. Both read
:meth:`~sniper.roles.Trainer.live` from a thread of their own, so training never waits for
the display.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sniper.monitoring import TrainerCollector, serve_metrics
from sniper.roles import LiveProgress, Trainer

__all__ = ["plain_line", "show_progress", "trainer_metrics"]


def plain_line(live: LiveProgress) -> str:
    """One progress line: ``step 120/400  3,210 ex/s  loss 0.4710  held-out auc 0.7012``."""
    steps = f"{live.steps}/{live.max_steps}" if live.max_steps else str(live.steps)
    auc = f"{live.eval_auc:.4f}" if live.eval_auc else "-"
    return (
        f"step {steps}  {live.examples_per_second:,.0f} ex/s  loss {live.loss:.4f}  "
        f"held-out auc {auc}  {live.seconds:.0f} s"
    )


@contextlib.contextmanager
def show_progress(
    trainer: Trainer, *, quiet: bool, interval: float, stream: TextIO | None = None
) -> Iterator[None]:
    """Show the trainer's progress on ``stream`` (stderr) until the block ends."""
    out = stream if stream is not None else sys.stderr
    if quiet:
        yield
        return
    stop = threading.Event()
    if out.isatty():
        target, args = _bar, (trainer, stop, out)
    else:
        target, args = _lines, (trainer, stop, out, interval)  # type: ignore[assignment]
    thread = threading.Thread(target=target, args=args, name="sniper-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _lines(trainer: Trainer, stop: threading.Event, out: TextIO, interval: float) -> None:
    while not stop.wait(interval):
        print(plain_line(trainer.live()), file=out, flush=True)


def _bar(trainer: Trainer, stop: threading.Event, out: TextIO) -> None:
    columns = [
        TextColumn("step {task.completed:.0f}"),
        BarColumn(),
        TextColumn("{task.fields[speed]} ex/s  loss {task.fields[loss]}  auc {task.fields[auc]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=Console(file=out), transient=False) as progress:
        task = progress.add_task(
            "train", total=trainer.config.max_steps or None, speed="-", loss="-", auc="-"
        )

        def draw() -> None:
            live = trainer.live()
            progress.update(
                task,
                completed=live.steps,
                speed=f"{live.examples_per_second:,.0f}",
                loss=f"{live.loss:.4f}",
                auc=f"{live.eval_auc:.4f}" if live.eval_auc else "-",
            )

        draw()
        while not stop.wait(0.5):
            draw()
        draw()  # where training ended


@contextlib.contextmanager
def trainer_metrics(trainer: Trainer, port: int, host: str) -> Iterator[str | None]:
    """The trainer's Prometheus endpoint while it trains (its URL), if ``port`` >= 0."""
    if port < 0:
        yield None
        return
    server = serve_metrics([TrainerCollector(trainer)], port, host)
    try:
        yield server.url
    finally:
        server.close()
