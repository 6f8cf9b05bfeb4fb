"""The dashboard's rows, top to bottom, each one function returning its title and its panels.

One function per panel, each a few builder calls (``parts`` holds the shared pieces); docs/dashboard.md
explains every panel to users.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spx.tools.dashboard.decided_row import decided_row
from spx.tools.dashboard.operator_row import operator_row
from spx.tools.dashboard.parts import (
    CLUSTER,
    EXP,
    GPU,
    log2_scale,
    panel,
    query,
    thresholds,
    tokens_in_order,
    transform,
    verdict_mapping_options,
)

#: A row: its title and its panel builders, left to right, top to bottom.
Row = tuple[str, list[Any]]


# ---------------------------------------------------------------------------- the selected experiment


def phase_age_stat() -> Any:
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common

    return (
        panel(stat.Panel(), "Time in current phase", height=10, span=4)
        .description("Seconds since the experiment entered its current phase (the series' phase label).")
        .with_target(query(f"time() - spx_experiment_phase_since_timestamp_seconds{{{EXP}}}", "{{phase}}", instant=True))
        .unit("s")
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
        .graph_mode(common.BigValueGraphMode.NONE)
    )


def latency_bars() -> Any:
    from grafana_foundation_sdk.builders import barchart
    from grafana_foundation_sdk.models import common

    return (
        panel(barchart.Panel(), "Latency vs tokens per candidate", height=10, span=10)
        .description(
            "Median time per call (max over ranks) of the replicated and the split candidate at each "
            "token count. Log scale: the split bar drops below the replicated one at the crossover."
        )
        .with_target(query(f"max by (tokens, candidate) (spx_kernel_latency_seconds{{{EXP}}})", "{{candidate}}",
                           instant=True, fmt="table"))
        .transformations([
            transform("groupingToMatrix",
                      {"columnField": "candidate", "rowField": "tokens", "valueField": "Value", "emptyValue": "null"}),
            transform("organize", {"renameByName": {"tokens\\candidate": "tokens"}}),
            *tokens_in_order(),
        ])
        .x_field("tokens")
        .unit("s")  # Grafana scales seconds for display: the bars read in µs
        .scale_distribution(log2_scale())
        .axis_label("time per call")
        .show_value(common.VisibilityMode.NEVER)
    )


def speedup_bars() -> Any:
    from grafana_foundation_sdk.builders import barchart
    from grafana_foundation_sdk.builders import common as common_b
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as model

    return (
        panel(barchart.Panel(), "Speedup vs tokens (replicated ÷ split)", height=10, span=10)
        .description("Above 1 the split candidate wins at that token count; the line marks 1.")
        .with_target(query(f"max by (tokens) (spx_kernel_speedup_ratio{{{EXP}}})", "speedup", instant=True, fmt="table"))
        .transformations([
            transform("organize", {"excludeByName": {"Time": True}, "renameByName": {"Value": "speedup"}}),
            *tokens_in_order(),
        ])
        .x_field("tokens")
        .unit("x")
        .decimals(2)
        .thresholds(thresholds((None, "red"), (1.0, "green")))
        .thresholds_style(common_b.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE))
        .color_scheme(dash.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .show_value(common.VisibilityMode.NEVER)
    )


def experiment_row() -> Row:
    """The selected experiment's kernel sweep: phase age and the two bar charts (the GPU-bound crossover and
    threshold are in the "what decided" row's regime table, next to that regime's own verdict: shown alone
    beside the verdict they contradicted a step-decided Fail, issue #36)."""
    return "Kernel sweep of $namespace/$experiment", [phase_age_stat(), latency_bars(), speedup_bars()]


# ---------------------------------------------------------------------------- serving A/B and GSM8K


def serving_change_bars() -> Any:
    from grafana_foundation_sdk.builders import barchart
    from grafana_foundation_sdk.builders import common as common_b
    from grafana_foundation_sdk.models import common

    return (
        panel(barchart.Panel(), "Serving change vs main per point", height=9, span=16)
        .description(
            "spec.serving: (split mean − main mean) / main mean per point (spx_serving_change_ratio). Throughput points "
            "are better above 0, TTFT/TPOT/ITL/E2EL points below 0; the serving gate bounds throughput "
            "and TTFT points (docs/serving.md). Empty when the experiment has no serving A/B."
        )
        .with_target(query(f"max by (point, metric) (spx_serving_change_ratio{{{EXP}}})", "{{point}}",
                           instant=True, fmt="table"))
        .transformations([transform("organize", {"excludeByName": {"Time": True}, "renameByName": {"Value": "change"}})])
        .x_field("point")
        .unit("percentunit")
        .decimals(2)
        .thresholds(thresholds((None, "blue")))
        .thresholds_style(common_b.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.OFF))
        .show_value(common.VisibilityMode.AUTO)
        .no_value("no serving A/B")
    )


def accuracy_gauge() -> Any:
    from grafana_foundation_sdk.builders import bargauge
    from grafana_foundation_sdk.models import common

    return (
        panel(bargauge.Panel(), "GSM8K accuracy per variant", height=9, span=8)
        .description(
            "spec.accuracy: GSM8K accuracy of the main and the split servers (mean over each variant's "
            "arms). The accuracy gate bounds main − split (spx_accuracy_drop_ratio)."
        )
        .with_target(query(f"max by (variant) (spx_accuracy_ratio{{{EXP}}})", "{{variant}}", instant=True))
        .unit("percentunit")
        .decimals(2)
        .min(0)
        .max(1)
        .display_mode(common.BarGaugeDisplayMode.BASIC)
        .no_value("no GSM8K run")
    )


