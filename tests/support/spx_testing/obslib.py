"""Helpers of the observability tests: the operator's metric names, PromQL metric references."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "spx-operator"
RULES = CHART / "rules" / "spx-rules.yaml"
RULES_TEST = ROOT / "tests" / "observability" / "spx-rules.test.yaml"
DASHBOARD = CHART / "dashboards" / "spx.json"

#: Series Prometheus itself synthesises for every target; only the rules may use them.
SYNTHETIC = {"up"}

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "sum", "max", "min", "avg", "count", "rate", "increase", "irate", "time", "vector", "absent",
    "max_over_time", "min_over_time", "histogram_quantile", "le", "inf", "nan",
}  # fmt: skip


def registry_series_names() -> set[str]:
    """Every series name the operator's registry (spx.controller.metrics.REGISTRY) can expose."""
    from spx.controller.metrics import REGISTRY

    names: set[str] = set()
    for family in REGISTRY.collect():
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (identifiers outside label matchers and strings)."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'", '""', expr)  # string literals
    stripped = re.sub(r"\{[^}]*\}", "{}", stripped)  # label matchers
    stripped = re.sub(r"\[[^\]]*\]", "[]", stripped)  # ranges
    stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", stripped)
    found = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped):
        name = m.group(0)
        after = stripped[m.end() : m.end() + 1]
        if name.lower() in _KEYWORDS or after == "(":
            continue
        if re.fullmatch(r"[0-9a-fA-F]+|e\d*", name):
            continue
        found.add(name)
    return found


def label_values_selector(query: str) -> str:
    """The series selector of a Grafana ``label_values(SELECTOR, LABEL)`` variable query."""
    m = re.fullmatch(r"label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)", query.strip())
    assert m, f"not a label_values(selector, label) query: {query!r}"
    return m.group(1)


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"`{name}` is not installed (Debian package `prometheus`, installed by scripts/setup.sh)")
    return path
