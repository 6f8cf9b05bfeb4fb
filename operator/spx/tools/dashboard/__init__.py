"""The spx Grafana dashboard, generated as code with grafana-foundation-sdk, row by row.

The committed JSON (``charts/spx-operator/dashboards/spx.json``, shipped by the chart as a sidecar
ConfigMap) is the output of :func:`dashboard_json`; ``tests/observability`` regenerates it and fails
on drift, checks every query against the operator's metric registry (:mod:`spx.controller.metrics`), and
evaluates every query in a real Prometheus after an experiment completes. The dashboard is its
variables (:func:`variables`) then its rows (:data:`spx.tools.dashboard.rows.ROWS`, one function
each, one small function per panel; shared pieces in :mod:`spx.tools.dashboard.parts`).

Regenerate after a change::

    python -m spx.tools.dashboard --write charts/spx-operator/dashboards/spx.json

The operator never imports this package; ``grafana_foundation_sdk`` (a dev dependency, pinned
exactly) is imported inside the functions only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from spx.tools.dashboard.parts import CLUSTER, all_values, label_variable
from spx.tools.dashboard.rows import ROWS

UID = "spx-sharded-projection"
TITLE = "spx — sharded projection experiments"
DESCRIPTION = (
    "When splitting DeepSeek-V4.1's fused_wqa_wkv projection by token across TP ranks "
    "(+ all-gather) beats replicating it, per GPU type and vLLM version. docs/dashboard.md "
    "explains every panel."
)


def variables() -> list[Any]:
    """The dashboard's variables, in order: data source, cluster, operator job, namespace, experiment, GPU."""
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.models import dashboard as model

    return [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        all_values(label_variable("cluster", "Cluster", "label_values(spx_experiments, cluster)"))
        .current(model.VariableOption(selected=True, text="All", value="$__all")),
        label_variable("job", "Operator job", f"label_values(spx_experiments{{{CLUSTER}}}, job)")
        .include_all(True).all_value(".*"),
        label_variable("namespace", "Namespace",
                       f"label_values(spx_experiment_phase_since_timestamp_seconds{{{CLUSTER}}}, namespace)"),
        label_variable("experiment", "Experiment",
                       f'label_values(spx_experiment_phase_since_timestamp_seconds{{{CLUSTER}, namespace="$namespace"}}, experiment)'),
        all_values(label_variable("gpu", "GPU", f"label_values(spx_crossover_tokens{{{CLUSTER}}}, gpu)")),
    ]


def build_dashboard() -> dict[str, Any]:
    """The dashboard as a JSON-compatible dict: Grafana's dashboard schema of the pinned SDK build
    (grafana-foundation-sdk for Grafana 11.6, ``schemaVersion`` 41); panel ids numbered from 1."""
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    builder = (
        dash.Dashboard(TITLE).uid(UID).description(DESCRIPTION).tags(["spx", "vllm", "gpu", "benchmark"])
        .editable().refresh("1m").time("now-7d", "now").timezone("utc")
    )
    for variable in variables():
        builder = builder.with_variable(variable)
    for row in ROWS:
        title, panels = row()
        builder = builder.with_row(dash.Row(title))
        for panel in panels:
            builder = builder.with_panel(panel)
    result: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True, indent=2).encode(builder.build()))
    for number, panel_json in enumerate(result["panels"], start=1):  # Grafana wants unique panel ids
        panel_json["id"] = number
    return result


def dashboard_json() -> str:
    """The committed text of ``charts/spx-operator/dashboards/spx.json``: sorted keys, 2-space indent."""
    return json.dumps(build_dashboard(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, PromQL expression)`` of every query target of every panel, rows included."""
    out: list[tuple[str, str]] = []

    def visit(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            out.extend((panel.get("title", ""), t["expr"]) for t in panel.get("targets") or [] if t.get("expr"))
            visit(panel.get("panels") or [])

    visit(dashboard.get("panels") or [])
    return out


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(variable name, query)`` of every query variable (Grafana ``label_values(...)`` syntax)."""
    return [(v["name"], v["query"]) for v in (dashboard.get("templating") or {}).get("list") or []
            if v.get("type") == "query"]


def main(argv: list[str] | None = None) -> int:
    """``python -m spx.tools.dashboard [--write PATH | --check PATH]``: print, write or check the JSON."""
    parser = argparse.ArgumentParser(prog="python -m spx.tools.dashboard", description=__doc__.split("\n\n")[0])
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
            print(f"{args.check} is out of date; run: python -m spx.tools.dashboard --write {args.check}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0