def serving_row() -> Row:
    """The serving A/B and GSM8K of the selected experiment."""
    return "Serving A/B and GSM8K of $namespace/$experiment", [serving_change_bars(), accuracy_gauge()]


# ---------------------------------------------------------------------------- history across runs


#: What a history line holds: runs that are comparable (spx.controller.metrics.COMPARABLE_LABELS less the
#: driver and the sweep grid), CPU smoke runs left out; TP4 and TP8, or two projection shapes, are
#: separate lines.
HISTORY_BY = "gpu, vllm, gemm_backend, gather_source, execution_mode, tp, projection"
HISTORY_LEGEND = "{{gpu}} · TP{{tp}} {{projection}} · vLLM {{vllm}} · {{gemm_backend}} · {{gather_source}} gather"


def history_series(title: str, description: str, metric: str) -> Any:
    """One token count per comparable kind of run (GPU, vLLM, GEMM backend, gather source, execution
    mode, TP size, projection shape) over time, across experiments; CPU smoke runs left out."""
    from grafana_foundation_sdk.builders import timeseries

    return (
        panel(timeseries.Panel(), title, height=9, span=12)
        .description(description)
        .with_target(query(f'max by ({HISTORY_BY}) ({metric}{{{GPU}, device!="cpu"}})', HISTORY_LEGEND))
        .unit("none")
        .decimals(0)
        .span_nulls(True)
    )


def verdict_table() -> Any:
    from grafana_foundation_sdk.builders import table
    from grafana_foundation_sdk.models import dashboard as model

    hidden = {"Time": True, "Value": True, "__name__": True, "job": True, "instance": True}
    order = {"namespace": 0, "experiment": 1, "gpu": 2, "vllm": 3, "verdict": 4, "decided_by": 5}
    return (
        panel(table.Panel(), "Verdicts", height=8, span=24)
        .description("Current verdict of every experiment in the namespace.")
        .with_target(query(f'spx_verdict{{{CLUSTER}, namespace="$namespace"}} == 1', instant=True, fmt="table"))
        .transformations([transform("organize", {"excludeByName": hidden, "indexByName": order})])
        .override_by_name("verdict", [
            model.DynamicConfigValue(id_val="mappings", value=[{"type": "value", "options": verdict_mapping_options()}]),
            model.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
        ])
    )


def history_row() -> Row:
    """Crossover and recommended threshold per GPU type and vLLM version, and every verdict."""
    return "Crossover history per GPU type and vLLM version", [
        history_series("GPU-bound crossover over time",
                       "The kernel's GPU-bound break-even token count per GPU type, vLLM version, GEMM backend and "
                       "gather source (measured or modelled), across experiments; CPU smoke runs left out. A drift "
                       "signal of the measurement, not a verdict.",
                       "spx_crossover_tokens"),
        history_series("Recommended threshold (from what decided) over time",
                       "The deciding measurement's recommended _SHARD_FUSED_WQA_WKV_MIN_TOKENS per GPU type, vLLM "
                       "version, GEMM backend and gather source; CPU smoke runs left out.",
                       "spx_recommended_threshold_tokens"),
        verdict_table(),
    ]


# ---------------------------------------------------------------------------- experiments


def phases_series() -> Any:
    from grafana_foundation_sdk.builders import common as common_b
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.models import common

    return (
        panel(timeseries.Panel(), "Experiments by phase", height=8, span=8)
        .description("Number of experiments per phase (spx_experiments).")
        .with_target(query(f"sum by (phase) (spx_experiments{{{CLUSTER}}})", "{{phase}}"))
        .unit("none")
        .decimals(0)
        .stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL))
        .fill_opacity(30)
    )


def duration_buckets() -> Any:
    from grafana_foundation_sdk.builders import bargauge
    from grafana_foundation_sdk.models import common

    return (
        panel(bargauge.Panel(), "Experiment durations", height=8, span=8)
        .description(
            "Experiments that reached a terminal phase in the time range, by duration bucket (Job creation → terminal phase)."
        )
        .with_target(query(f"sum by (le) (increase(spx_experiment_duration_seconds_bucket{{{CLUSTER}}}[$__range]))",
                           "{{le}}", instant=True, fmt="heatmap"))
        .unit("none")
        .decimals(0)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
    )


def mean_duration_stat() -> Any:
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common

    total, count = (f"sum(increase(spx_experiment_duration_seconds_{s}{{{CLUSTER}}}[$__range]))" for s in ("sum", "count"))
    return (
        panel(stat.Panel(), "Mean experiment duration", height=8, span=8)
        .description("Mean wall time from Job creation to a terminal phase, over the time range.")
        .with_target(query(f"{total} / {count}", "mean", instant=True))
        .unit("s")
        .graph_mode(common.BigValueGraphMode.NONE)
    )


def experiments_row() -> Row:
    """Experiments by phase and how long they took."""
    return "Experiments", [phases_series(), duration_buckets(), mean_duration_stat()]


#: The rows, top to bottom.
ROWS: tuple[Callable[[], Row], ...] = (decided_row, experiment_row, serving_row, history_row, experiments_row, operator_row)
