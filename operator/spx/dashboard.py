"""The spx Grafana dashboard, generated as code with grafana-foundation-sdk.

The committed JSON (``charts/spx-operator/dashboards/spx.json``, shipped by the chart as a sidecar
ConfigMap) is the output of :func:`dashboard_json`; ``tests/observability`` regenerates it and fails
on drift, checks every query against the operator's metric registry (:mod:`spx.controller.metrics`), and
evaluates every query in a real Prometheus after an experiment completes.

Regenerate after a change::

    python -m spx.dashboard --write charts/spx-operator/dashboards/spx.json

The operator never imports this module; ``grafana_foundation_sdk`` (a dev dependency, pinned
exactly) is imported inside the functions only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

UID = "spx-sharded-projection"
TITLE = "spx — sharded projection experiments"

#: The Prometheus cluster label (an external label of a multi-cluster Prometheus, Thanos or Mimir);
#: "All" (".*") also matches series without one, so a single-cluster Prometheus needs nothing.
CLUSTER = 'cluster=~"$cluster"'
#: Label filters of the per-experiment panels (Grafana variables, single-valued).
EXP = f'{CLUSTER}, namespace="$namespace", experiment="$experiment"'
#: Label filter of the history panels (multi-valued GPU variable).
GPU = f'{CLUSTER}, gpu=~"$gpu"'


def _label_variable(name: str, label: str, ds: Any, query_text: str) -> Any:
    """A dashboard variable listing a label's values, refreshed with the time range, sorted."""
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.models import dashboard as model

    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(ds)
        .query(query_text)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )


