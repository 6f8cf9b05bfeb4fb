"""spx.analysis.judge: one judgement for spx run, spx report and the operator — a matrix of factors.

Factors: how much of the sweep ran (complete / partial with a bracketed crossover / partial from one
point / no points), whether the run reported an error, the kernel gate's outcome, and the serving and
accuracy sections (absent, passed, failed, undecided, expected but missing).
"""

from __future__ import annotations

import pytest

from spx.analysis import judge, local_status
from spx.api.accuracy import AccuracyStatus
from spx.api.result import KernelResult, PointResult, ResultSummary
from spx.api.serving import ServingStatus
from spx.api.spec import ExperimentSpec
from spx.api.status import KernelPoint
from spx_testing.factories import point_result

SPEC = ExperimentSpec.model_validate({"sweep": {"tokens": [256, 1024, 2048, 4096]}})
SERVING_SPEC = ExperimentSpec.model_validate({
    "sweep": {"tokens": [256, 1024, 2048, 4096]},
    "serving": {"model": "deepseek-ai/DeepSeek-V4.1"}, "accuracy": {}, "timeoutSeconds": 9600,
})
LOSE = ([98, 99, 100, 101, 102], [118, 119, 120, 121, 122])  # split 1.2× slower, decided
WIN = ([148, 149, 150, 151, 152], [98, 99, 100, 101, 102])  # split 1.5× faster, decided


def point(tokens: int, times: tuple[list[int], list[int]], err: float = 0.002) -> PointResult:
    return point_result(tokens, *times, max_abs_error=err)


def result(points: list[PointResult], complete: bool = True, error: str | None = None) -> KernelResult:
    return KernelResult(spec=SPEC, world_size=8, gemm_backend="torch-fp8", gather_backend="nccl",
                        gather_source="measured", timer="cupti", device="cuda", cuda_graphs=True,
                        points=points, complete=complete, error=error)


FULL = [point(256, LOSE), point(1024, LOSE), point(2048, WIN), point(4096, WIN)]
BRACKET = FULL[:3]  # stopped after 2048: the crossover is between 1024 and 2048
ONE_WIN = [point(2048, WIN)]  # one point, the split wins: nothing to bracket


@pytest.mark.parametrize(
    ("points", "complete", "error", "verdict", "reason", "threshold", "confidence"),
    [
        # complete runs: the kernel gate decides
        # 1024 and 2048 bracket the break-even only to about ±30 %: never "resolved" across that gap
        (FULL, True, None, "Pass", "Pass", 2048, "unbracketed"),
        ([*FULL[:3], point(4096, LOSE)], True, None, "Fail", "Fail", None, "none"),  # loses again at 4096
        ([point(256, LOSE), point(1024, LOSE, err=1.0), point(2048, WIN), point(4096, WIN)], True, None, "Fail",
         "Fail", 2048, "unbracketed"),
        # partial: no verdict ever; a threshold only when two measured points bracket the crossover
        (BRACKET, False, "interrupted (SIGINT)", None, "BenchmarkFailed", 2048, "unbracketed"),
        (ONE_WIN, False, "interrupted (SIGINT)", None, "BenchmarkFailed", None, "none"),
        (FULL[2:], False, "rank 3 failed", None, "BenchmarkFailed", None, "none"),
        (FULL, True, "rank 0 finished late", None, "BenchmarkFailed", 2048, "unbracketed"),  # an error is partial
        ([], False, "rank 1 failed: OOM", None, "BenchmarkFailed", None, None),
        ([], True, None, None, "BenchmarkFailed", None, None),
    ],
)
def test_kernel_matrix(points: list[PointResult], complete: bool, error: str | None, verdict: str | None,
                       reason: str, threshold: int | None, confidence: str | None) -> None:
    j = judge(result(points, complete, error), SPEC)
    assert (j.verdict, j.reason) == (verdict, reason)
    if confidence is None:
        assert j.kernel is None
    else:
        assert j.kernel is not None
        assert (j.kernel.recommended_threshold_tokens, j.kernel.crossover_confidence) == (threshold, confidence)
    if not complete or error:
        assert j.partial and "partial run" in j.reasons[0] or not points
        assert f"{len(points)} of 4 token counts" in j.reasons[0] or not points
        if error:
            assert error in j.message


