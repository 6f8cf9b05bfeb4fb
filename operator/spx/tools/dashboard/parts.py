"""Small builders every row of the dashboard uses: the data source, queries, panels, transforms,
thresholds, label variables and the verdict colours (grafana-foundation-sdk builders, Grafana 11.6).

``grafana_foundation_sdk`` is a dev dependency (pinned exactly); it is imported inside the functions,
so importing this module needs nothing beyond the standard library.
"""

from __future__ import annotations

from typing import Any

#: The Prometheus cluster label (an external label of a multi-cluster Prometheus, Thanos or Mimir);
#: "All" (".*") also matches series without one, so a single-cluster Prometheus needs nothing.
CLUSTER = 'cluster=~"$cluster"'
#: Label filters of the per-experiment panels (Grafana variables, single-valued).
EXP = f'{CLUSTER}, namespace="$namespace", experiment="$experiment"'
#: Label filter of the history panels (multi-valued GPU variable).
GPU = f'{CLUSTER}, gpu=~"$gpu"'
#: The verdicts and their colours, in the order the value mappings index them.
VERDICT_COLORS: tuple[tuple[str, str], ...] = (("Pass", "green"), ("Fail", "red"), ("Inconclusive", "orange"))


def datasource() -> Any:
    """The dashboard's Prometheus data source (the ``datasource`` variable)."""
    from grafana_foundation_sdk.models import dashboard as model

    return model.DataSourceRef(type_val="prometheus", uid="${datasource}")


def query(expr: str, legend: str = "__auto", ref: str = "A", *, instant: bool = False, fmt: str | None = None) -> Any:
    """A Prometheus query target: PromQL ``expr``, legend template, ref id; range unless ``instant``;
    ``fmt`` a ``PromQueryFormat`` value (``table``, ``heatmap``) or the default time series."""
    from grafana_foundation_sdk.builders.prometheus import Dataquery

    q = Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(datasource())
    q = q.instant() if instant else q.range()
    if fmt is not None:
        from grafana_foundation_sdk.models.prometheus import PromQueryFormat

        q = q.format(PromQueryFormat(fmt))
    return q


def panel(builder: Any, title: str, *, height: int, span: int) -> Any:
    """``builder`` (a panel builder: ``stat.Panel()`` …) titled, on the Prometheus data source,
    ``height`` grid rows high and ``span`` of Grafana's 24 grid columns wide."""
    return builder.title(title).datasource(datasource()).height(height).span(span)


def transform(id_val: str, options: dict[str, Any]) -> Any:
    """One Grafana data transformation (``organize``, ``sortBy`` …) with its options."""
    from grafana_foundation_sdk.models import dashboard as model

    return model.DataTransformerConfig(id_val=id_val, options=options)


def thresholds(*steps: tuple[float | None, str]) -> Any:
    """Absolute thresholds: ``(value, colour)`` steps, the first with value ``None`` (the base)."""
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.models import dashboard as model

    return (
        dash.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=v, color=c) for v, c in steps])
    )


def log2_scale() -> Any:
    """A log₂ axis (the token counts and latencies span four decades)."""
    from grafana_foundation_sdk.builders import common as common_b
    from grafana_foundation_sdk.models import common

    return common_b.ScaleDistributionConfig().type(common.ScaleDistribution.LOG).log(2)


def tokens_in_order() -> list[Any]:
    """Bar charts need a string x field: sort the token counts numerically first, then make them labels."""
    return [
        transform("convertFieldType", {"conversions": [{"targetField": "tokens", "destinationType": "number"}]}),
        transform("sortBy", {"sort": [{"field": "tokens"}]}),
        transform("convertFieldType", {"conversions": [{"targetField": "tokens", "destinationType": "string"}]}),
    ]


def verdict_value_map() -> list[Any]:
    """Value mappings of the verdict stat: each verdict its text and colour (:data:`VERDICT_COLORS`)."""
    from grafana_foundation_sdk.models import dashboard as model

    return [model.ValueMap(options={
        verdict: model.ValueMappingResult(text=verdict, color=color, index=i)
        for i, (verdict, color) in enumerate(VERDICT_COLORS)
    })]


def verdict_mapping_options() -> dict[str, dict[str, Any]]:
    """The same mapping as plain JSON (a table column override)."""
    return {verdict: {"text": verdict, "color": color, "index": i} for i, (verdict, color) in enumerate(VERDICT_COLORS)}


def fixed_color(color: str) -> list[Any]:
    """An override setting a series to one fixed colour."""
    from grafana_foundation_sdk.models import dashboard as model

    return [model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})]


def label_variable(name: str, label: str, query_text: str) -> Any:
    """A dashboard variable listing a label's values, refreshed with the time range, sorted."""
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.models import dashboard as model

    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(datasource())
        .query(query_text)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )


def all_values(variable: Any) -> Any:
    """``variable`` made multi-valued with an "All" option that also matches series without the label."""
    return variable.multi(True).include_all(True).all_value(".*")
