"""spx.analysis.evaluate / points_from_result: the entry point the CLI and the operator call."""

from __future__ import annotations

import math

import pytest

import spx.analysis
from spx.analysis import evaluate, judge, parse_kernel_table, points_from_result
from spx.api.gate import GateSpec
from spx.api.result import KernelResult, PointResult
from spx.api.spec import ExperimentSpec
from spx.api.status import KernelPoint, KernelStatus
from spx_testing import factories
from spx_testing.factories import H20_CSV

H20_BREAK_EVEN = 24.0 * 2.0 ** (
    -math.log(19.2 / 21.1) / (math.log(25.9 / 20.3) - math.log(19.2 / 21.1))
)  # 29.124367 tokens


def h20_checked() -> list[KernelPoint]:
    """The H20 table with a (hypothetical) passing correctness check at every point."""
    return [p.model_copy(update={"max_abs_error": 0.01}) for p in parse_kernel_table(H20_CSV)]


def point_result(tokens: int, rep: list[float], split: list[float], err: float = 0.002) -> PointResult:
    return factories.point_result(tokens, rep, split, max_abs_error=err, shard_gemm_us=min(split) / 2,
                                  gather_us=min(split) / 2)


def kernel_result(points: list[PointResult], complete: bool = True, error: str | None = None) -> KernelResult:
    return KernelResult(
        spec=ExperimentSpec(), world_size=8, gemm_backend="torch-fp8", gather_backend="nccl",
        gather_source="measured", timer="cupti", device="cuda", cuda_graphs=True, points=points,
        complete=complete, error=error,
    )


def test_public_api_is_reexported() -> None:
    assert spx.analysis.evaluate is evaluate
    assert spx.analysis.points_from_result is points_from_result


def test_evaluate_h20_table() -> None:
    ev = evaluate(h20_checked(), GateSpec(), "measured", 8, gemm_backend="vllm-marlin", timer="cupti")
    k = ev.kernel
    assert isinstance(k, KernelStatus)
    assert k.crossover_tokens == pytest.approx(H20_BREAK_EVEN, abs=1e-6)
    assert (k.first_winning_tokens, k.recommended_threshold_tokens, k.crossover_confidence) == (48, 32, "unbracketed")
    assert (k.threshold_rounding, k.gather_source, k.gemm_backend, k.timer) == (
        "next-power-of-two", "measured", "vllm-marlin", "cupti"
    )
    assert ev.verdict == "Pass"
    assert any(
        "split already wins from 48 tokens; threshold 2048 leaves speedup on the table at 48-1024 tokens" in r
        for r in ev.reasons
    )
    wire = k.to_wire()
    assert wire["crossoverTokens"] == pytest.approx(H20_BREAK_EVEN)
    assert wire["firstWinningTokens"] == 48


def test_evaluate_h20_table_without_correctness_data_is_inconclusive() -> None:
    ev = evaluate(parse_kernel_table(H20_CSV), GateSpec(), "measured", 8)
    assert ev.verdict == "Inconclusive"
    assert any("no correctness check recorded" in r for r in ev.reasons)


@pytest.mark.parametrize(
    ("rounding", "tp", "expected"),
    [("next-power-of-two", 8, 32), ("next-multiple-of-tp", 8, 32), ("next-multiple-of-tp", 6, 30), ("none", 8, 30)],
)
def test_evaluate_uses_the_gate_rounding(rounding: str, tp: int, expected: int) -> None:
    gate = GateSpec(threshold_rounding=rounding)  # type: ignore[arg-type]
    assert evaluate(h20_checked(), gate, "measured", tp).kernel.recommended_threshold_tokens == expected


def test_evaluate_sorts_points_and_rejects_bad_input() -> None:
    points = h20_checked()
    ev = evaluate(list(reversed(points)), GateSpec(), "measured", 8)
    assert [p.tokens for p in ev.kernel.points] == [p.tokens for p in points]
    with pytest.raises(ValueError):
        evaluate(points + points[:1], GateSpec(), "measured", 8)
    with pytest.raises(ValueError):
        evaluate(points, GateSpec(), "measured", 0)


