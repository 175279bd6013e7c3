"""Prometheus metrics of every role (``--metrics-port`` of ``sniper serve`` and ``sniper
train``): collectors that read a role's figures when scraped, and the endpoint serving them."""

from sniper.monitoring._prometheus import HubCollector as HubCollector
from sniper.monitoring._prometheus import MetricsServer as MetricsServer
from sniper.monitoring._prometheus import PsCollector as PsCollector
from sniper.monitoring._prometheus import TrainerCollector as TrainerCollector
from sniper.monitoring._prometheus import serve_metrics as serve_metrics

__all__ = ["HubCollector", "MetricsServer", "PsCollector", "TrainerCollector", "serve_metrics"]
