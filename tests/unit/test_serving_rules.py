"""The serving A/B as a user meets it (issue #28, requirement 7), table-tested on spx.analysis.serving:
no verdict without a noise estimate, CPU results decide nothing unless allowed, controls are not gated,
thresholds are never pooled, the sampling is recorded, and the benches' own verdict."""

from __future__ import annotations

import pytest

from spx.analysis.benches import benches_verdict
from spx.analysis.serving import (
    flag_int,
    max_batch_tokens,
    sampling_of,
    summarize,
    summarize_point,
)
from spx.api.accuracy import AccuracyStatus
from spx.api.serving import (
    ServingArmRun,
    ServingArmValue,
    ServingGateSpec,
    ServingPointRun,
    ServingPointSpec,
    ServingResult,
    ServingSpec,
    ServingStatus,
    seed_points,
)
from spx.api.step import StepStatus

THR = ServingPointSpec(name="p", input_len=8192, output_len=1024, concurrency=16, num_prompts=64,
                       metric="output_throughput")


def _result(values: dict[str, tuple[str, float | None]], *, device: str = "cuda", points: list[ServingPointSpec] | None = None,
            extra_args: list[str] | None = None) -> ServingResult:
    """Arms name → (threshold or off, value at every point)."""
    spec = ServingSpec(model="m", points=points or [THR], extra_args=extra_args or [])
    arms = [ServingArmRun(name=name, variant="main" if t == "off" else "split", threshold=t, state="Succeeded",
                          points=[ServingPointRun(point=p.name, metric=p.metric, value=v) for p in spec.points])
            for name, (t, v) in values.items()]
    return ServingResult(serving=spec, gate_threshold_tokens=2048, arms=arms, complete=True, device=device)


# the three runs of a two-arm A/B of identical code: −7.9 %, +26.7 %, −20.8 %: never Pass or Fail
@pytest.mark.parametrize("split", [92.1, 126.7, 79.2])
def test_one_server_per_variant_is_inconclusive_never_pass_or_fail(split: float) -> None:
    status = summarize(_result({"B1": ("2048", split), "A1": ("off", 100.0)}))
    assert status.gate_passed is None
    assert status.points[0].within_kind_pct is None and status.points[0].passed is None
    assert "no noise estimate" in status.reasons[0] and "spec.serving.step" in status.reasons[0]


@pytest.mark.parametrize(("device", "allow", "expected"), [
    ("cpu", False, None),  # a CPU failure decides nothing
    ("cpu", True, False),  # unless gate.allowCpuTimings (pipeline tests)
    ("cuda", False, False),
])
def test_cpu_serving_results_decide_nothing_unless_allowed(device: str, allow: bool, expected: bool | None) -> None:
    failing = {"B1": ("2048", 80.0), "A1": ("off", 100.0), "A2": ("off", 100.5), "B2": ("2048", 80.5)}
    status = summarize(_result(failing, device=device), allow_cpu_timings=allow)
    assert status.gate_passed is expected and status.cpu_timings is (device == "cpu")
    if expected is None:
        assert status.reasons[0].startswith("CPU servers")


@pytest.mark.parametrize(("point", "extra", "max_batch", "control"), [
    (ServingPointSpec(name="c1", input_len=1024, output_len=1024, concurrency=1, num_prompts=8,
                      metric="output_throughput"), [], 1024, True),  # the seed's 1K C1: never ≥ 2048 tokens
    (ServingPointSpec(name="c64", input_len=1024, output_len=1024, concurrency=64, num_prompts=256,
                      metric="output_throughput"), [], 65536, False),
    (THR, ["--max-num-batched-tokens", "1024"], 1024, True),  # the chunk budget caps every batch
    (THR, ["--max-num-batched-tokens=8192"], 8192, False),
    (ServingPointSpec(name="ttft", input_len=8192, output_len=1, concurrency=1, num_prompts=8, metric="ttft"),
     [], 8192, False),
])
def test_points_where_the_split_cannot_engage_are_controls_not_gated(
    point: ServingPointSpec, extra: list[str], max_batch: int, control: bool
) -> None:
    assert max_batch_tokens(point, extra) == max_batch
    worse = {"B1": ("2048", 80.0), "A1": ("off", 100.0), "A2": ("off", 100.5), "B2": ("2048", 80.5)}
    if point.metric == "ttft":
        worse = {"B1": ("2048", 120.0), "A1": ("off", 100.0), "A2": ("off", 100.5), "B2": ("2048", 120.5)}
    status = summarize(_result(worse, points=[point], extra_args=extra))
    (p,) = status.points
    assert p.control is control and p.max_batch_tokens == max_batch
    if control:
        assert p.passed is None and status.gate_passed is None
        assert "control, not gated" in status.reasons[0]
    else:
        assert p.passed is False and status.gate_passed is False


