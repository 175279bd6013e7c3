"""The end of ``sniper train``: its report, printed as tables and written as JSON.

The printed tables are the job's figures (throughput, AUC and logloss against the oracle, the
trainer's latency per call) and where the ps calls' time goes: the trainer's timing of each
call beside each ps's timing of the same call and of its stages.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sniper._figures import json_ready, shown
from sniper._metrics import LatencySummary
from sniper._table import print_table
from sniper.cluster._config import TrainConfig
from sniper.roles import TrainReport

__all__ = [
    "ReportFile",
    "describe_cores_busy",
    "path_rows",
    "print_labels",
    "print_report",
    "read_report",
    "write_report",
]


def describe_cores_busy(report: TrainReport) -> str:
    """:attr:`TrainReport.cores_busy` out of the machine's cores (``1.52 of 2``); ``-``
    where the report has none."""
    if report.cores_busy is None:
        return "-"
    return f"{report.cores_busy:.2f} of {report.machine_cores or '?'}"


def _trained_line(report: TrainReport) -> str:
    """``trained N batches (E examples) in S s: R examples/s``. A run that resumed (after a
    restart from a checkpoint too) counts the whole job's batches and examples but times only
    its own: it says so, rather than a rate its figures do not divide to."""
    steps = f"{report.steps} steps of {len(report.ranks)} ranks" if report.ranks else None
    trained = f"\ntrained {steps or f'{report.steps} batches'} ({report.examples:,} examples)"
    rate = f"{report.seconds:.1f} s: {report.examples_per_second:,.0f} examples/s"
    if report.resumed_from_step:
        return f"{trained} in all; from step {report.resumed_from_step} on, {rate}"
    return f"{trained} in {rate}"


def print_report(report: TrainReport, oracle_auc: float | None, eval_data: str = "") -> None:
    """The report as tables on stdout; ``oracle_auc`` (synthetic data) is quoted beside the
    model's, and ``eval_data`` names what the held-out figures scored."""
    print(_trained_line(report))
    if report.cores_busy is not None:  # near every core: bound by CPU (TrainReport.cores_busy)
        print(f"the trainer's machine's cores busy while it trained: {describe_cores_busy(report)}")
    if report.ranks:
        _print_ranks(report)
    if report.resumed_from_step:
        print(f"resumed from the checkpoint of step {report.resumed_from_step}")
    if report.preempted:
        print(f"preempted: stopped at step {report.steps} (--resume continues the job)")
    if report.restarts:
        print(
            f"restarted {report.restarts} time(s) after a process of the job died; "
            f"{report.lost_steps} step(s) were trained again"
        )
    _print_evicted(report)
    if report.checkpoints:
        pauses = report.checkpoint_pause_seconds
        print(
            f"{report.checkpoints} checkpoint(s); training paused {sum(pauses):.2f} s in all "
            f"(longest {max(pauses):.2f} s)"
        )
    _print_headline(report, oracle_auc, eval_data)
    _print_labels(report)
    if oracle_auc is not None and oracle_auc > 0.5 and report.eval_auc is not None:
        lift = (report.eval_auc - 0.5) / (oracle_auc - 0.5)
        print(f"held-out AUC (second half) reaches {lift:.0%} of the oracle's lift over 0.5")
    if not report.ops:
        return  # nothing was trained in this run (a resume of a finished one)
    print()
    print_table(
        ["op", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [
            [op, str(s.count)]
            + [f"{v / 1e3:.2f}" for v in (s.p50_us, s.p95_us, s.p99_us, s.max_us)]
            for op, s in report.ops.items()
        ],
    )
    if report.ps_ops:
        print("\nwhere the ps calls' time goes (each ps's own timings of the same calls)")
        print_table(["op", "layer", "count", "p50 ms", "p99 ms"], path_rows(report))


def _print_headline(report: TrainReport, oracle_auc: float | None, eval_data: str) -> None:
    """The first binary label's AUC and logloss, a figure that does not exist as ``-``; no
    table for a job without a binary label (its labels' table says its RMSEs)."""
    headline = (report.train_auc, report.train_logloss, report.eval_auc, report.eval_data_auc)
    if all(figure is None for figure in headline) and report.per_label:
        return
    lines = [
        ["train", shown(report.train_auc), shown(report.train_logloss)],
        ["held-out, second half of the run", shown(report.eval_auc), shown(report.eval_logloss)],
        ["held-out, whole run", shown(report.eval_auc_whole_run), "-"],
    ]
    if report.eval_batches == 0:
        lines = lines[:1]  # nothing was held out (eval_every = 0)
    if report.eval_data_examples:
        lines.append(
            [
                f"eval data, {report.eval_data_examples:,} examples ({eval_data})",
                shown(report.eval_data_auc),
                shown(report.eval_data_logloss),
            ]
        )
    if oracle_auc is not None:
        lines.append(["planted model (oracle)", f"{oracle_auc:.4f}", "-"])
    print_table(["", "AUC", "logloss"], lines)


def _print_evicted(report: TrainReport) -> None:
    """Each table that ran out of rows: its ids past them were trained from their initial
    values again, which a model's figures alone do not show."""
    for name, (capacity, evictions) in sorted(report.evicted.items())[:8]:
        print(
            f"variables.{name}: filled its {capacity:,} rows and evicted {evictions:,} (an "
            f"evicted id starts again from its initial value): set variables.{name}.capacity "
            "to hold its ids"
        )
    if len(report.evicted) > 8:
        print(f"... and {len(report.evicted) - 8} more tables evicted (the report's evicted)")


def _print_ranks(report: TrainReport) -> None:
    """Each trainer rank's throughput, and what averaging the dense gradients cost a step."""
    for rank in report.ranks:
        print(
            f"  trainer rank {rank['rank']}: {rank['examples']:,} examples in "
            f"{rank['seconds']:.1f} s: {rank['examples_per_second']:,.0f} examples/s"
        )
    allreduce = report.ops.get("AllReduce")
    if allreduce is not None:
        print(
            f"all-reduce of the dense gradients: {report.allreduce_bytes:,} bytes a step, "
            f"p50 {allreduce.p50_us / 1e3:.2f} ms, p99 {allreduce.p99_us / 1e3:.2f} ms (waiting "
            "for the slowest rank included)\nheld-out figures below: rank 0's batches and copy "
            "of the model"
        )


_STAGES = ("decode", "dispatch", "wait", "kernel", "apply", "encode", "then_lookup")


def _print_labels(report: TrainReport) -> None:
    """Each label's figures: train, held-out and eval data."""
    print_labels(
        report.per_label,
        {
            "train": "train_{metric}",
            "held-out": "eval_{metric}",
            "held-out logloss": "eval_logloss",
            "eval data": "eval_data_{metric}",
        },
    )


def print_labels(
    per_label: Mapping[str, Mapping[str, float | None]], columns: Mapping[str, str]
) -> None:
    """Each label's figures, when there are several or one is a regression target: the table
    above them holds the first binary label's alone (``sniper train``'s and ``sniper eval``'s
    alike). ``columns``: each column's heading and the key of its figure, where ``{metric}``
    is the label's metric: ``rmse`` for a regression target (whose figures have such a key),
    else ``auc``; a figure a label lacks is ``-``."""
    regression = [
        name for name, figures in per_label.items() if any(k.endswith("rmse") for k in figures)
    ]
    if len(per_label) < 2 and not regression:
        return
    rows = []
    for name, figures in per_label.items():
        metric = "rmse" if name in regression else "auc"
        keys = [key.format(metric=metric) for key in columns.values()]
        rows.append([name, metric.upper(), *(shown(figures.get(key)) for key in keys)])
    binary = [name for name in per_label if name not in regression]
    said = f" (the figures above are {binary[0]}'s)" if binary else ""
    print(f"\neach label{said}")
    print_table(["label", "metric", *columns], rows)


def path_rows(report: TrainReport) -> list[list[str]]:
    """The trainer's EmbeddingLookup and PushGrad beside each ps's timing of them and of
    their stages, and what neither side's work explains: transport and codecs (about: a
    difference of medians). A PushGrad that answered the next batch's lookup counts that
    lookup as its ``then_lookup`` stage, after the ``apply`` the ps's call covers."""
    rows = []
    for op in ("EmbeddingLookup", "PushGrad"):
        whole = report.ops.get(op)
        if whole is None or not whole.count:
            continue
        rows.append([op, "trainer: the whole call", *_figures(whole)])
        slowest = 0.0
        for index, ps in enumerate(report.ps_ops):
            if op not in ps:
                continue
            riding = ps.get(f"{op}.then_lookup")
            slowest = max(slowest, ps[op].p50_us + (riding.p50_us if riding else 0.0))
            rows.append(["", f"ps {index}: call", *_figures(ps[op])])
            for stage in _STAGES:
                if (timing := ps.get(f"{op}.{stage}")) is not None:
                    label = "kernel (each task)" if stage == "kernel" else stage
                    rows.append(["", f"ps {index}:   {label}", *_figures(timing)])
        rows.append(
            ["", "transport and codecs (about)", "", f"{(whole.p50_us - slowest) / 1e3:.2f}", ""]
        )
    return rows


def _figures(s: LatencySummary) -> list[str]:
    return [str(s.count), f"{s.p50_us / 1e3:.2f}", f"{s.p99_us / 1e3:.2f}"]


@dataclass(frozen=True)
class ReportFile:
    """What ``sniper train`` writes to ``output``: the report, the data's oracle AUC and the
    job's config. Every reader of the file reads it through :func:`read_report`, so its form
    is written down once, here and in :class:`~sniper.roles.TrainReport`."""

    report: TrainReport
    oracle_auc: float | None
    """The AUC of the model that generated synthetic data (None for other data)."""
    config: dict[str, Any]
    """The job's config, as its keys and values."""


def write_report(report: TrainReport, oracle_auc: float | None, config: TrainConfig) -> None:
    """Write the report, the oracle's AUC and the job's config as JSON to ``config.output``."""
    result = report.to_dict() | {"oracle_auc": oracle_auc, "config": dataclasses.asdict(config)}
    text = json.dumps(json_ready(result), indent=1, default=str, allow_nan=False)
    Path(config.output).write_text(text)
    print(f"\nreport written to {config.output}")


def read_report(path: Path) -> ReportFile:
    """The report file at ``path``; ``OSError`` or ``ValueError`` (naming it) when it cannot
    be read."""
    try:
        data = json.loads(path.read_text())
        return ReportFile(TrainReport.from_dict(data), data.get("oracle_auc"), data["config"])
    except (KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a sniper train report: {exc}") from None
