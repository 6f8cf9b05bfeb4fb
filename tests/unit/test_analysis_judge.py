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
    ("serving", "accuracy", "require", "verdict"),
    [
        (None, None, False, "Pass"),  # kernel only
        (SERVE_OK, ACC_OK, True, "Pass"),
        (SERVE_BAD, ACC_OK, True, "Fail"),
        (SERVE_OK, AccuracyStatus(reasons=["GSM8K: no result"]), True, "Inconclusive"),
        (None, None, True, "Inconclusive"),  # expected and missing: never a silent pass
        (SERVE_OK, None, True, "Inconclusive"),
    ],
)
def test_vllm_gates(serving: ServingStatus | None, accuracy: AccuracyStatus | None, require: bool,
                    verdict: str) -> None:
    j = judge(result(FULL), SERVING_SPEC, serving=serving, accuracy=accuracy, require_vllm=require)
    assert j.verdict == verdict and j.reason == verdict
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