def test_a_partial_run_names_no_deciding_measurement() -> None:
    j = judge(result(BRACKET, complete=False), SPEC)
    assert j.verdict is None and j.kernel is not None and j.kernel.decided_by is None


def test_partial_from_one_point_withdraws_the_threshold_and_says_what_the_point_shows() -> None:
    j = judge(result(ONE_WIN, False, "interrupted (SIGINT)"), SPEC)
    assert j.kernel is not None and j.kernel.crossover_tokens is None
    assert any("no threshold" in r for r in j.reasons)
    assert j.measured_verdict == "Pass"  # what the one point shows, never published as the verdict
    assert j.verdict is None
    assert "would be judged" in j.reasons[-1]


def test_unusable_result_is_benchmark_failed_not_an_exception() -> None:
    dup = result([point(2048, WIN), point(2048, WIN)])
    j = judge(dup, SPEC)
    assert (j.verdict, j.reason) == (None, "BenchmarkFailed") and "cannot be analysed" in j.reasons[0]
    assert judge(None, SPEC).reasons == ["the run left no result"]


def test_a_summary_is_judged_like_the_result_it_summarises() -> None:
    full = result(FULL)
    from spx.analysis import points_from_result

    summary = ResultSummary(points=points_from_result(full), world_size=8, gemm_backend="torch-fp8",
                            gather_source="measured", timer="cupti")
    a, b = judge(full, SPEC), judge(summary, SPEC)
    assert (a.verdict, a.kernel, a.reasons) == (b.verdict, b.kernel, b.reasons)


def test_cpu_timings_cap_the_speed_verdict() -> None:
    cpu = result(FULL).model_copy(update={"device": "cpu"})
    assert judge(cpu, SPEC).verdict == "Inconclusive"


SERVE_OK = ServingStatus(complete=True, gate_passed=True)
SERVE_BAD = ServingStatus(complete=True, gate_passed=False, reasons=["p: ttft +5%"])
ACC_OK = AccuracyStatus(main_pct=95.0, split_pct=95.0, drop_points=0.0, max_drop_points=1.0, gate_passed=True,
                        reasons=["GSM8K: drop 0.0 points"])


@pytest.mark.parametrize(
    ("serving", "accuracy", "require", "verdict", "decided_by"),
    [
        (None, None, False, "Pass", "kernel"),  # kernel only
        (SERVE_OK, ACC_OK, True, "Pass", "kernel"),
        (SERVE_BAD, ACC_OK, True, "Fail", "serving"),
        (SERVE_OK, AccuracyStatus(reasons=["GSM8K: no result"]), True, "Inconclusive", "accuracy"),
        (None, None, True, "Inconclusive", "serving"),  # expected and missing: never a silent pass
        (SERVE_OK, None, True, "Inconclusive", "accuracy"),
    ],
)
def test_vllm_gates(serving: ServingStatus | None, accuracy: AccuracyStatus | None, require: bool,
                    verdict: str, decided_by: str) -> None:
    j = judge(result(FULL), SERVING_SPEC, serving=serving, accuracy=accuracy, require_vllm=require)
    assert j.verdict == verdict and j.reason == verdict
    assert j.kernel is not None and j.kernel.decided_by == decided_by
    if require:
        assert j.serving is not None and j.accuracy is not None


def test_local_status_vocabulary() -> None:
    ok = local_status(judge(result(FULL), SPEC), now="2026-01-01T00:00:00Z", completed_summary="4 token counts")
    cond = {c.type: c for c in ok.conditions}
    assert (ok.phase, ok.verdict, cond["Completed"].reason, cond["Decided"].reason) == (
        "Succeeded", "Pass", "BenchmarkCompleted", "Pass")
    bad = local_status(judge(result(ONE_WIN, False, "interrupted (SIGINT)"), SPEC), now="2026-01-01T00:00:00Z")
    cond = {c.type: c for c in bad.conditions}
    assert (bad.phase, bad.verdict, cond["Completed"].status, cond["Decided"].reason) == (
        "Failed", None, "False", "BenchmarkFailed")
    assert bad.kernel is not None and bad.kernel.recommended_threshold_tokens is None
    assert "partial run" in (bad.message or "")


