"""The dashboard's last row: the operator's own health (reconcile age, rate, errors, latency, work queue,
CPU and memory), one function per panel; docs/dashboard.md explains every panel to users."""

from __future__ import annotations

from typing import Any

from spx.tools.dashboard.parts import (
    CLUSTER,
    panel,
    query,
    thresholds,
)

#: A row: its title and its panel builders, left to right, top to bottom.
Row = tuple[str, list[Any]]


def since_reconcile_stat() -> Any:
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common

    return (
        panel(stat.Panel(), "Since last reconcile", height=6, span=6)
        .description("Seconds since the operator last completed a reconcile (spx_last_reconcile_timestamp_seconds).")
        .with_target(query(f"time() - max(spx_last_reconcile_timestamp_seconds{{{CLUSTER}}})", "since last reconcile",
                           instant=True))
        .unit("s")
        .thresholds(thresholds((None, "green"), (900, "orange"), (1800, "red")))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
    )


def reconciles_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries

    return (
        panel(timeseries.Panel(), "Reconciles by handler and outcome", height=6, span=9)
        .description("Reconcile handler invocations per second (spx_reconcile_total).")
        .with_target(query(f"sum by (handler, outcome) (rate(spx_reconcile_total{{{CLUSTER}}}[$__rate_interval]))",
                           "{{handler}} {{outcome}}"))
        .unit("ops")
    )


def errors_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries

    return (
        panel(timeseries.Panel(), "Reconcile errors", height=6, span=9)
        .description("Reconcile handler invocations that raised, per second (spx_reconcile_errors_total); 0 when none.")
        .with_target(query(f"sum(rate(spx_reconcile_errors_total{{{CLUSTER}}}[$__rate_interval])) or vector(0)", "errors"))
        .unit("ops")
        .thresholds(thresholds((None, "green"), (1e-9, "red")))
    )


def reconcile_latency_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries

    def quantile(q: float) -> str:
        return f"histogram_quantile({q}, sum by (le) (rate(spx_reconcile_duration_seconds_bucket{{{CLUSTER}}}[$__rate_interval])))"

    return (
        panel(timeseries.Panel(), "Reconcile duration p50 / p99", height=6, span=8)
        .description("Seconds per reconcile of one experiment (spx_reconcile_duration_seconds), all handlers.")
        .with_target(query(quantile(0.5), "p50"))
        .with_target(query(quantile(0.99), "p99", ref="B"))
        .unit("s")
    )


def queue_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries

    return (
        panel(timeseries.Panel(), "Work queue depth", height=6, span=8)
        .description("Experiments waiting for a reconcile worker (spx_workqueue_depth); grows when the "
                     "operator cannot keep up.")
        .with_target(query(f"max(spx_workqueue_depth{{{CLUSTER}}})", "depth"))
        .unit("none")
        .decimals(0)
    )


#: Keeps process_* series of the operator's targets only: with $job = All (".*") they would include
#: Prometheus's own and every other exporter's.
OPERATOR_ONLY = f'and on (job, instance) spx_workqueue_depth{{{CLUSTER}}}'


def process_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.models import dashboard as model

    return (
        panel(timeseries.Panel(), "Operator CPU and memory", height=6, span=8)
        .description("process_cpu_seconds_total rate (cores) and process_resident_memory_bytes of the operator "
                     "(only targets that export spx_workqueue_depth: never another exporter's process_* series).")
        .with_target(query(f'rate(process_cpu_seconds_total{{{CLUSTER}, job=~"$job"}}[$__rate_interval]) {OPERATOR_ONLY}',
                           "cpu cores"))
        .with_target(query(f'process_resident_memory_bytes{{{CLUSTER}, job=~"$job"}} {OPERATOR_ONLY}', "resident memory",
                           ref="B"))
        .override_by_name("resident memory", [model.DynamicConfigValue(id_val="unit", value="bytes"),
                                              model.DynamicConfigValue(id_val="custom.axisPlacement", value="right")])
        .unit("none")
    )


def operator_row() -> Row:
    """The operator's own health: reconcile age, rate, errors, latency, queue, CPU and memory."""
    return "Operator health", [
        since_reconcile_stat(), reconciles_series(), errors_series(), reconcile_latency_series(), queue_series(),
        process_series(),
    ]


