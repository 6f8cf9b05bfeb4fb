"""The Grafana dashboard is code (spx.tools.dashboard, grafana-foundation-sdk): the committed JSON is what
the code generates, every panel the issue asks for is there, and every query reads only metrics the
operator exports (spx.controller.metrics.REGISTRY)."""

from __future__ import annotations

import json

import pytest

from spx_testing.obslib import DASHBOARD, label_values_selector, metric_names, registry_series_names

pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk (dev dependency) is not installed")

from spx.tools.dashboard import UID, build_dashboard, dashboard_json, panel_queries, variable_queries


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return build_dashboard()


def test_committed_json_is_the_generated_one() -> None:
    assert DASHBOARD.read_text(encoding="utf-8") == dashboard_json(), (
        f"{DASHBOARD} is out of date: python -m spx.tools.dashboard --write {DASHBOARD.relative_to(DASHBOARD.parents[3])}"
    )


def test_generation_is_deterministic() -> None:
    assert dashboard_json() == dashboard_json()


REQUIRED_PANELS = {
    # issue 4, point 4: panel title → the metric it must plot
    "Latency vs tokens per candidate": "spx_kernel_latency_seconds",
    "Speedup vs tokens (replicated ÷ split)": "spx_kernel_speedup_ratio",
    "GPU-bound crossover over time": "spx_crossover_tokens",
    "Recommended threshold (from what decided) over time": "spx_recommended_threshold_tokens",
    "Verdict": "spx_verdict",
    "Verdicts": "spx_verdict",
    "Experiments by phase": "spx_experiments",
    "Experiment durations": "spx_experiment_duration_seconds_bucket",
    "Mean experiment duration": "spx_experiment_duration_seconds_sum",
    "Time in current phase": "spx_experiment_phase_since_timestamp_seconds",
    "Since last reconcile": "spx_last_reconcile_timestamp_seconds",
    "Reconciles by handler and outcome": "spx_reconcile_total",
    "Reconcile errors": "spx_reconcile_errors_total",
    # issue 5, point 5: the serving A/B and GSM8K
    "Serving change vs main per point": "spx_serving_change_ratio",
    "GSM8K accuracy per variant": "spx_accuracy_ratio",
    # issue 12, point 6/7: the operator's own health
    "Reconcile duration p50 / p99": "spx_reconcile_duration_seconds_bucket",
    "Work queue depth": "spx_workqueue_depth",
    "Operator CPU and memory": "process_resident_memory_bytes",
    # issue 36, point 2: what decided and why
    "Decided by": "spx_verdict",
    "Recommended threshold (from what decided)": "spx_recommended_threshold_tokens",
    "Kernel regimes (each its own verdict)": "spx_regime_verdict",
    "Step effect per layer vs tokens (step A/B)": "spx_step_effect_per_layer_seconds",
    "Δg and Δh per layer vs tokens (kernel)": "spx_kernel_delta_seconds",
    "Expected step effect over the batch mix": "spx_step_expected_effect_per_layer_seconds",
}

#: Panels that showed one kernel regime's figure as if it were the verdict's (issue #36: "Crossover 234"
#: and "Recommended threshold 256" beside a step-decided Fail): gone.
CONTRADICTING_PANELS = {"Crossover (tokens)", "Recommended threshold (tokens)", "Crossover over time",
                        "Recommended threshold over time"}


def test_no_panel_shows_a_regime_figure_as_the_verdicts(dashboard: dict) -> None:
    titles = {t for t, _ in panel_queries(dashboard)}
    assert not titles & CONTRADICTING_PANELS
    # the only un-regimed crossover is the history's drift signal, titled as the GPU-bound one
    crossover = {t for t, e in panel_queries(dashboard) if "spx_crossover_tokens" in e}
    assert crossover == {"GPU-bound crossover over time"}


def test_operator_panels_are_per_release(dashboard: dict) -> None:
    """Issue #36: the operator row aggregates per release (namespace, job), as the alert rules do."""
    row = next(i for i, p in enumerate(dashboard["panels"]) if p["type"] == "row" and p["title"] == "Operator health")
    for p in dashboard["panels"][row + 1:]:
        for t in p["targets"]:
            if "spx_" in t["expr"] and "process_" not in t["expr"]:
                assert "by (namespace, job" in t["expr"], (p["title"], t["expr"])


def test_required_panels_plot_their_metrics(dashboard: dict) -> None:
    by_title: dict[str, set[str]] = {}
    for title, expr in panel_queries(dashboard):
        by_title.setdefault(title, set()).update(metric_names(expr))
    for title, metric in REQUIRED_PANELS.items():
        assert title in by_title, f"missing panel {title!r}"
        assert metric in by_title[title], f"{title!r} does not query {metric}"