def test_arms_with_different_thresholds_are_never_pooled() -> None:
    arms = {"B1": ("2048", 110.0), "A1": ("off", 100.0), "A2": ("off", 100.2), "B2": ("4096", 90.0),
            "B3": ("2048", 110.3), "B4": ("4096", 90.1)}
    status = summarize(_result(arms))
    assert [(p.threshold_tokens, round(p.split_mean or 0, 2)) for p in status.points] == [(2048, 110.15), (4096, 90.05)]
    assert [p.passed for p in status.points] == [True, False] and status.gate_passed is False
    assert any(r.startswith("p (split at T=4096)") and r.endswith("FAIL") for r in status.reasons)
    # pooled, the two would have read about 100 (≈ +0 %), hiding both effects
    assert all(abs(p.change_pct or 0) > 5 for p in status.points)


@pytest.mark.parametrize(("extra", "expected"), [
    ([], {"temperature": "server default (none sent: the model's generation_config)"}),
    (["--temperature", "0"], {"temperature": "0"}),
    (["--temperature=0.6", "--top-p", "0.95", "--request-rate", "4"], {"temperature": "0.6", "top-p": "0.95"}),
])
def test_the_sampling_is_recorded(extra: list[str], expected: dict[str, str]) -> None:
    assert sampling_of(extra) == expected
    status = summarize(_result({"B1": ("2048", 1.0), "A1": ("off", 1.0)}, points=[THR]).model_copy(
        update={"serving": ServingSpec(model="m", points=[THR], extra_bench_args=extra)}))
    assert status.points[0].sampling == expected


@pytest.mark.parametrize(("args", "expected"), [
    (["--max-num-batched-tokens", "4096"], 4096), (["--max-num-batched-tokens=8_192"], 8192),
    (["--max-num-batched-tokens", "1", "--max-num-batched-tokens", "2"], 2), (["--x", "1"], None),
    (["--max-num-batched-tokens", "lots"], None),
])
def test_flag_int(args: list[str], expected: int | None) -> None:
    assert flag_int(args, "--max-num-batched-tokens") == expected


def _serving(passed: bool | None) -> ServingStatus:
    return ServingStatus(gate_passed=passed, reasons=["p: output_throughput change +3.00% split vs main: ok"])


def _accuracy(passed: bool | None) -> AccuracyStatus:
    return AccuracyStatus(gate_passed=passed, reasons=["GSM8K: drop 0.1 points"])


@pytest.mark.parametrize(("serving", "accuracy", "verdict"), [
    (True, True, "Pass"), (True, None, "Inconclusive"), (False, True, "Fail"), (None, False, "Fail"),
    (True, "absent", "Pass"), ("absent", "absent", "Inconclusive"),
])
def test_benches_verdict(serving: bool | None | str, accuracy: bool | None | str, verdict: str) -> None:
    s = None if serving == "absent" else _serving(serving)  # type: ignore[arg-type]
    a = None if accuracy == "absent" else _accuracy(accuracy)  # type: ignore[arg-type]
    got, reasons = benches_verdict(s, a, StepStatus(reasons=["the split at T=2048 …"]))
    assert got == verdict and reasons
    assert reasons[-1].startswith("step A/B: ")


def test_the_seed_tables_1k_c1_row_is_a_control_at_2048() -> None:
    (c1,) = [p for p in seed_points() if p.name == "1k_in_1k_out_c1"]
    values = [ServingArmValue(arm="B1", variant="split", value=338.0), ServingArmValue(arm="A1", variant="main", value=337.0),
              ServingArmValue(arm="A2", variant="main", value=336.2), ServingArmValue(arm="B2", variant="split", value=334.1)]
    p = summarize_point(c1.name, c1.metric, values, ServingGateSpec(), threshold_tokens=2048,
                        max_batch=max_batch_tokens(c1, []))
    assert p.control and p.passed is None
