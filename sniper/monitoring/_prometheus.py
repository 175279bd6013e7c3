"""Prometheus metrics of a ps, a hub or a trainer, read from the role when scraped.

Why collectors and not instrumented counters: every figure already lives in the role (its
latency histograms, the tables' counters, the scheduler's statistics, the trainer's report),
so a scrape reads them where they are and the training path pays nothing for being watched.
Names and units follow Prometheus' conventions: seconds, ``_total`` for counters, one
``sniper_rpc_duration_seconds`` histogram family with ``role``, ``rpc`` and ``stage`` labels
(stage ``total`` is the whole call; the ps also times ``decode``, ``dispatch``, ``wait``,
``kernel``, ``encode``...). Each process serves its own registry (with the standard process
metrics: CPU seconds, resident memory) on ``--metrics-port``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sniper._metrics import Histogram

if TYPE_CHECKING:
    from sniper.roles import HubRole, PsRole, Trainer

__all__ = ["HubCollector", "MetricsServer", "PsCollector", "TrainerCollector", "serve_metrics"]

_EVERY = 4
"""Export every 4th bucket edge (x5.06 apart, 1 us to 11 days): 16 buckets a series."""


def rpc_durations(role: str, histograms: Mapping[str, Histogram]) -> HistogramMetricFamily:
    """``sniper_rpc_duration_seconds{role,rpc,stage}`` from histograms named ``RPC`` (the
    whole call) or ``RPC.stage``."""
    family = HistogramMetricFamily(
        "sniper_rpc_duration_seconds",
        "Duration of each RPC (stage total) and of its stages, as the serving role saw it",
        labels=["role", "rpc", "stage"],
    )
    for name, histogram in sorted(histograms.items()):
        rpc, _, stage = name.partition(".")
        buckets, total = histogram.cumulative(_EVERY)
        family.add_metric(
            [role, rpc, stage or "total"],
            [(_bound(bound), count) for bound, count in buckets],
            total,
        )
    return family


def _bound(upper: float) -> str:
    return "+Inf" if upper == float("inf") else f"{upper:.6g}"


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


_TABLE_METRICS = (
    # (statistic, metric, kind, help)
    ("rows", "sniper_table_rows", "gauge", "Rows the variable's table holds"),
    ("capacity", "sniper_table_capacity_rows", "gauge", "Rows the table can ever hold"),
    ("bytes", "sniper_table_bytes", "gauge", "Memory the table preallocated"),
    ("inserts", "sniper_table_inserts", "counter", "Rows created for signs not held"),
    ("evictions", "sniper_table_evictions", "counter", "Rows taken back for new signs"),
    ("admitted", "sniper_table_admissions", "counter", "Misses the admission filter let in"),
    ("rejected", "sniper_table_rejections", "counter", "Misses the admission filter held back"),
    (
        "dropped_gradients",
        "sniper_table_dropped_gradients",
        "counter",
        "Gradients of signs without a row",
    ),
    (
        "nonfinite_updates",
        "sniper_table_nonfinite_updates",
        "counter",
        "Row updates skipped: they would not be finite",
    ),
)


class PsCollector(Collector):
    """Metrics of one :class:`~sniper.roles.PsRole`."""

    def __init__(self, role: PsRole) -> None:
        self.role = role

    def collect(self) -> Iterator[Metric]:
        role, engine = self.role, self.role.engine
        yield rpc_durations("ps", dict(role.histograms))
        yield from _table_families(
            {name: engine.table(name).statistics() for name in engine.variables}
        )
        yield _gauge(
            "sniper_ps_pending_batches",
            "Fed (batch, variable) pairs not yet pushed",
            engine.pending_batches(),
        )
        yield _counter(
            "sniper_ps_nonfinite_gradients",
            "Gradients with NaN or Inf received",
            role.nonfinite_gradients,
        )
        yield _gauge(
            "sniper_up", "1 while the role can serve (its health answer)", float(role.healthy)
        )
        stats = engine.scheduler.statistics()
        yield _gauge(
            "sniper_scheduler_queue_depth", "Tasks submitted and not yet started", stats.pending
        )
        yield _gauge("sniper_scheduler_running_tasks", "Tasks running now", stats.running)
        tasks = CounterMetricFamily(
            "sniper_scheduler_tasks", "Tasks finished, by outcome", labels=["outcome"]
        )
        for outcome in ("completed", "failed", "cancelled"):
            tasks.add_metric([outcome], getattr(stats, outcome))
        yield tasks
        busy = GaugeMetricFamily(
            "sniper_scheduler_worker_busy_ratio",
            "Fraction of the scheduler's life each worker ran tasks",
            labels=["worker"],
        )
        for worker, ratio in enumerate(stats.utilization()):
            busy.add_metric([str(worker)], ratio)
        yield busy


def _table_families(stats: Mapping[str, object]) -> Iterable[Metric]:
    for field, name, kind, doc in _TABLE_METRICS:
        family_type = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
        family = family_type(name, doc, labels=["variable"])
        for variable, table in stats.items():
            family.add_metric([variable], getattr(table, field))
        yield family


class HubCollector(Collector):
    """Metrics of one :class:`~sniper.roles.HubRole`."""

    def __init__(self, role: HubRole) -> None:
        self.role = role

    def collect(self) -> Iterator[Metric]:
        role = self.role
        yield rpc_durations("hub", {"FeedSample": role.feed_latency})
        yield _counter(
            "sniper_hub_batches_fed", "Batches whose signs every ps holds", role.batches_fed
        )
        yield _gauge(
            "sniper_hub_batches_waiting", "Fed batches queued for ReadSample", role.handout.waiting
        )
        yield _gauge(
            "sniper_hub_batches_leased",
            "Batches handed out, not yet acknowledged",
            role.handout.leased,
        )
        yield _counter(
            "sniper_hub_batches_redelivered",
            "Batches handed out again after their lease expired",
            role.handout.redelivered,
        )
        yield _gauge(
            "sniper_up", "1 while the role can serve (its health answer)", float(role.healthy)
        )


class TrainerCollector(Collector):
    """Metrics of a :class:`~sniper.roles.Trainer` while it trains."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def collect(self) -> Iterator[Metric]:
        trainer = self.trainer
        live = trainer.live()
        yield rpc_durations("trainer", trainer.histograms)
        yield _counter(
            "sniper_trainer_steps", "Training steps, those before a resume included", live.steps
        )
        yield _counter("sniper_trainer_examples", "Examples trained", live.examples)
        yield _gauge(
            "sniper_trainer_loss", "Mean training logloss of the latest 10 batches", live.loss
        )
        yield _gauge(
            "sniper_trainer_heldout_auc",
            "AUC of every held-out batch scored so far",
            live.eval_auc,
        )


class MetricsServer:
    """A metrics endpoint serving one registry; :meth:`close` stops it."""

    def __init__(self, collectors: Iterable[Collector], port: int, host: str) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        for collector in collectors:
            self.registry.register(collector)
        self._server, self._thread = start_http_server(port, host, registry=self.registry)
        self.host, self.port = host, int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(
    collectors: Iterable[Collector], port: int, host: str = "127.0.0.1"
) -> MetricsServer:
    """Serve ``/metrics`` on ``host:port`` (0: a free port) from a thread of this process."""
    return MetricsServer(collectors, port, host)