def test_every_query_reads_only_exported_metrics(dashboard: dict) -> None:
    exported = registry_series_names()
    queries = panel_queries(dashboard) + [(name, label_values_selector(q)) for name, q in variable_queries(dashboard)]
    assert len(queries) >= len(REQUIRED_PANELS)
    for title, expr in queries:
        names = metric_names(expr)
        assert names, f"{title!r}: no metric in {expr!r}"
        assert names <= exported, f"{title!r} reads {names - exported}, not in spx.controller.metrics.REGISTRY"


def test_panels_use_the_datasource_variable_and_unique_ids(dashboard: dict) -> None:
    assert dashboard["uid"] == UID
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"


def test_the_operator_does_not_import_the_grafana_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, spx.cli, spx.controller.metrics, spx.cli.gate;"
        "import spx.tools.dashboard;"  # importing the module must not import the SDK either
        "sys.exit(1 if any(m.startswith('grafana_foundation_sdk') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_json_is_valid_for_grafana(dashboard: dict) -> None:
    text = json.dumps(dashboard)
    assert "${datasource}" in text
    assert dashboard["schemaVersion"] >= 39  # Grafana 11
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, panel["title"]


# --------------------------------------------------------------------------- the SDK's own schema


def test_the_sdk_is_the_grafana_11_build_pinned_in_pyproject() -> None:
    """pyproject.toml pins the grafana-foundation-sdk build for Grafana 11.x exactly; that build is installed."""
    import re
    from importlib.metadata import version

    from spx_testing.obslib import ROOT

    pins = re.findall(r'"grafana-foundation-sdk==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert len(pins) == 1 and re.fullmatch(r"\d+!11\.\d+\.\d+", pins[0]), pins
    assert version("grafana-foundation-sdk") == pins[0]


def test_the_committed_json_round_trips_through_the_sdk_models() -> None:
    """The SDK's models are generated from Grafana's dashboard schema: decoding the committed JSON with
    them and encoding it again loses nothing (an unknown or misspelt field would be dropped)."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    committed = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    again = json.loads(JSONEncoder(sort_keys=True).encode(Dashboard.from_json(committed)))
    assert again == committed


#: The SDK model modules the dashboard is made of (its panel types, the Prometheus query, the shared types).
SDK_MODELS = ("dashboard", "common", "prometheus", "stat", "timeseries", "barchart", "bargauge", "table", "trend")


def _deprecated_fields() -> set[str]:
    """camelCase names of the fields the SDK's models (of :data:`SDK_MODELS`) mark deprecated: a
    ``# … deprecated …`` comment in the comment block right above the field."""
    import re
    from pathlib import Path

    import grafana_foundation_sdk.models as models

    names: set[str] = set()
    for module in SDK_MODELS:
        lines = (Path(models.__file__).parent / f"{module}.py").read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.lstrip().startswith("#") and "deprecated" in line.lower():
                for nxt in lines[i + 1 : i + 6]:
                    if nxt.lstrip().startswith("#"):
                        continue
                    m = re.match(r"\s+([a-z_][a-z0-9_]*): typing\.", nxt)
                    if m:
                        head, *rest = m.group(1).removesuffix("_val").split("_")
                        names.add(head + "".join(w.title() for w in rest))
                    break
    return names


def test_no_deprecated_fields_or_panel_types(dashboard: dict) -> None:
    deprecated = _deprecated_fields()
    assert {"intervalFactor", "folderId", "displayMode"} <= deprecated  # the scan finds the SDK's markers

    def keys(node: object, path: str = "") -> list[tuple[str, str]]:
        if isinstance(node, dict):
            return [(k, path) for k in node] + [kp for k, v in node.items() for kp in keys(v, f"{path}.{k}")]
        if isinstance(node, list):
            return [kp for i, v in enumerate(node) for kp in keys(v, f"{path}[{i}]")]
        return []

    # options.displayMode (bar gauges) and options.legend.displayMode are current; the deprecated one is
    # tables' fieldConfig.defaults.custom.displayMode (and its overrides)
    used = {(k, p) for k, p in keys(dashboard) if k in deprecated
            and not (k == "displayMode" and (p.endswith(".options") or p.endswith(".legend")))}
    assert not used, f"deprecated fields: {sorted(used)}"
    legacy = {"graph", "singlestat", "table-old", "grafana-piechart-panel", "grafana-worldmap-panel"}
    assert not {p["type"] for p in dashboard["panels"]} & legacy
    assert "rows" not in dashboard  # pre-5.0 layout


def test_every_query_is_scoped_to_the_cluster_variable(dashboard: dict) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    cluster = variables["cluster"]
    assert cluster["includeAll"] is True and cluster["allValue"] == ".*"  # also matches series without the label
    for title, expr in panel_queries(dashboard):
        assert 'cluster=~"$cluster"' in expr, f"{title!r} ignores $cluster: {expr}"