def test_points_are_kernel_points() -> None:
    j = judge(result(FULL), SPEC)
    assert j.kernel is not None and all(isinstance(p, KernelPoint) for p in j.kernel.points)


def test_partial_adaptive_run_counts_listed_and_added_points() -> None:
    spec = ExperimentSpec.model_validate({"sweep": {"tokens": [256, 1024, 2048, 4096],
                                                    "refine": {"maxAddedPoints": 3}}})
    j = judge(result(BRACKET, False, "interrupted (SIGINT)"), spec)
    assert "3 of 4 listed + up to 3 adaptive token counts measured" in j.reasons[0]


def test_a_pass_above_the_deployments_largest_batch_is_refused() -> None:
    """The split wins from 2048 on; a gate at 4096 passes, but with --max-num-batched-tokens 2048 no batch
    reaches 4096: the split never engages, and the vacuous Pass is refused (vLLM's default 8192 would allow it)."""
    at_4096 = SPEC.model_copy(update={"gate": SPEC.gate.model_copy(update={"threshold_tokens": 4096})})
    assert judge(result(FULL), at_4096).verdict == "Pass"
    small = at_4096.model_copy(update={"gate": at_4096.gate.model_copy(update={"max_num_batched_tokens": 2048})})
    j = judge(result(FULL), small)
    assert j.verdict == "Fail" and j.kernel is not None and j.kernel.decided_by == "deployment"
    assert j.kernel.max_num_batched_tokens == 2048
    assert j.reasons[0].startswith("thresholdTokens 4096 is above the largest batch the deployment forms")


def _eager(p: PointResult, extra_host_us: float) -> PointResult:
    """``p`` timed eagerly, with host issue times: replicated 70–74 µs, split ``extra_host_us`` more per round."""
    host = [70.0, 71.0, 72.0, 73.0, 74.0]
    return p.model_copy(update={
        "execution": "eager",
        "replicated": p.replicated.model_copy(update={"host_samples_us": host}),
        "split": p.split.model_copy(update={"host_samples_us": [h + extra_host_us for h in host]}),
    })


def test_a_step_measurement_decides_when_the_regimes_disagree() -> None:
    """GPU-bound the split wins from 2048 on (Pass); host-bound it issues 30 µs later everywhere (Fail): without
    a step A/B the verdict is Inconclusive and names it; with one, its effect at the gate threshold decides."""
    from spx.api.step import StepExpectation, StepStatus

    eager = result([_eager(p, 30.0) for p in FULL])
    j = judge(eager, SPEC)
    assert j.kernel is not None and [r.speed_verdict for r in j.kernel.regimes] == ["Pass", "Fail"]
    assert (j.verdict, j.kernel.decided_by) == ("Inconclusive", "none")
    assert j.kernel.next_step is not None and "spec.serving.step" in j.kernel.next_step
    p2048 = next(p for p in j.kernel.points if p.tokens == 2048)
    assert p2048.host_delta_us == 30.0 and p2048.gpu_delta_us == -50.0

    def step(low: float, high: float) -> StepStatus:
        mid = (low + high) / 2
        exp = StepExpectation(threshold_tokens=2048, arm="split", pad_path_share=0.875, effect_ms=mid, effect_low_ms=low,
                              effect_high_ms=high, per_layer_us=mid * 25, per_layer_low_us=low * 25,
                              per_layer_high_us=high * 25)
        return StepStatus(expectations=[exp], usable=True, complete=True, rounds=40, recommended_threshold_tokens=None)

    loss = step(0.4, 1.6)
    j = judge(eager, SPEC, step=loss)
    assert (j.verdict, j.kernel.decided_by if j.kernel else None) == ("Fail", "step")
    assert local_status(j, now="2026-01-01T00:00:00Z").step == loss  # status.json carries what decided
    assert j.reasons[0].startswith("decided by the step A/B: the split lengthens the step")

