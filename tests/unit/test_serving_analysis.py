"""Serving A/B arithmetic (spx.analysis.serving) on the seed's H20 table, and the spec's rules."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from pydantic import ValidationError

from spx.analysis.serving import (
    arm_threshold,
    change_pct,
    gate_point,
    gate_reasons,
    metric_value,
    summarize,
    summarize_point,
    summary_fields,
)
from spx.api.serving import (
    ServingArmRun,
    ServingArmSpec,
    ServingArmValue,
    ServingGateSpec,
    ServingPointRun,
    ServingResult,
    ServingSpec,
    default_arms,
    seed_points,
)
from spx.api.spec import ExperimentSpec

CSV = Path(__file__).resolve().parents[1] / "data" / "h20_tp8_serving.csv"
#: The table's arm columns in the seed's run order (B1 A1 A2 B2).
COLUMNS = [("B1", "split", "split_b1"), ("A1", "main", "main_a1"), ("A2", "main", "main_a2"), ("B2", "split", "split_b2")]


def _rows() -> list[dict[str, str]]:
    with open(CSV, newline="") as f:
        return list(csv.DictReader(f))


def _values(row: dict[str, str]) -> list[ServingArmValue]:
    return [ServingArmValue(arm=a, variant=v, value=float(row[c])) for a, v, c in COLUMNS]  # type: ignore[arg-type]


def test_default_arm_order_is_the_seeds() -> None:
    arms = default_arms()
    assert [a.name for a in arms] == ["B1", "A1", "A2", "B2"]  # arms run in the listed order
    assert [a.variant for a in arms] == ["split", "main", "main", "split"]
    assert [a for a, _, _ in COLUMNS] == [a.name for a in arms]


def test_arm_thresholds() -> None:
    assert arm_threshold(ServingArmSpec(name="A1", variant="main"), 2048) == "off"
    assert arm_threshold(ServingArmSpec(name="B1", variant="split"), 2048) == "2048"
    assert arm_threshold(ServingArmSpec(name="B1", variant="split", threshold_tokens=1024), 2048) == "1024"


def test_reproduces_the_change_column_of_the_h20_table() -> None:
    rows = _rows()
    assert len(rows) == 7
    for row in rows:
        point = summarize_point(row["point"], row["metric"], _values(row))  # type: ignore[arg-type]
        published = float(row["change_pct"])
        assert point.change_pct is not None
        # README: recomputed from the rounded arm values it agrees within 0.1 percentage point
        assert point.change_pct == pytest.approx(published, abs=0.1), row["point"]
        if row["point"] == "1k_in_1k_out_c1":
            assert round(point.change_pct, 2) == 0.25  # the published 0.2 came from unrounded values
        assert point.unit == row["unit"]


def test_means_and_change_by_hand() -> None:
    row = _rows()[0]  # ttft_8k_c1: main 1117.8, 1117.8; split 1066.5, 1075.2
    point = summarize_point(row["point"], "ttft", _values(row))
    assert point.main_mean == pytest.approx(1117.8)
    assert point.split_mean == pytest.approx((1066.5 + 1075.2) / 2)
    assert point.change_pct == pytest.approx(((1066.5 + 1075.2) / 2 - 1117.8) / 1117.8 * 100)
    assert point.improvement_pct == pytest.approx(-point.change_pct)  # lower TTFT is better
    thr = summarize_point("t", "output_throughput", _values(_rows()[3]))
    assert thr.improvement_pct == pytest.approx(thr.change_pct)
    assert change_pct(100.0, 103.0) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        change_pct(0.0, 1.0)


def test_failed_arm_is_left_out_of_the_mean() -> None:
    values = [
        ServingArmValue(arm="B1", variant="split", value=110.0),
        ServingArmValue(arm="A1", variant="main", value=None),
        ServingArmValue(arm="A2", variant="main", value=100.0),
        ServingArmValue(arm="B2", variant="split", value=None),
    ]
    point = summarize_point("p", "output_throughput", values, ServingGateSpec())
    assert point.main_mean == 100.0 and point.split_mean == 110.0
    # one value per variant left: no noise estimate, so the point is not gated (issue #28 requirement 7)
    assert point.change_pct == pytest.approx(10.0) and point.within_kind_pct is None and point.passed is None
    none_main = [v.model_copy(update={"value": None}) if v.variant == "main" else v for v in values]
    missing = summarize_point("p", "output_throughput", none_main, ServingGateSpec())
    assert missing.change_pct is None and missing.passed is None


def test_gate_on_the_h20_table() -> None:
    points = [summarize_point(r["point"], r["metric"], _values(r)) for r in _rows()]  # type: ignore[arg-type]
    passed, reasons = gate_reasons(points, ServingGateSpec())
    # noise before verdict: 1k_in_1k_out_c1's B1/B2 spread (1.16 %) exceeds its +0.25 % change
    assert passed is None and len(reasons) == 7
    assert [r.split(":")[0] for r in reasons if "inconclusive" in r] == ["1k_in_1k_out_c1"]
    strict = ServingGateSpec(min_throughput_change_pct=1.0, max_ttft_regression_pct=-4.5)
    passed, reasons = gate_reasons(points, strict)
    assert passed is False  # a point clear of the noise failed: Fail wins over an undecided point
    failing = [r.split(":")[0] for r in reasons if r.endswith("FAIL")]
    assert failing == ["ttft_8k_c1", "ttft_128k_c1"]


def test_gate_point_rules() -> None:
    g = ServingGateSpec(min_throughput_change_pct=0.0, max_ttft_regression_pct=2.0)
    assert gate_point("output_throughput", 0.0, g) is True
    assert gate_point("output_throughput", -0.1, g) is False
    assert gate_point("ttft", 2.0, g) is True
    assert gate_point("ttft", 2.1, g) is False
    assert gate_point("tpot", 50.0, g) is None  # reported, not gated
    assert gate_point("ttft", None, g) is None
    tpot_only = [summarize_point("t", "tpot", [ServingArmValue(arm="A", variant="main", value=1.0),
                                               ServingArmValue(arm="B", variant="split", value=1.0)])]
    assert gate_reasons(tpot_only, g)[0] is None


def test_metric_value_and_summary_fields() -> None:
    saved = {"mean_ttft_ms": 1117.8, "output_throughput": 601.1, "completed": 64, "failed": 0,
             "p99_ttft_ms": 1200.0, "ttfts": [1.0, 2.0], "date": "20261129", "flag": True}
    assert metric_value(saved, "ttft") == 1117.8
    assert metric_value(saved, "output_throughput") == 601.1
    with pytest.raises(ValueError, match="mean_tpot_ms"):
        metric_value(saved, "tpot")
    with pytest.raises(ValueError):
        metric_value({"output_throughput": True}, "output_throughput")
    with pytest.raises(ValueError, match="not finite"):
        metric_value({"output_throughput": float("nan")}, "output_throughput")
    fields = summary_fields(saved)
    assert fields == {"mean_ttft_ms": 1117.8, "output_throughput": 601.1, "completed": 64.0, "failed": 0.0,
                      "p99_ttft_ms": 1200.0}


def test_summarize_a_partial_result() -> None:
    serving = ServingSpec(model="m", points=seed_points()[:2])
    arms = []
    for arm, value in (("B1", 95.0), ("A1", None), ("A2", 100.0), ("B2", 96.0)):
        variant = "split" if arm.startswith("B") else "main"
        runs = [ServingPointRun(point=p.name, metric=p.metric, value=value, error=None if value else "server died")
                for p in serving.points]
        arms.append(ServingArmRun(name=arm, variant=variant, threshold="2048" if variant == "split" else "off",  # type: ignore[arg-type]
                                  state="Succeeded" if value else "Failed", points=runs,
                                  error=None if value else "server died"))
    result = ServingResult(serving=serving, gate_threshold_tokens=2048, arms=arms, complete=False,
                           failures=["A1: arm failed: server died"])
    status = summarize(result)
    assert [p.name for p in status.points] == ["ttft_8k_c1", "ttft_32k_c1"]
    assert status.points[0].change_pct == pytest.approx((95.5 - 100.0) / 100.0 * 100)
    assert status.gate_passed is None  # A1 failed: one main server, no noise estimate
    assert any("no noise estimate" in r for r in status.reasons)
    assert status.arms[1].state == "Failed" and status.arms[1].message == "server died"
    assert status.complete is False and status.failures == ["A1: arm failed: server died"]
    assert any("failure" in r for r in status.reasons)


# --------------------------------------------------------------------------- spec rules


def test_seed_points_and_defaults() -> None:
    spec = ServingSpec(model="deepseek-ai/DeepSeek-V4.1")
    assert [p.name for p in spec.points] == [r["point"] for r in _rows()]
    assert [p.metric for p in spec.points] == [r["metric"] for r in _rows()]
    assert spec.api_model_name == "deepseek-ai/DeepSeek-V4.1"
    assert ServingSpec(model="x", served_model_name="y").api_model_name == "y"


@pytest.mark.parametrize(
    ("serving", "message"),
    [
        ({"arms": [{"name": "A1", "variant": "main"}, {"name": "A2", "variant": "main"}]}, "at least one main and one split"),
        ({"arms": [{"name": "A1", "variant": "main", "thresholdTokens": 4096}, {"name": "B1", "variant": "split"}]}, "main arm"),
        ({"arms": [{"name": "A1", "variant": "main"}, {"name": "A1", "variant": "split"}]}, "unique"),
        ({"points": [{"name": "p", "inputLen": 1, "outputLen": 1, "concurrency": 1, "numPrompts": 1, "metric": "ttft"}] * 2}, "unique"),
        ({"modelPvc": "weights"}, "modelPath"),
        ({"modelPvc": "weights", "modelPath": "/data/ds"}, "modelPath"),
        ({"env": {"SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS": "1"}}, "set per arm"),
        ({"points": [{"name": "p", "inputLen": 1, "outputLen": 1, "concurrency": 1, "numPrompts": 1, "metric": "ttft_ms"}]}, "metric"),
        ({"unknownField": 1}, "unknownField"),
    ],
)
def test_invalid_serving_specs(serving: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ExperimentSpec.model_validate({"serving": {"model": "m", **serving}})


def test_spec_round_trip_camel_case() -> None:
    spec = ExperimentSpec.model_validate({
        "serving": {"model": "m", "modelPvc": "weights", "modelPath": "/models/ds", "extraArgs": ["--max-model-len", "8192"],
                    "gate": {"minThroughputChangePct": 0.5}},
        "accuracy": {"maxDropPoints": 0.5, "chatTemplateKwargs": {"thinking": False}},
        "timeoutSeconds": 14400,
    })
    assert spec.serving is not None and spec.serving.gate.min_throughput_change_pct == 0.5
    assert spec.accuracy is not None and spec.accuracy.max_drop_points == 0.5
    wire = spec.to_wire()
    assert wire["serving"]["modelPvc"] == "weights"  # type: ignore[index]
    assert ExperimentSpec.model_validate(wire) == spec
    assert ExperimentSpec().serving is None and ExperimentSpec().accuracy is None
