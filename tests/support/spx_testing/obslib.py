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


#: A decided status as the issue found it: the kernel regimes disagree (GPU-bound Pass at a crossover of 234
#: tokens, host-bound Fail), the step A/B decided Fail with a host-bound effect (+47.5 µs per layer at 2048).
STEP_DECIDED: dict = {
    "phase": "Succeeded", "verdict": "Fail", "environment": {"gpu": "NVIDIA H200", "vllm": "0.33.0", "device": "cuda"},
    "kernel": {
        "crossoverTokens": 234.0, "recommendedThresholdTokens": 256, "decidedBy": "step", "regimesAgree": False,
        "regimes": [{"regime": "gpu-bound", "crossoverTokens": 234.0, "recommendedThresholdTokens": 256, "verdict": "Pass"},
                    {"regime": "host-bound", "crossoverTokens": 9434.2, "recommendedThresholdTokens": 16384,
                     "verdict": "Fail"}],
        "points": [{"tokens": 2048, "rowsPerRank": 256, "replicatedUs": 64.0, "splitUs": 44.2, "speedup": 1.45,
                    "execution": "eager", "gpuDeltaUs": -19.8, "gpuDeltaLowUs": -21.0, "gpuDeltaHighUs": -18.5,
                    "hostDeltaUs": 52.8, "hostDeltaLowUs": 49.0, "hostDeltaHighUs": 56.1}]},
}
#: The step A/B's one-server curve (spx.api.step.StepStatus v2, issue #34) of that status: added to
#: STEP_DECIDED only where this tree's StepStatus has the curve (the contract branch brings it).
STEP_CURVE_STATUS: dict = {
    "usable": True, "complete": True, "rounds": 120, "recommendedThresholdTokens": None, "breakEvenTokens": None,
        "points": [
            {"arm": "split", "length": 2048, "aligned": True, "rounds": 120, "effectMs": 1.9, "effectLowMs": 1.6,
             "effectHighMs": 2.2, "perLayerUs": 47.5, "perLayerLowUs": 40.0, "perLayerHighUs": 55.0,
             "kernelGpuUs": -19.8, "kernelHostUs": 52.8, "regime": "host-bound", "outcome": "loss"},
            {"arm": "split", "length": 2047, "aligned": False, "rounds": 120, "effectMs": 2.1, "effectLowMs": 1.7,
             "effectHighMs": 2.5, "perLayerUs": 52.5, "perLayerLowUs": 42.5, "perLayerHighUs": 62.5, "outcome": "loss"}],
        "aa": [{"arm": "aa", "length": 2048, "aligned": True, "rounds": 120, "effectMs": 0.01, "effectLowMs": -0.2,
                "effectHighMs": 0.2, "perLayerUs": 0.25, "perLayerLowUs": -5.0, "perLayerHighUs": 5.0}],
        "expectations": [{"thresholdTokens": 2048, "arm": "split", "padPathShare": 0.875, "effectMs": 2.05,
                          "effectLowMs": 1.7, "effectHighMs": 2.4, "perLayerUs": 51.25, "perLayerLowUs": 42.5,
                          "perLayerHighUs": 60.0, "outcome": "loss"}]}


def step_curve_contract() -> bool:
    """This tree's ``spx.api.step.StepStatus`` has the one-server curve (``points``, ``expectations``)."""
    from spx.api.step import StepStatus

    return {"points", "expectations"} <= set(StepStatus.model_fields)


if step_curve_contract():
    STEP_DECIDED["step"] = STEP_CURVE_STATUS