def build_dashboard() -> dict[str, Any]:
    """The dashboard as a JSON-compatible dict: Grafana's dashboard schema of the pinned SDK build
    (grafana-foundation-sdk for Grafana 11.6, ``schemaVersion`` 41)."""
    from grafana_foundation_sdk.builders import barchart, bargauge, stat, table, timeseries
    from grafana_foundation_sdk.builders import common as common_b
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.builders.prometheus import Dataquery
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as model

    ds = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

    def query(
        expr: str, legend: str = "__auto", ref: str = "A", *, instant: bool = False, fmt: str | None = None
    ) -> Dataquery:
        q = Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(ds)
        q = q.instant() if instant else q.range()
        if fmt is not None:
            from grafana_foundation_sdk.models.prometheus import PromQueryFormat

            q = q.format(PromQueryFormat(fmt))
        return q

    def panel(builder: Any, title: str, *, height: int, span: int) -> Any:
        """``builder`` (a panel builder: ``stat.Panel()`` …) titled, on the Prometheus data source,
        ``height`` grid rows high and ``span`` of Grafana's 24 grid columns wide."""
        return builder.title(title).datasource(ds).height(height).span(span)

    def transform(id_val: str, options: dict[str, Any]) -> model.DataTransformerConfig:
        return model.DataTransformerConfig(id_val=id_val, options=options)

    def thresholds(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
        return (
            dash.ThresholdsConfig()
            .mode(model.ThresholdsMode.ABSOLUTE)
            .steps([model.Threshold(value=v, color=c) for v, c in steps])
        )

    log2 = common_b.ScaleDistributionConfig().type(common.ScaleDistribution.LOG).log(2)
    # Bar charts need a string x field; sort the token counts numerically first, then make them labels.
    tokens_in_order = [
        transform("convertFieldType", {"conversions": [{"targetField": "tokens", "destinationType": "number"}]}),
        transform("sortBy", {"sort": [{"field": "tokens"}]}),
        transform("convertFieldType", {"conversions": [{"targetField": "tokens", "destinationType": "string"}]}),
    ]

    verdict_colors: list[model.ValueMap | model.RangeMap | model.RegexMap | model.SpecialValueMap] = [
        model.ValueMap(
            options={
                "Pass": model.ValueMappingResult(text="Pass", color="green", index=0),
                "Fail": model.ValueMappingResult(text="Fail", color="red", index=1),
                "Inconclusive": model.ValueMappingResult(text="Inconclusive", color="orange", index=2),
            }
        )
    ]

    builder = (
        dash.Dashboard(TITLE)
        .uid(UID)
        .description(
            "When splitting DeepSeek-V4.1's fused_wqa_wkv projection by token across TP ranks "
            "(+ all-gather) beats replicating it, per GPU type and vLLM version. docs/dashboard.md "
            "explains every panel."
        )
        .tags(["spx", "vllm", "gpu", "benchmark"])
        .editable()
        .refresh("1m")
        .time("now-7d", "now")
        .timezone("utc")
        .with_variable(dash.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            _label_variable("cluster", "Cluster", ds, "label_values(spx_experiments, cluster)")
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
        )
        .with_variable(
            _label_variable("job", "Operator job", ds, f'label_values(spx_experiments{{{CLUSTER}}}, job)')
            .include_all(True)
            .all_value(".*")
        )
        .with_variable(_label_variable(
            "namespace", "Namespace", ds,
            f"label_values(spx_experiment_phase_since_timestamp_seconds{{{CLUSTER}}}, namespace)"))
        .with_variable(_label_variable(
            "experiment", "Experiment", ds,
            f'label_values(spx_experiment_phase_since_timestamp_seconds{{{CLUSTER}, namespace="$namespace"}}, experiment)'))
        .with_variable(
            _label_variable("gpu", "GPU", ds, f"label_values(spx_crossover_tokens{{{CLUSTER}}}, gpu)")
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
        # ---------------------------------------------------------------- the selected experiment
        .with_row(dash.Row("Experiment $namespace/$experiment"))
        .with_panel(
            panel(stat.Panel(), "Verdict", height=5, span=6)
            .description("The gate verdict of the experiment (spx_verdict == 1): Pass, Fail or Inconclusive.")
            .with_target(query(f"spx_verdict{{{EXP}}} == 1", "{{verdict}}", instant=True))
            .text_mode(common.BigValueTextMode.NAME)
            .color_mode(common.BigValueColorMode.BACKGROUND)
            .graph_mode(common.BigValueGraphMode.NONE)
            .mappings(verdict_colors)
            .override_by_name(
                "Pass", [model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "green"})]
            )
            .override_by_name(
                "Fail", [model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"})]
            )
            .override_by_name(
                "Inconclusive",
                [model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "orange"})],
            )
            .no_value("not decided")
        )
        .with_panel(
            panel(stat.Panel(), "Crossover (tokens)", height=5, span=6)
            .description("Interpolated break-even token count: from here on the split candidate wins.")
            .with_target(query(f"spx_crossover_tokens{{{EXP}}}", "{{gpu}} · vLLM {{vllm}}", instant=True))
            .unit("none")
            .decimals(0)
            .graph_mode(common.BigValueGraphMode.NONE)
            .no_value("no crossover")
        )
        .with_panel(
            panel(stat.Panel(), "Recommended threshold (tokens)", height=5, span=6)
            .description("The _SHARD_FUSED_WQA_WKV_MIN_TOKENS the measurement recommends (vLLM 0.33 ships 2048).")
            .with_target(query(f"spx_recommended_threshold_tokens{{{EXP}}}", "{{gpu}} · vLLM {{vllm}}", instant=True))
            .unit("none")
            .decimals(0)
            .graph_mode(common.BigValueGraphMode.NONE)
            .thresholds(thresholds((None, "blue")))
        )
        .with_panel(
            panel(stat.Panel(), "Time in current phase", height=5, span=6)
            .description("Seconds since the experiment entered its current phase (the series' phase label).")
            .with_target(
                query(f"time() - spx_experiment_phase_since_timestamp_seconds{{{EXP}}}", "{{phase}}", instant=True)
            )
            .unit("s")
            .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
            .graph_mode(common.BigValueGraphMode.NONE)
        )
        .with_panel(
            panel(barchart.Panel(), "Latency vs tokens per candidate", height=10, span=12)
            .description(
                "Median time per call (max over ranks) of the replicated and the split candidate at each "
                "token count. Log scale: the split bar drops below the replicated one at the crossover."
            )
            .with_target(
                query(
                    f"max by (tokens, candidate) (spx_kernel_latency_seconds{{{EXP}}})",
                    "{{candidate}}",
                    instant=True,
                    fmt="table",
                )
            )
            .transformations(
                [
                    transform(
                        "groupingToMatrix",
                        {"columnField": "candidate", "rowField": "tokens", "valueField": "Value", "emptyValue": "null"},
                    ),
                    transform("organize", {"renameByName": {"tokens\\candidate": "tokens"}}),
                    *tokens_in_order,
                ]
            )
            .x_field("tokens")
            .unit("s")  # Grafana scales seconds for display: the bars read in µs
            .scale_distribution(log2)
            .axis_label("time per call")
            .show_value(common.VisibilityMode.NEVER)
        )
        .with_panel(
            panel(barchart.Panel(), "Speedup vs tokens (replicated ÷ split)", height=10, span=12)
            .description("Above 1 the split candidate wins at that token count; the line marks 1.")
            .with_target(
                query(f"max by (tokens) (spx_kernel_speedup_ratio{{{EXP}}})", "speedup", instant=True, fmt="table")
            )
            .transformations(
                [
                    transform("organize", {"excludeByName": {"Time": True}, "renameByName": {"Value": "speedup"}}),
                    *tokens_in_order,
                ]
            )
            .x_field("tokens")
            .unit("x")
            .decimals(2)
            .thresholds(thresholds((None, "red"), (1.0, "green")))
            .thresholds_style(common_b.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE))
            .color_scheme(dash.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
            .show_value(common.VisibilityMode.NEVER)
        )
        # ---------------------------------------------------------------- serving A/B and GSM8K
        .with_row(dash.Row("Serving A/B and GSM8K of $namespace/$experiment"))
        .with_panel(
            panel(barchart.Panel(), "Serving change vs main per point", height=9, span=16)
            .description(
                "spec.serving: (split mean − main mean) / main mean per point (spx_serving_change_ratio). Throughput points "
                "are better above 0, TTFT/TPOT/ITL/E2EL points below 0; the serving gate bounds throughput "
                "and TTFT points (docs/serving.md). Empty when the experiment has no serving A/B."
            )
            .with_target(
                query(f"max by (point, metric) (spx_serving_change_ratio{{{EXP}}})", "{{point}}",
                      instant=True, fmt="table")
            )
            .transformations(
                [transform("organize", {"excludeByName": {"Time": True}, "renameByName": {"Value": "change"}})]
            )
            .x_field("point")
            .unit("percentunit")
            .decimals(2)
            .thresholds(thresholds((None, "blue")))
            .thresholds_style(common_b.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.OFF))
            .show_value(common.VisibilityMode.AUTO)
            .no_value("no serving A/B")
        )
        .with_panel(
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
        # ---------------------------------------------------------------- history across runs
        .with_row(dash.Row("Crossover history per GPU type and vLLM version"))
        .with_panel(
            panel(timeseries.Panel(), "Crossover over time", height=9, span=12)
            .description("Break-even token count per GPU type and vLLM version, across experiments.")
            .with_target(query(f"max by (gpu, vllm) (spx_crossover_tokens{{{GPU}}})", "{{gpu}} · vLLM {{vllm}}"))
            .unit("none")
            .decimals(0)
            .span_nulls(True)
        )
        .with_panel(
            panel(timeseries.Panel(), "Recommended threshold over time", height=9, span=12)
            .description("Recommended _SHARD_FUSED_WQA_WKV_MIN_TOKENS per GPU type and vLLM version.")
            .with_target(
                query(f"max by (gpu, vllm) (spx_recommended_threshold_tokens{{{GPU}}})", "{{gpu}} · vLLM {{vllm}}")
            )
            .unit("none")
            .decimals(0)
            .span_nulls(True)
        )
        .with_panel(
            panel(table.Panel(), "Verdicts", height=8, span=24)
            .description("Current verdict of every experiment in the namespace.")
            .with_target(query(f'spx_verdict{{{CLUSTER}, namespace="$namespace"}} == 1', instant=True, fmt="table"))
            .transformations(
                [
                    transform(
                        "organize",
                        {
                            "excludeByName": {
                                "Time": True,
                                "Value": True,
                                "__name__": True,
                                "job": True,
                                "instance": True,
                            },
                            "indexByName": {"namespace": 0, "experiment": 1, "gpu": 2, "vllm": 3, "verdict": 4},
                        },
                    )
                ]
            )
            .override_by_name(
                "verdict",
                [
                    model.DynamicConfigValue(
                        id_val="mappings",
                        value=[
                            {
                                "type": "value",
                                "options": {
                                    "Pass": {"text": "Pass", "color": "green", "index": 0},
                                    "Fail": {"text": "Fail", "color": "red", "index": 1},
                                    "Inconclusive": {"text": "Inconclusive", "color": "orange", "index": 2},
                                },
                            }
                        ],
                    ),
                    model.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
                ],
            )
        )
        # ---------------------------------------------------------------- experiments
        .with_row(dash.Row("Experiments"))
        .with_panel(
            panel(timeseries.Panel(), "Experiments by phase", height=8, span=8)
            .description("Number of experiments per phase (spx_experiments).")
            .with_target(query(f"sum by (phase) (spx_experiments{{{CLUSTER}}})", "{{phase}}"))
            .unit("none")
            .decimals(0)
            .stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL))
            .fill_opacity(30)
        )
        .with_panel(
            panel(bargauge.Panel(), "Experiment durations", height=8, span=8)
            .description(
                "Experiments that reached a terminal phase in the time range, by duration bucket (Job creation → terminal phase)."
            )
            .with_target(
                query(
                    f"sum by (le) (increase(spx_experiment_duration_seconds_bucket{{{CLUSTER}}}[$__range]))",
                    "{{le}}",
                    instant=True,
                    fmt="heatmap",
                )
            )
            .unit("none")
            .decimals(0)
            .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        )
        .with_panel(
            panel(stat.Panel(), "Mean experiment duration", height=8, span=8)
            .description("Mean wall time from Job creation to a terminal phase, over the time range.")
            .with_target(
                query(
                    f"sum(increase(spx_experiment_duration_seconds_sum{{{CLUSTER}}}[$__range]))"
                    f" / sum(increase(spx_experiment_duration_seconds_count{{{CLUSTER}}}[$__range]))",
                    "mean",
                    instant=True,
                )
            )
            .unit("s")
            .graph_mode(common.BigValueGraphMode.NONE)
        )
        # ---------------------------------------------------------------- the operator
        .with_row(dash.Row("Operator health"))
        .with_panel(
            panel(stat.Panel(), "Since last reconcile", height=6, span=6)
            .description(
                "Seconds since the operator last completed a reconcile (spx_last_reconcile_timestamp_seconds)."
            )
            .with_target(
                query(f"time() - max(spx_last_reconcile_timestamp_seconds{{{CLUSTER}}})", "since last reconcile",
                      instant=True)
            )
            .unit("s")
            .thresholds(thresholds((None, "green"), (900, "orange"), (1800, "red")))
            .color_mode(common.BigValueColorMode.BACKGROUND)
            .graph_mode(common.BigValueGraphMode.NONE)
        )
        .with_panel(
            panel(timeseries.Panel(), "Reconciles by handler and outcome", height=6, span=9)
            .description("Reconcile handler invocations per second (spx_reconcile_total).")
            .with_target(
                query(
                    f"sum by (handler, outcome) (rate(spx_reconcile_total{{{CLUSTER}}}[$__rate_interval]))",
                    "{{handler}} {{outcome}}",
                )
            )
            .unit("ops")
        )
        .with_panel(
            panel(timeseries.Panel(), "Reconcile errors", height=6, span=9)
            .description(
                "Reconcile handler invocations that raised, per second (spx_reconcile_errors_total); 0 when none."
            )
            .with_target(query(f"sum(rate(spx_reconcile_errors_total{{{CLUSTER}}}[$__rate_interval])) or vector(0)",
                               "errors"))
            .unit("ops")
            .thresholds(thresholds((None, "green"), (1e-9, "red")))
        )
        .with_panel(
            panel(timeseries.Panel(), "Reconcile duration p50 / p99", height=6, span=8)
            .description("Seconds per reconcile of one experiment (spx_reconcile_duration_seconds), all handlers.")
            .with_target(query(
                f"histogram_quantile(0.5, sum by (le) (rate(spx_reconcile_duration_seconds_bucket{{{CLUSTER}}}[$__rate_interval])))",
                "p50"))
            .with_target(query(
                f"histogram_quantile(0.99, sum by (le) (rate(spx_reconcile_duration_seconds_bucket{{{CLUSTER}}}[$__rate_interval])))",
                "p99", ref="B"))
            .unit("s")
        )
        .with_panel(
            panel(timeseries.Panel(), "Work queue depth", height=6, span=8)
            .description("Experiments waiting for a reconcile worker (spx_workqueue_depth); grows when the "
                         "operator cannot keep up.")
            .with_target(query(f"max(spx_workqueue_depth{{{CLUSTER}}})", "depth"))
            .unit("none")
            .decimals(0)
        )
        .with_panel(
            panel(timeseries.Panel(), "Operator CPU and memory", height=6, span=8)
            .description("process_cpu_seconds_total rate (cores) and process_resident_memory_bytes of the operator.")
            .with_target(query(f'rate(process_cpu_seconds_total{{{CLUSTER}, job=~"$job"}}[$__rate_interval])', "cpu cores"))
            .with_target(query(f'process_resident_memory_bytes{{{CLUSTER}, job=~"$job"}}', "resident memory", ref="B"))
            .override_by_name("resident memory", [model.DynamicConfigValue(id_val="unit", value="bytes"),
                                                  model.DynamicConfigValue(id_val="custom.axisPlacement", value="right")])
            .unit("none")
        )
    )
    encoded = JSONEncoder(sort_keys=True, indent=2).encode(builder.build())
    result: dict[str, Any] = json.loads(encoded)
    for number, panel in enumerate(result["panels"], start=1):  # Grafana wants unique panel ids
        panel["id"] = number
    return result


