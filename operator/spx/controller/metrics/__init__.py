"""Prometheus metrics of the operator (served on ``:8080/metrics``), split by concern:

- :mod:`~spx.controller.metrics.registry`: the collectors and their bounded label sets;
- :mod:`~spx.controller.metrics.comparable`: which crossovers may be compared (``COMPARABLE_LABELS``);
- :mod:`~spx.controller.metrics.experiments`: an experiment's series from its status model;
- this module: the operator's own counters (reconciles, errors, durations, queue depth) and serving.

``from spx.controller import metrics`` and ``metrics.<name>`` work as before the split.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import generate_latest

from spx.controller.metrics.comparable import comparable_values, execution_mode, gather_source
from spx.controller.metrics.experiments import forget_experiment, observe_experiment, reset, set_series_retention
from spx.controller.metrics.registry import (
    COMPARABLE_LABELS,
    EXPERIMENT_DURATION,
    LAST_RECONCILE,
    PHASES,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    RECONCILES,
    REGISTRY,
    VERDICTS,
    WORKQUEUE_DEPTH,
)

__all__ = [
    "BIND_ADDRESS_ENV", "COMPARABLE_LABELS", "PHASES", "RECONCILES", "REGISTRY", "VERDICTS", "comparable_values",
    "count_error", "count_reconcile", "execution_mode", "exposition", "forget_experiment", "gather_source",
    "generate_latest", "observe_duration", "observe_experiment", "observe_reconcile", "reset", "serve",
    "set_series_retention", "set_workqueue_depth",
]

#: Environment variable with the address the metrics endpoint binds (chart: metrics.bindAddress).
BIND_ADDRESS_ENV = "SPX_METRICS_BIND_ADDRESS"


def observe_duration(seconds: float) -> None:
    """One experiment reached a terminal phase after ``seconds`` since its Job was created."""
    if seconds >= 0:
        EXPERIMENT_DURATION.observe(seconds)


def count_reconcile(handler: str, outcome: str) -> None:
    """Count one completed reconcile of ``handler`` and stamp ``spx_last_reconcile_timestamp_seconds``."""
    RECONCILES.labels(handler, outcome).inc()
    LAST_RECONCILE.set(time.time())


def count_error(handler: str) -> None:
    """Count one reconcile of ``handler`` that raised."""
    RECONCILE_ERRORS.labels(handler).inc()


def observe_reconcile(handler: str, outcome: str, seconds: float) -> None:
    """One reconcile of ``handler`` that ended with ``outcome`` took ``seconds`` (monotonic clock)."""
    if seconds >= 0:
        RECONCILE_SECONDS.labels(handler, outcome).observe(seconds)


def set_workqueue_depth(depth: int) -> None:
    """The number of experiments waiting in the work queue now (set on every put and get)."""
    WORKQUEUE_DEPTH.set(max(0, depth))


def serve(port: int, address: str = "0.0.0.0") -> Any:
    """Serve :data:`REGISTRY` on ``http://address:port/metrics`` in a thread; returns what
    ``prometheus_client.start_http_server`` returns (``(server, thread)``: ``server.shutdown()``)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=address, registry=REGISTRY)


def exposition() -> bytes:
    """The text exposition of :data:`REGISTRY` (what ``/metrics`` serves)."""
    return generate_latest(REGISTRY)