def test_evaluate_never_winning_sweep() -> None:
    points = [p.model_copy(update={"speedup": 0.5, "replicated_us": p.split_us / 2}) for p in h20_checked()]
    ev = evaluate(points, GateSpec(), "measured", 8)
    assert (ev.kernel.crossover_tokens, ev.kernel.first_winning_tokens, ev.kernel.recommended_threshold_tokens) == (
        None, None, None
    )
    assert ev.kernel.crossover_confidence == "none"
    assert ev.verdict == "Fail"


def test_points_from_result_uses_medians_and_quartiles() -> None:
    result = kernel_result([
        # clearly separated: replicated [99, 101] vs split [79, 81]
        point_result(4096, [98, 99, 100, 101, 102], [78, 79, 80, 81, 82]),
        # overlapping: replicated [95, 105] vs split [92.5, 102.5] (quartiles of the samples)
        point_result(2048, [90, 95, 100, 105, 110], [90, 92.5, 97.5, 102.5, 105]),
    ])
    p2048, p4096 = points_from_result(result)
    assert p4096.tokens == 4096 and p4096.rows_per_rank == 512
    assert (p4096.replicated_us, p4096.split_us) == (100.0, 80.0)
    assert p4096.speedup == pytest.approx(1.25)
    assert p4096.replicated_iqr_pct == pytest.approx(2.0) and p4096.split_iqr_pct == pytest.approx(2.5)
    assert p4096.iqr_pct == pytest.approx(2.5)
    assert p4096.decided is True and p4096.max_abs_error == 0.002 and p4096.gather_us == 39.0
    assert p2048.decided is False
    assert p2048.speedup == pytest.approx(100.0 / 97.5)


def test_overlapping_spreads_give_within_spread_and_inconclusive() -> None:
    result = kernel_result([
        point_result(1024, [80, 81, 82, 83, 84], [98, 99, 100, 101, 102]),
        # 1.02×, IQRs overlap and the rounds disagree (split faster in some, slower in others)
        point_result(2048, [96, 108, 99, 105, 102], [106, 94, 103, 97, 100]),
        point_result(4096, [198, 199, 200, 201, 202], [98, 99, 100, 101, 102]),
    ])
    ev = judge(result, result.spec)
    assert ev.kernel is not None and ev.kernel.first_winning_tokens == 2048
    assert ev.kernel.crossover_confidence == "within-spread"
    assert ev.verdict == "Inconclusive"
    assert any("at 2048 tokens the speedup 1.02×" in r and "unresolved" in r and "take more samples" in r
               for r in ev.reasons)


def test_a_paired_difference_resolves_a_point_whose_spreads_overlap() -> None:
    """Every round has the split 2 µs faster: the paired interval is clear of 1.0 though the IQRs overlap,
    so the point decides (more samples would not change it) and the gate passes."""
    result = kernel_result([
        point_result(1024, [80, 81, 82, 83, 84], [98, 99, 100, 101, 102]),
        point_result(2048, [96, 99, 102, 105, 108], [94, 97, 100, 103, 106]),
        point_result(4096, [198, 199, 200, 201, 202], [98, 99, 100, 101, 102]),
    ])
    ev = judge(result, result.spec)
    assert ev.kernel is not None
    p2048 = next(p for p in ev.kernel.points if p.tokens == 2048)
    assert p2048.decided is False and p2048.speedup_low is not None and p2048.speedup_low > 1
    assert p2048.gpu_delta_us == pytest.approx(-2.0) and p2048.gpu_delta_high_us == pytest.approx(-2.0)
    assert ev.verdict == "Pass" and not any("take more samples" in r for r in ev.reasons)


def test_judge_uses_spec_and_gives_a_partial_run_no_verdict() -> None:
    points = [
        point_result(1024, [80, 81, 82, 83, 84], [98, 99, 100, 101, 102]),
        point_result(2048, [148, 149, 150, 151, 152], [98, 99, 100, 101, 102]),
    ]
    result = kernel_result(points)
    complete = judge(result, result.spec)
    assert complete.verdict == "Pass"
    assert complete.kernel is not None
    assert (complete.kernel.gemm_backend, complete.kernel.timer) == ("torch-fp8", "cupti")
    partial = judge(kernel_result(points, complete=False, error="NCCL timeout at 4096 tokens"), result.spec)
    assert partial.verdict is None and partial.reason == "BenchmarkFailed" and partial.measured_verdict == "Pass"
    assert "NCCL timeout at 4096 tokens" in partial.reasons[0] and "partial run" in partial.reasons[0]