def dashboard_json() -> str:
    """The committed text of ``charts/spx-operator/dashboards/spx.json``: sorted keys, 2-space indent."""
    return json.dumps(build_dashboard(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, PromQL expression)`` of every query target of every panel, rows included."""
    out: list[tuple[str, str]] = []

    def visit(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:
                if target.get("expr"):
                    out.append((panel.get("title", ""), target["expr"]))
            visit(panel.get("panels") or [])

    visit(dashboard.get("panels") or [])
    return out


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(variable name, query)`` of every query variable (Grafana ``label_values(...)`` syntax)."""
    variables = (dashboard.get("templating") or {}).get("list") or []
    return [(v["name"], v["query"]) for v in variables if v.get("type") == "query"]


def main(argv: list[str] | None = None) -> int:
    """``python -m spx.dashboard [--write PATH | --check PATH]``: print, write or check the JSON."""
    parser = argparse.ArgumentParser(prog="python -m spx.dashboard", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="PATH", help="write the dashboard JSON to PATH")
    group.add_argument("--check", type=Path, metavar="PATH", help="exit 1 if PATH differs from the generated JSON")
    args = parser.parse_args(argv)
    text = dashboard_json()
    if args.write:
        args.write.write_text(text, encoding="utf-8")
        return 0
    if args.check:
        if not args.check.exists() or args.check.read_text(encoding="utf-8") != text:
            print(f"{args.check} is out of date; run: python -m spx.dashboard --write {args.check}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
