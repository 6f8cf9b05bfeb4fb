"""The dashboard's last row: the operator's own health (reconcile age, rate, errors, latency, work queue,
CPU and memory), one function per panel; docs/dashboard.md explains every panel to users.

Every panel is per release (``namespace, job``: the operator's namespace and the ServiceMonitor's job, as
the alert rules aggregate, issue #36): two releases in one Prometheus are two lines, so a stuck one shows
beside a healthy one instead of being hidden by its max."""

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
#: Operator series of the selected operator jobs.
OPERATOR = f'{CLUSTER}, job=~"$job"'
#: What one release is: the operator's namespace and its job (the alert rules group the same way).
RELEASE = "namespace, job"
RELEASE_LEGEND = "{{namespace}}/{{job}}"


def since_reconcile_stat() -> Any:
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common

    return (
        panel(stat.Panel(), "Since last reconcile", height=6, span=6)
        .description("Seconds since each release's operator last completed a reconcile (spx_last_reconcile_timestamp_seconds, "
                     "max over its replicas), one value per release (namespace/job).")
        .with_target(query(f"time() - max by ({RELEASE}) (spx_last_reconcile_timestamp_seconds{{{OPERATOR}}})", RELEASE_LEGEND,
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
        .with_target(query(f"sum by ({RELEASE}, handler, outcome) (rate(spx_reconcile_total{{{OPERATOR}}}[$__rate_interval]))",
                           RELEASE_LEGEND + " {{handler}} {{outcome}}"))
        .unit("ops")
    )


def errors_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries

    return (
        panel(timeseries.Panel(), "Reconcile errors", height=6, span=9)
        .description("Reconcile handler invocations that raised, per second (spx_reconcile_errors_total); 0 when none.")
        .with_target(query(f"sum by ({RELEASE}) (rate(spx_reconcile_errors_total{{{OPERATOR}}}[$__rate_interval])) or vector(0)",
                           RELEASE_LEGEND))
        .unit("ops")
        .thresholds(thresholds((None, "green"), (1e-9, "red")))
    )


def reconcile_latency_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries

    def quantile(q: float) -> str:
        return f"histogram_quantile({q}, sum by ({RELEASE}, le) (rate(spx_reconcile_duration_seconds_bucket{{{OPERATOR}}}[$__rate_interval])))"

    return (
        panel(timeseries.Panel(), "Reconcile duration p50 / p99", height=6, span=8)
        .description("Seconds per reconcile of one experiment (spx_reconcile_duration_seconds), all handlers.")
        .with_target(query(quantile(0.5), RELEASE_LEGEND + " p50"))
        .with_target(query(quantile(0.99), RELEASE_LEGEND + " p99", ref="B"))
        .unit("s")
    )


def queue_series() -> Any:
    from grafana_foundation_sdk.builders import timeseries

    return (
        panel(timeseries.Panel(), "Work queue depth", height=6, span=8)
        .description("Experiments waiting for a reconcile worker (spx_workqueue_depth); grows when the "
                     "operator cannot keep up.")
        .with_target(query(f"max by ({RELEASE}) (spx_workqueue_depth{{{OPERATOR}}})", RELEASE_LEGEND))
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


