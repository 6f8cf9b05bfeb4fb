"""The refinement planner: where it adds counts, why, and when it stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spx.analysis import points_from_result
from spx.analysis.crossover import break_even_tokens, median_point
from spx.analysis.refine import grid_count, plan_refinement
from spx.api.result import KernelResult
from spx.api.status import KernelPoint

RESULTS = Path(__file__).parent.parent.parent / "examples" / "results" / "h200-1gpu"


def sweep(pairs: list[tuple[int, float]]) -> list[KernelPoint]:
    return [median_point(t, -(-t // 8), 100.0 * s, 100.0) for t, s in pairs]


def with_low(rows: list[tuple[int, float, float]]) -> list[KernelPoint]:
    """Points (tokens, speed-up, pessimistic bound ``speedupLow``); the optimistic end is speed-up + 0.05."""
    return [KernelPoint(tokens=t, rows_per_rank=-(-t // 8), replicated_us=100 * s, split_us=100, speedup=s,
                        speedup_low=lo, speedup_high=s + 0.05) for t, s, lo in rows]


def test_coarse_h200_sweep_verifies_its_winning_run_first() -> None:
    """The seed's coarse sweep on H200: the split wins from 96, but 96–384 and 384–1024 have no count
    and their pessimistic bounds are < 1, so the planner checks them before narrowing 48–96."""
    coarse = KernelResult.model_validate(json.loads((RESULTS / "humming" / "result.json").read_text()))
    plan = plan_refinement(points_from_result(coarse), 8, bounds=False)
    assert [p.tokens for p in plan.points] == [192, 640]  # √(96·384) = 192; √(384·1024) ≈ 627 → 640 (step 128)
    assert plan.points[0].reason.startswith(
        "point estimate: verify the winning run: 96–384 (×4.0) has no measured count and 96's pessimistic bound 0.891 < 1")  # 0.890 at 500 resamples
    assert "measure at 192 (= 24 rows per rank × TP8)" in plan.points[0].reason


@pytest.mark.parametrize(
    ("rows", "tp", "planned", "why"),
    [
        # ratio exactly 1.5 (128 → 192) is closed: the bracket 120–128 is at the TP8 floor, so done
        ([(120, 0.99, 0.9), (128, 1.1, 0.95), (192, 1.1, 0.95)], 8, [], "bracketed by 120–128"),
        # ratio 196 / 128 ≈ 1.53 is open: √(128·196) ≈ 158 → 160 (step 32 in 128 … 256)
        ([(120, 0.99, 0.9), (128, 1.1, 0.95), (196, 1.1, 0.95)], 8, [160], None),
        # pessimistic bounds exactly 1.0 at both ends: a loss is excluded (a tie loses, but a bound of 1 is not < 1)
        ([(120, 0.99, 0.9), (128, 1.1, 1.0), (512, 1.2, 1.0)], 8, [], "bracketed by 120–128"),
        ([(120, 0.99, 0.9), (128, 1.1, 1.0), (512, 1.2, 0.999)], 8, [256], None),
        # TP6: the grid step in 64 … 128 is lcm(16, 6) = 48; √(90·140) ≈ 112 → 96 (144 is outside)
        ([(84, 0.99, 0.9), (90, 1.1, 0.95), (140, 1.2, 1.05)], 6, [96], None),
        # TP10: the grid (lcm(16, 10) = 80: 80, 160) has no count in 82–125; the nearest multiple of 10 to √(82·125) ≈ 101
        ([(76, 0.99, 0.9), (82, 1.1, 0.95), (125, 1.2, 1.05)], 10, [100], None),
        # no multiple of TP8 strictly inside 9–14: the gap is below the TP's resolution
        ([(8, 0.99, 0.9), (9, 1.1, 0.95), (14, 1.2, 0.95)], 8, [], "9–14 has no multiple of TP8 inside"),
        # verify before narrowing: 32–128 is not narrowed while 128–512 is open
        ([(32, 0.73, 0.62), (128, 1.14, 0.99), (512, 1.15, 1.04)], 8, [256], None),
        # the split wins everywhere but 64–256 may hide a loss: verified before probing below 64
        ([(64, 1.1, 0.9), (256, 1.3, 1.1)], 8, [128], None),
        # one open gap per round each: 128–256 and 256–512
        ([(32, 0.73, 0.62), (128, 1.14, 0.99), (256, 1.04, 0.92), (512, 1.15, 1.04)], 8, [192, 384], None),
    ],
)
def test_verify_table(rows: list[tuple[int, float, float]], tp: int, planned: list[int], why: str | None) -> None:
    plan = plan_refinement(with_low(rows), tp, max_new=8, bounds=False)
    assert [p.tokens for p in plan.points] == planned
    assert all(p.tokens % tp == 0 and "verify the winning run" in p.reason for p in plan.points)
    if why is not None:
        assert why in plan.why


@pytest.mark.parametrize(
    ("pairs", "tp", "floor", "planned", "why"),
    [
        ([(88, 0.99), (96, 1.01)], 8, None, [], "bracketed by 88–96"),
        ([(8, 0.5), (64, 0.8)], 8, None, [], "no crossover"),
        ([(64, 1.1), (128, 1.3)], 8, None, [32], None),  # wins everywhere: probe half the smallest
        ([(8, 1.1), (128, 1.3)], 8, None, [], "wins from the smallest"),  # the smallest is the floor already
        # break-even 100·4^(ln(1/0.9)/ln(1.3/0.9)) ≈ 148.8 → 152, clamped into the middle half 175–325 → 176
        ([(100, 0.9), (400, 1.3)], 8, None, [176], None),
        # 192–256 (the H200 dip): break-even ≈ 213.8 → 216 (inside the middle half 208–240)
        ([(192, 0.9746), (256, 1.0441)], 8, None, [216], None),
        # 213.8 rounds to 212 with TP4
        ([(192, 0.9746), (256, 1.0441)], 4, None, [212], None),
        ([(96, 0.99), (104, 1.2)], 8, None, [], "bracketed"),  # 8 tokens apart: TP8's floor
        # floor 1: 16–24 (break-even ≈ 19.6) is too wide, but no multiple of 8 lies inside
        ([(16, 0.5), (24, 2.0)], 8, 1, [], "16–24 has no multiple of TP8 inside"),
        ([(16, 0.5), (24, 2.0)], 4, 1, [20], None),  # TP4: the middle half 18–22 holds 20
    ],
)
def test_narrow_table(pairs: list[tuple[int, float]], tp: int, floor: int | None, planned: list[int],
                      why: str | None) -> None:
    plan = plan_refinement(sweep(pairs), tp, floor_tokens=floor, max_new=8)
    assert [p.tokens for p in plan.points] == planned
    assert plan.done == (not planned)
    if why is not None:
        assert why in plan.why


def test_verify_reason_truncates_the_bound() -> None:
    """0.9996 is below 1 and must not read as 1.00 (the reason is truncated to 3 decimals, not rounded)."""
    (p,) = plan_refinement(with_low([(120, 0.99, 0.9), (128, 1.1, 0.9996), (512, 1.2, 1.1)]), 8, bounds=False).points
    assert p.reason == ("point estimate: verify the winning run: 128–512 (×4.0) has no measured count and 128's "
                        "pessimistic bound 0.999 < 1; measure at 256 (= 32 rows per rank × TP8)")


def test_narrowing_reason_names_the_rule_and_the_bracket() -> None:
    (p,) = plan_refinement(sweep([(192, 0.9746), (256, 1.0441)]), 8, bounds=False).points
    assert p.reason == ("point estimate: narrow the bracket: break-even ≈ 214 tokens bracketed only by 192–256 "
                        "(±15 % > ±10 %); measure at 216 (= 27 rows per rank × TP8)")


@pytest.mark.parametrize(("lo", "hi", "tp", "count"), [
    (128, 512, 8, 256), (128, 256, 8, 192), (256, 512, 8, 384), (384, 1024, 8, 640),
    (90, 140, 6, 96), (82, 125, 10, 100), (9, 14, 8, None), (1, 3, 1, 2),
])
def test_grid_count(lo: int, hi: int, tp: int, count: int | None) -> None:
    assert grid_count(lo, hi, tp) == count


def test_planner_converges_on_a_smooth_curve_within_few_points() -> None:
    """s(M) = (M/300)^0.25: break-even at 300 tokens. From a coarse sweep 16…4096 the planner must
    bracket it to ±10 % (or the TP8 floor) and stop, adding only counts vLLM can see unpadded."""
    def s(m: int) -> float:
        return (m / 300.0) ** 0.25

    measured = {t: s(t) for t in (16, 64, 256, 1024, 4096)}
    added: list[int] = []
    for _ in range(6):
        plan = plan_refinement(sweep(sorted(measured.items())), 8, max_new=2)
        if plan.done:
            break
        assert len(plan.points) == 1  # one narrowing point per round (no intervals: no gap to verify)
        for p in plan.points:
            measured[p.tokens] = s(p.tokens)
            added.append(p.tokens)
    else:
        pytest.fail(f"did not stop; added {added}")
    be = break_even_tokens(sweep(sorted(measured.items())))
    assert be is not None and be.lower_tokens is not None
    assert be.upper_tokens - be.lower_tokens <= max(0.2 * be.tokens, 8)
    assert be.lower_tokens < 300 <= be.upper_tokens
    assert added == [448, 304]  # middle half of 256–1024 (448–832), then of 256–448 (304–400)


def test_bounds_curves_add_their_own_brackets() -> None:
    """The point estimate is bracketed (88–96) but the pessimistic bound crosses between 96 and 512."""
    pts = with_low([(88, 0.99, 0.95), (96, 1.01, 0.96), (512, 1.3, 1.2)])
    # the point estimate's run 96–512 has 96's pessimistic bound 0.96 < 1: verified first, by both curves
    plan = plan_refinement(pts, 8)
    assert [p.tokens for p in plan.points] == [224]
    assert plan.points[0].reason.startswith("point estimate, optimistic bound: verify the winning run: 96–512")
    assert [p.tokens for p in plan_refinement(pts, 8, bounds=False).points] == [224]
    pts = with_low([(88, 0.99, 0.95), (96, 1.01, 0.96), (128, 1.1, 0.98), (176, 1.2, 1.05), (256, 1.25, 1.1),
                    (384, 1.3, 1.2), (512, 1.3, 1.2)])
    plan = plan_refinement(pts, 8)
    assert [p.tokens for p in plan.points] == [144]  # pessimistic bound: 128–176, break-even ≈ 140.5 → 144
    assert plan.points[0].reason.startswith("pessimistic bound, any-prior pessimistic bound: narrow the bracket")  # no any-prior ends set: the same curve
    assert plan_refinement(pts, 8, bounds=False).done  # the point estimate alone is bracketed


def test_planner_refuses_bad_arguments_and_repeated_counts() -> None:
    with pytest.raises(ValueError, match="tp >= 1"):
        plan_refinement([], 0)
    assert plan_refinement([], 8).done
    with pytest.raises(ValueError, match="appear more than once"):
        plan_refinement(sweep([(64, 0.9), (64, 1.1), (128, 1.2)]), 8)


def test_the_gate_threshold_is_measured_first_where_the_decision_is() -> None:
    """A sweep bracketed around its GPU break-even (≈ 300) but without the gate threshold 3072 itself: the
    planner measures 3072 before anything else (the verdict is judged from it up); once measured, not again."""
    pts = sweep([(256, 0.95), (288, 0.99), (320, 1.01), (1024, 1.3), (8192, 1.6)])
    plan = plan_refinement(pts, 8, bounds=False, gate_threshold=3072)
    assert plan.points[0].tokens == 3072 and "the decision: measure gate.thresholdTokens 3,072 itself (judged from it up)" in plan.points[0].reason
    done = plan_refinement([*pts, *sweep([(3072, 1.4)])], 8, bounds=False, gate_threshold=3072)
    assert 3072 not in [p.tokens for p in done.points]
    assert plan_refinement(pts, 8, bounds=False, gate_threshold=16384).points == ()  # outside the range: not probed


def test_the_host_regime_crossover_is_bracketed_too() -> None:
    """The GPU regime is bracketed (≈ 300); the host regime's break-even lies between 2048 and 8192 with no
    count in between: the planner narrows that bracket (where the regimes disagree), not only the GPU one."""
    gpu = sweep([(256, 0.95), (288, 0.99), (320, 1.01), (2048, 1.3), (8192, 1.6)])
    host = sweep([(256, 0.6), (288, 0.6), (320, 0.6), (2048, 0.8), (8192, 1.2)])
    assert plan_refinement(gpu, 8, bounds=False).points == ()
    plan = plan_refinement(gpu, 8, bounds=False, host_points=host)
    assert plan.points and all(2048 < p.tokens < 8192 for p in plan.points)
    assert plan.points[0].reason.startswith("host-bound point estimate: narrow the bracket")
