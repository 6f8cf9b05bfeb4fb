"""spx.analysis.verdict: every branch of the gate, with reasons that cite the numbers."""

from __future__ import annotations

import functools

import pytest

from spx.analysis.crossover import find_crossover
from spx.analysis.threshold import recommended_threshold_tokens
from spx.analysis.verdict import GateOutcome, gate_verdict
from spx.api.gate import GateSpec
from spx.api.status import GatherSource, KernelPoint
from spx_testing.factories import kernel_point

#: Synthetic point: split 100 µs, replicated 100·s µs, max |error| 0.001 unless ``max_abs_error=``.
pt = functools.partial(kernel_point, max_abs_error=0.001)


GOOD = [pt(256, 0.8), pt(512, 1.2), pt(1024, 1.5), pt(2048, 2.0), pt(4096, 3.0)]


def judge(points: list[KernelPoint], gate: GateSpec | None = None, source: GatherSource = "measured") -> GateOutcome:
    gate = gate or GateSpec()
    cross = find_crossover(points)
    rec = (
        recommended_threshold_tokens(cross.break_even.tokens, gate.threshold_rounding, 8) if cross.break_even else None
    )
    return gate_verdict(points, gate, source, crossover=cross, recommended_threshold_tokens=rec)


def has(reasons: tuple[str, ...], *fragments: str) -> bool:
    return any(all(f in r for f in fragments) for r in reasons)


def test_pass_cites_the_speedups_and_the_error() -> None:
    out = judge(GOOD)
    assert out.verdict == "Pass"
    assert has(out.reasons, "at least 2.00×", "lowest at 2048 tokens", "2048: 2.00×, 4096: 3.00×")
    assert has(out.reasons, "max abs error 0.001 <= maxAbsError 0.05")


def test_recommended_below_threshold_says_speedup_is_left_on_the_table() -> None:
    out = judge(GOOD)
    # break-even between 256 (0.8×) and 512 (1.2×) rounds up to 512
    assert has(out.reasons, "recommended threshold 512 (next-power-of-two)")
    assert has(
        out.reasons,
        "split already wins from 512 tokens; threshold 2048 leaves speedup on the table at 512-1024 tokens "
        "(512: 1.20×, 1024: 1.50×)",
    )


def test_recommended_above_threshold_is_reported() -> None:
    points = [pt(1024, 0.8), pt(2048, 0.9), pt(4096, 1.2), pt(8192, 1.5)]
    out = judge(points)
    assert out.verdict == "Fail"
    assert has(out.reasons, "at 2048 tokens the speedup is 0.90×", "replicated 90.0 µs / split 100.0 µs", "1.00×")
    assert has(out.reasons, "recommended threshold 4096 is above threshold 2048", "does not win at 2048: 0.90×")


def test_recommended_equal_to_threshold() -> None:
    points = [pt(1024, 0.9), pt(2048, 1.2), pt(4096, 2.0)]
    out = judge(points)
    assert out.verdict == "Pass"
    assert has(out.reasons, "recommended threshold 2048 equals threshold 2048")


def test_fail_on_error_anywhere_even_below_threshold() -> None:
    points = [pt(256, 0.8, max_abs_error=0.2), *GOOD[1:]]
    out = judge(points)
    assert out.verdict == "Fail"
    assert has(out.reasons, "max abs error 0.2 at 256 tokens exceeds maxAbsError 0.05")


def test_fail_on_decided_point_below_min_speedup() -> None:
    out = judge(GOOD, GateSpec(min_speedup_at_or_above_threshold=2.5))
    assert out.verdict == "Fail"
    assert has(out.reasons, "at 2048 tokens the speedup is 2.00×", "below minSpeedupAtOrAboveThreshold 2.50×")
    assert not has(out.reasons, "at 4096 tokens the speedup is")


def test_losing_points_below_threshold_do_not_fail() -> None:
    assert judge([pt(1024, 0.5), pt(2048, 1.1)]).verdict == "Pass"


def test_inconclusive_without_points_at_or_above_threshold() -> None:
    out = judge(GOOD[:3])
    assert out.verdict == "Inconclusive"
    assert has(out.reasons, "no measured token count is at or above thresholdTokens 2048", "largest measured: 1024")


def test_inconclusive_on_undecided_point_at_or_above_threshold() -> None:
    points = [*GOOD[:3], pt(2048, 1.05, decided=False, rep_iqr=12.0, split_iqr=9.0), GOOD[4]]
    out = judge(points)
    assert out.verdict == "Inconclusive"
    assert has(out.reasons, "at 2048 tokens the speedup 1.05×", "replicated IQR 12.0 %, split IQR 9.0 %", "unresolved",
               "rerun with samples kept")
    assert not has(out.reasons, "take more samples")  # medians alone: samples are not what is missing


def test_a_point_is_resolved_by_its_interval_and_more_samples_are_advised_only_where_they_help() -> None:
    """With an interval, the interval decides (not the IQRs): one clear of 1.0 resolves the point even with
    overlapping IQRs; one across 1.0 leaves it unresolved, and the advice depends on what makes it wide."""
    clear = pt(2048, 1.05, decided=False, rep_iqr=12.0, split_iqr=9.0).model_copy(
        update={"speedup_low": 1.02, "speedup_high": 1.08})
    assert judge([*GOOD[:3], clear, GOOD[4]]).verdict == "Pass"
    wide = clear.model_copy(update={"speedup_low": 0.97, "speedup_high": 1.12})
    measured = judge([*GOOD[:3], wide, GOOD[4]])
    assert measured.verdict == "Inconclusive" and measured.speed_verdict == "Inconclusive"
    assert has(measured.reasons, "95 % interval [0.970, 1.120]", "take more samples (the interval narrows")
    modelled = judge([*GOOD[:3], wide, GOOD[4]], source="modelled")
    assert has(modelled.reasons, "measure the gather (its prior's uncertainty is in the interval)")
    slow = clear.model_copy(update={"speedup": 0.9, "speedup_low": 0.85, "speedup_high": 0.95})
    out = judge([*GOOD[:3], slow, GOOD[4]])
    assert out.verdict == "Fail" and not has(out.reasons, "take more samples")


