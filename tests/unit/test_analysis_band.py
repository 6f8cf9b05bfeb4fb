"""The crossover interval, its confidence and reasons, the indifference band, the stake, the interval rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spx.analysis import judge, points_from_result
from spx.analysis.band import (
    V41_NUM_LAYERS,
    confidence,
    lower_bound_threshold,
    stake_at,
    token_interval,
    uncertainty,
)
from spx.api.result import KernelResult
from spx.api.spec import ExperimentSpec
from spx.api.status import KernelPoint

RESULTS = Path(__file__).parent.parent.parent / "examples" / "results" / "h200-1gpu"


def load(name: str) -> KernelResult:
    return KernelResult.model_validate(json.loads((RESULTS / name / "result.json").read_text()))


def pt(tokens: int, s: float, lo: float | None = None, hi: float | None = None,
       lo_any: float | None = None, hi_any: float | None = None, decided: bool = True) -> KernelPoint:
    return KernelPoint(tokens=tokens, rows_per_rank=-(-tokens // 8), replicated_us=100.0 * s, split_us=100.0,
                       speedup=s, decided=decided, speedup_low=lo, speedup_high=hi,
                       speedup_low_any_prior=lo_any, speedup_high_any_prior=hi_any)


NARROW = [(100, 0.95), (110, 1.05)]  # break-even ≈ 104.9: the bracket is within ±5 %


@pytest.mark.parametrize(
    ("points", "expected", "reason_parts"),
    [
        ([pt(t, s, s * 0.99, s * 1.01) for t, s in NARROW], "resolved", []),
        ([pt(100, 0.95, 0.9, 1.01), pt(110, 1.05, 1.04, 1.06)], "within-spread",
         ["at 100 tokens", "[0.900, 1.010] that overlaps 1.0"]),
        ([pt(100, 0.95, 0.94, 0.96), pt(110, 1.05, 1.04, 1.06, 0.98, 1.06)], "priors-disagree",
         ["at 110 tokens the gather priors disagree", "[0.980, 1.060]"]),
        ([pt(100, 0.95), pt(110, 1.05, decided=False)], "within-spread", ["IQRs overlap"]),
        ([pt(50, 0.9), pt(200, 1.2)], "unbracketed", ["bracketed only by 50 and 200 tokens", "±10 %"]),
        # a gap and an interval over 1.0: both reasons, the gap first; the value is within-spread
        ([pt(50, 0.9, 0.8, 1.1), pt(200, 1.2)], "within-spread", ["unmeasured gap", "at 50 tokens"]),
        ([pt(50, 0.9), pt(200, 0.95)], "none", ["no crossover"]),
    ],
)
def test_confidence_says_why(points: list[KernelPoint], expected: str, reason_parts: list[str]) -> None:
    conf, reasons = confidence(points)
    assert conf == expected
    joined = " | ".join(reasons)
    for part in reason_parts:
        assert part in joined
    assert (reasons == []) == (expected == "resolved")


def test_a_gap_no_wider_than_the_floor_is_resolved() -> None:
    pts = [pt(88, 0.99), pt(96, 1.01)]  # ±4.3 % anyway
    assert confidence(pts)[0] == "resolved"
    wide = [pt(8, 0.9), pt(16, 1.1)]  # ±33 %, but only 8 tokens apart: TP8's floor
    assert confidence(wide)[0] == "unbracketed"
    assert confidence(wide, floor_tokens=8)[0] == "resolved"


@pytest.mark.parametrize(
    ("lows", "expected"),
    [
        ([0.9, 1.01, 0.99, 1.2], 64),  # dips below 1 at 32: from 64 on
        ([1.0, 1.0, 1.1, 1.2], 8),  # ≥ 1 counts (a lower bound of exactly 1 does not lose)
        ([1.1, 1.2, 1.3, 0.999], None),  # the largest count's lower bound is below 1
    ],
)
def test_lower_bound_rule_at_its_edges(lows: list[float], expected: int | None) -> None:
    pts = [pt(t, lo + 0.05, lo, lo + 0.1) for t, lo in zip((8, 16, 32, 64), lows, strict=True)]
    assert lower_bound_threshold(pts) == expected


def test_token_interval_open_edges() -> None:
    wins_everywhere = [pt(16, 1.2, 1.1, 1.3), pt(32, 1.5, 1.4, 1.6)]
    iv = token_interval(wins_everywhere, "low", "high")
    assert (iv.low, iv.low_open, iv.high_open) == (16.0, True, False)
    never_sure = [pt(16, 0.8, 0.7, 0.9), pt(32, 1.2, 0.95, 1.3)]
    iv = token_interval(never_sure, "low", "high")
    assert iv.high == 32.0 and iv.high_open and not iv.low_open and 16 < (iv.low or 0) < 32
    assert token_interval([pt(16, 0.5), pt(32, 0.6)], "low", "high").low is None


def test_stake_interpolates_and_never_extrapolates() -> None:
    pts = [KernelPoint(tokens=t, rows_per_rank=t // 8, replicated_us=r, split_us=s, speedup=r / s)
           for t, r, s in ((64, 10.0, 12.0), (256, 40.0, 20.0))]
    at = stake_at(pts, "gate threshold", 256)
    assert at.saving_us == pytest.approx(20.0) and at.saving_ms_per_chunk == pytest.approx(20.0 * 40 / 1000)
    mid = stake_at(pts, "x", 128)  # log-log: replicated 20 µs, split sqrt(12·20) µs
    assert mid.replicated_us == pytest.approx(20.0) and mid.split_us == pytest.approx((12 * 20) ** 0.5)
    assert stake_at(pts, "x", 2048).saving_us is None
    with pytest.raises(ValueError, match="layers must be >= 1"):
        stake_at(pts, "x", 128, layers=0)


def test_committed_coarse_h200_sweep_is_not_resolved_and_its_stake_is_small() -> None:
    """The seed's coarse sweep with humming (H20-calibrated prior): the status used to say ``resolved``
    for a break-even ≈ 89 bracketed only by 48 and 96 tokens."""
    pts = points_from_result(load("humming"))
    conf, unc = uncertainty(pts, recommended_threshold_tokens=128, gate_threshold_tokens=2048, floor_tokens=8)
    assert conf == "within-spread"
    assert "bracketed only by 48 and 96 tokens" in unc.confidence_reasons[0]
    assert (unc.bracket_low_tokens, unc.bracket_high_tokens) == (48, 96)
    assert unc.lower_bound_threshold_tokens == 1024
    assert unc.crossover_low_tokens is not None and unc.crossover_high_tokens is not None
    assert unc.crossover_low_tokens < 89 < unc.crossover_high_tokens
    assert unc.band_high_tokens is not None and unc.band_high_tokens >= unc.crossover_high_tokens
    rows = {r.label: r for r in unc.stake}
    gate = rows["gate threshold"]  # measured at 2048: 63.84 − 44.47 µs per layer, 40 layers
    assert gate.saving_us == pytest.approx(63.840 - 44.4695, abs=1e-3)
    assert gate.saving_ms_per_chunk == pytest.approx((63.840 - 44.4695) * V41_NUM_LAYERS / 1000, abs=1e-6)
    rec = rows["recommended threshold"]
    assert rec.saving_us is not None and abs(rec.saving_us) < 3.0  # a few µs per layer at 128 tokens
    assert rec.saving_low_us is not None and rec.saving_low_us < 0 < (rec.saving_high_us or 0)


def test_committed_dense_sweep_through_judge() -> None:
    dense = load("humming-dense")
    j = judge(dense, dense.spec)
    assert j.kernel is not None and j.kernel.uncertainty is not None
    k, unc = j.kernel, j.kernel.uncertainty
    assert k.recommended_threshold_tokens == 256 and k.crossover_confidence == "within-spread"
    assert "bracketed only by 192 and 256 tokens (±15 %)" in unc.confidence_reasons[0]
    assert unc.lower_bound_threshold_tokens == 512
    assert {r.label for r in unc.stake} >= {"recommended threshold", "lower-bound threshold", "gate threshold"}
    assert next(r for r in unc.stake if r.label == "gate threshold").saving_us is None  # 2048 > 1024 measured
    point = next(p for p in k.points if p.tokens == 192)
    assert point.speedup_low is not None and point.speedup_low < 1.0 < (point.speedup_high or 0.0)


def test_lower_bound_rule_picks_the_threshold_when_asked() -> None:
    dense = load("humming-dense")
    spec = ExperimentSpec.model_validate({**dense.spec.model_dump(by_alias=True),
                                          "gate": {"thresholdRule": "lower-bound"}})
    j = judge(dense, spec)
    assert j.kernel is not None and j.kernel.recommended_threshold_tokens == 512  # 512 is a power of two


def test_points_without_intervals_leave_the_widths_unknown() -> None:
    """A table without samples (the H20 what-if): no crossover interval or band, stake without bounds,
    thresholds on one count share one row."""
    pts = [KernelPoint(tokens=t, rows_per_rank=t // 8, replicated_us=r, split_us=s, speedup=r / s)
           for t, r, s in ((1024, 30.0, 31.0), (2048, 60.0, 50.0))]
    conf, unc = uncertainty(pts, recommended_threshold_tokens=2048, gate_threshold_tokens=2048, floor_tokens=8)
    assert conf == "unbracketed"
    assert (unc.crossover_low_tokens, unc.band_low_tokens, unc.lower_bound_threshold_tokens) == (None, None, 2048)
    assert [r.label for r in unc.stake] == ["recommended threshold, lower-bound threshold, gate threshold"]
    row = unc.stake[0]
    assert row.saving_us == pytest.approx(10.0) and row.saving_low_us is None and row.saving_high_us is None
