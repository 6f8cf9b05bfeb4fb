"""The dashboard's first row, "What decided and why": the verdict, the measurement that decided it, the
recommendation from that measurement, each kernel regime's own verdict, crossover and threshold, the
step A/B's effect vs tokens with its interval (aligned and pad path), its expected effect over the batch
mix, and Δg/Δh per token count (issue #36). One function per panel; docs/dashboard.md explains them.

Nothing here shows one regime's figure as the verdict's: the regimes' crossovers and thresholds are in
a table labelled by regime, next to that regime's own verdict.
"""

from __future__ import annotations

from typing import Any

from spx.tools.dashboard.parts import (
    EXP,
    fixed_color,
    panel,
    query,
    thresholds,
    transform,
    verdict_mapping_options,
    verdict_value_map,
)

#: A row: its title and its panel builders, left to right, top to bottom.
Row = tuple[str, list[Any]]


def verdict_stat() -> Any:
    """The Verdict stat: spx_verdict (1 for the current verdict) per experiment, coloured by verdict."""
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common

    return (
        panel(stat.Panel(), "Verdict", height=5, span=5)
        .description("The gate verdict of the experiment (spx_verdict == 1): Pass, Fail or Inconclusive.")
        .with_target(query(f"spx_verdict{{{EXP}}} == 1", "{{verdict}}", instant=True))
        .text_mode(common.BigValueTextMode.NAME)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .mappings(verdict_value_map())
        .override_by_name("Pass", fixed_color("green"))
        .override_by_name("Fail", fixed_color("red"))
        .override_by_name("Inconclusive", fixed_color("orange"))
        .no_value("not decided")
    )