def test_undecided_point_below_min_speedup_is_inconclusive_not_fail() -> None:
    points = [*GOOD[:3], pt(2048, 0.97, decided=False, rep_iqr=10.0, split_iqr=10.0), GOOD[4]]
    assert judge(points).verdict == "Inconclusive"


def test_undecided_point_that_cannot_change_a_lenient_gate_passes() -> None:
    # min 0.8×: worst speedup in the IQRs is 105·0.95 / (100·1.05) = 0.95 ≥ 0.8
    points = [*GOOD[:3], pt(2048, 1.05, decided=False, rep_iqr=10.0, split_iqr=10.0), GOOD[4]]
    assert judge(points, GateSpec(min_speedup_at_or_above_threshold=0.8)).verdict == "Pass"
    # …but with 60 % spreads the worst case (0.67×) falls below 0.8
    wide = [*GOOD[:3], pt(2048, 1.05, decided=False, rep_iqr=60.0, split_iqr=60.0), GOOD[4]]
    assert judge(wide, GateSpec(min_speedup_at_or_above_threshold=0.8)).verdict == "Inconclusive"


def test_undecided_point_does_not_hide_a_fail() -> None:
    points = [*GOOD[:3], pt(2048, 1.05, decided=False, rep_iqr=10.0), pt(4096, 0.7)]
    assert judge(points).verdict == "Fail"


def test_modelled_gather_caps_pass_at_inconclusive() -> None:
    out = judge(GOOD, source="modelled")
    assert out.verdict == "Inconclusive"
    assert has(out.reasons, "gather is modelled", "allowModelledGather false", "speed verdict (Pass)", "Inconclusive")


def test_modelled_gather_allowed_passes() -> None:
    out = judge(GOOD, GateSpec(allow_modelled_gather=True), source="modelled")
    assert out.verdict == "Pass"
    assert has(out.reasons, "accepted because allowModelledGather is true")


def test_modelled_gather_reports_a_speed_fail_as_inconclusive() -> None:
    # the slowdown at 4096 rests on the gather model: not a measured Fail
    out = judge([*GOOD[:4], pt(4096, 0.5)], source="modelled")
    assert out.verdict == "Inconclusive"
    assert has(out.reasons, "at 4096 tokens the speedup is 0.50×") and has(out.reasons, "speed verdict (Fail)")


def test_modelled_gather_keeps_a_correctness_fail() -> None:
    assert judge([*GOOD[:4], pt(4096, 2.0, max_abs_error=1.0)], source="modelled").verdict == "Fail"


def test_cpu_timings_never_pass_or_fail_on_speed() -> None:
    gate = GateSpec()
    cross = find_crossover(GOOD)
    out = gate_verdict(GOOD, gate, "measured", crossover=cross, cpu_timings=True)
    assert out.verdict == "Inconclusive" and has(out.reasons, "CPU smoke run", "allowCpuTimings false")
    slow = [*GOOD[:4], pt(4096, 0.5)]
    assert gate_verdict(slow, gate, "measured", cpu_timings=True).verdict == "Inconclusive"
    allowed = GateSpec(allow_cpu_timings=True)
    assert gate_verdict(GOOD, allowed, "measured", cpu_timings=True).verdict == "Pass"
    assert gate_verdict(slow, allowed, "measured", cpu_timings=True).verdict == "Fail"


def test_missing_correctness_check_is_inconclusive() -> None:
    points = [pt(p.tokens, p.speedup, max_abs_error=None) for p in GOOD]
    out = judge(points)
    assert out.verdict == "Inconclusive"
    assert has(out.reasons, "no correctness check recorded at 256, 512, 1024, 2048, 4096 tokens")


def test_no_points_is_inconclusive() -> None:
    out = judge([])
    assert out.verdict == "Inconclusive"
    assert has(out.reasons, "no measured points")


def test_no_crossover_is_explained() -> None:
    out = judge([pt(1024, 0.5), pt(2048, 0.9, decided=False, rep_iqr=20.0)])
    assert out.verdict == "Inconclusive"
    assert has(out.reasons, "split does not win at the largest measured count (2048 tokens: 0.90×)", "no crossover")


def test_within_spread_crossover_is_flagged() -> None:
    points = [pt(256, 0.95, decided=False, rep_iqr=15.0), *GOOD[1:]]
    out = judge(points)
    assert out.verdict == "Pass"  # the bracket is below the threshold: informative only
    assert has(out.reasons, "confidence within-spread")
    assert has(out.reasons, "crossover bracket 256-512 tokens is within the candidates' spread")


def test_always_winning_sweep_reports_an_upper_bound() -> None:
    out = judge([pt(6, 1.3), pt(2048, 4.0)])
    assert has(out.reasons, "break-even is at or below 6 tokens", "recommended threshold 8")


@pytest.mark.parametrize("gate_min", [1.0, 1.5, 2.0])
def test_speedup_exactly_at_minimum_passes(gate_min: float) -> None:
    # the gate fails on speedup < minimum; equal to it is enough (even a 1.00× tie with min 1.0)
    points = [pt(1024, 0.5), pt(2048, gate_min), pt(4096, gate_min + 1)]
    assert judge(points, GateSpec(min_speedup_at_or_above_threshold=gate_min)).verdict == "Pass"