def decided_by_stat() -> Any:
    """The "Decided by" stat: spx_verdict's decided_by label (correctness, kernel, step, deployment, serving, accuracy, none)."""
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common

    return (
        panel(stat.Panel(), "Decided by", height=5, span=5)
        .description("The measurement that decided the verdict (spx_verdict's decided_by, status.kernel.decidedBy): "
                     "kernel (both regimes agree, or one applies), step (the step A/B: the regimes disagree), "
                     "serving, accuracy, correctness, deployment or none.")
        .with_target(query(f"spx_verdict{{{EXP}}} == 1", "{{decided_by}}", instant=True))
        .text_mode(common.BigValueTextMode.NAME)
        .color_mode(common.BigValueColorMode.NONE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .no_value("not decided")
    )


def recommendation_stat() -> Any:
    """The recommended threshold (tokens) from what decided: spx_recommended_threshold_tokens, i.e. status.judgement's."""
    from grafana_foundation_sdk.builders import stat
    from grafana_foundation_sdk.models import common

    return (
        panel(stat.Panel(), "Recommended threshold (from what decided)", height=5, span=5)
        .description("The _SHARD_FUSED_WQA_WKV_MIN_TOKENS the deciding measurement recommends "
                     "(spx_recommended_threshold_tokens: the step A/B's when it decided, else the kernel's); "
                     "vLLM 0.33 ships 2048.")
        .with_target(query(f"spx_recommended_threshold_tokens{{{EXP}}}", "{{gpu}} · vLLM {{vllm}}", instant=True))
        .unit("none")
        .decimals(0)
        .thresholds(thresholds((None, "blue")))
        .graph_mode(common.BigValueGraphMode.NONE)
        .no_value("none from what decided")
    )


def regimes_table() -> Any:
    """A table of each kernel regime (GPU-bound Δg, host-bound Δh): its own verdict, crossover and threshold (tokens)."""
    from grafana_foundation_sdk.builders import table
    from grafana_foundation_sdk.models import dashboard as model

    hidden = {"Time": True, "Value #A": True, "__name__": True, "job": True, "instance": True, "namespace": True,
              "experiment": True, "cluster": True}
    return (
        panel(table.Panel(), "Kernel regimes (each its own verdict)", height=5, span=9)
        .description("Each kernel regime judged alone (spx_regime_verdict, spx_regime_crossover_tokens, "
                     "spx_regime_recommended_threshold_tokens): gpu-bound on GPU spans, host-bound on eager host "
                     "issue times. A regime's figures are the verdict's only when it decided; when they disagree the "
                     "step A/B decides.")
        .with_target(query(f"spx_regime_verdict{{{EXP}}} == 1", instant=True, fmt="table"))
        .with_target(query(f"spx_regime_crossover_tokens{{{EXP}}}", instant=True, fmt="table", ref="B"))
        .with_target(query(f"spx_regime_recommended_threshold_tokens{{{EXP}}}", instant=True, fmt="table", ref="C"))
        .transformations([
            transform("merge", {}),
            transform("organize", {"excludeByName": hidden, "indexByName": {"regime": 0, "verdict": 1},
                                   "renameByName": {"Value #B": "crossover (tokens)", "Value #C": "threshold (tokens)"}}),
        ])
        .override_by_name("verdict", [
            model.DynamicConfigValue(id_val="mappings", value=[{"type": "value", "options": verdict_mapping_options()}]),
            model.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
        ])
    )


def _curve(title: str, description: str, expr: str, x: str, *, span: int) -> Any:
    """A trend panel (numeric x axis) of a query returning one series per ``series`` label, x = label ``x``."""
    from grafana_foundation_sdk.builders import trend

    return (
        panel(trend.Panel(), title, height=9, span=span)
        .description(description)
        .with_target(query(expr, "{{series}}", instant=True, fmt="table"))
        .transformations([
            transform("groupingToMatrix", {"columnField": "series", "rowField": x, "valueField": "Value",
                                           "emptyValue": "null"}),
            transform("organize", {"renameByName": {f"{x}\\series": x}}),
            transform("convertFieldType", {"conversions": [{"targetField": x, "destinationType": "number"}]}),
            transform("sortBy", {"sort": [{"field": x}]}),
        ])
        .x_field(x)
        .unit("s")
        .span_nulls(True)
    )


def step_curve() -> Any:
    """The step A/B's effect (seconds per step) vs prompt tokens, with its interval, aligned and pad path per arm."""
    return _curve(
        "Step effect per layer vs tokens (step A/B)",
        "The split's measured effect on a whole prefill step at each prompt length, per layer "
        "(spx_step_effect_per_layer_seconds; negative: a gain), estimate and the ends of its interval, for "
        "vLLM's split and the pad-free shard, on the aligned path (length % TP == 0) and the pad path. "
        "Empty when the experiment has no step A/B.",
        f'label_join(spx_step_effect_per_layer_seconds{{{EXP}, arm=~"split|pad-free"}}, "series", " ", "arm", "path", "bound")',
        "length", span=12)


def delta_curve() -> Any:
    """Δg and Δh (seconds per call = per layer) vs token count, with their 95 % intervals (spx_kernel_delta_seconds)."""
    return _curve(
        "Δg and Δh per layer vs tokens (kernel)",
        "The split's GPU difference Δg (GPU spans) and host difference Δh (eager host issue times) per call, "
        "one call per layer (spx_kernel_delta_seconds), with their 95 % intervals: the step moves by Δg "
        "while the GPU is the bottleneck and by Δh while the host is.",
        f'label_join(spx_kernel_delta_seconds{{{EXP}}}, "series", " ", "delta", "bound")',
        "tokens", span=12)


def expected_table() -> Any:
    """The expected step effect over the deployment's batch mix per threshold and arm (seconds per step), with its interval."""
    from grafana_foundation_sdk.builders import table

    hidden = {"Time": True, "__name__": True, "job": True, "instance": True, "namespace": True, "experiment": True,
              "cluster": True}
    return (
        panel(table.Panel(), "Expected step effect over the batch mix", height=6, span=24)
        .description("The expected effect per layer of splitting from each threshold over the batch sizes the "
                     "deployment forms at and above it (spx_step_expected_effect_per_layer_seconds), estimate and "
                     "interval ends; the step decides Pass on a resolved gain at the gate threshold, Fail on a loss.")
        .with_target(query(f'label_join(spx_step_expected_effect_per_layer_seconds{{{EXP}}}, "row", " from ", "arm", "threshold")',
                           instant=True, fmt="table"))
        .transformations([
            transform("groupingToMatrix", {"columnField": "bound", "rowField": "row", "valueField": "Value"}),
            transform("organize", {"excludeByName": hidden, "renameByName": {"row\\bound": "arm from threshold (tokens)"}}),
        ])
        .unit("s")
        .no_value("no step A/B")
    )


def decided_row() -> Row:
    """What decided the selected experiment's verdict, and why."""
    return "What decided $namespace/$experiment, and why", [
        verdict_stat(), decided_by_stat(), recommendation_stat(), regimes_table(), step_curve(), delta_curve(),
        expected_table(),
    ]
