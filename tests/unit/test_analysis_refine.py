"""The refinement planner: where it adds counts, why, and when it stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spx.analysis import points_from_result
from spx.analysis.crossover import break_even_tokens, median_point
from spx.analysis.refine import plan_refinement
from spx.api.result import KernelResult
from spx.api.status import KernelPoint

RESULTS = Path(__file__).parent.parent.parent / "examples" / "results" / "h200-1gpu"


def sweep(pairs: list[tuple[int, float]]) -> list[KernelPoint]:
    return [median_point(t, -(-t // 8), 100.0 * s, 100.0) for t, s in pairs]


def test_coarse_h200_sweep_is_refined_inside_its_brackets() -> None:
    coarse = KernelResult.model_validate(json.loads((RESULTS / "humming" / "result.json").read_text()))
    plan = plan_refinement(points_from_result(coarse), 8)
    tokens = [p.tokens for p in plan.points]
    assert 88 in tokens  # point estimate ≈ 89 between 48 and 96: 89·1.1 rounds down to 96 (measured), 89·0.9 up to 88
    reason = next(p.reason for p in plan.points if p.tokens == 88)
    assert "point estimate" in reason and "48–96" in reason and "11 rows per rank × TP8" in reason
    assert all(t % 8 == 0 for t in tokens) and not set(tokens) & {p.tokens for p in coarse.points}
    assert len(tokens) <= 4


@pytest.mark.parametrize(
    ("pairs", "planned", "why"),
    [
        ([(88, 0.99), (96, 1.01)], [], "bracketed by 88–96"),
        ([(8, 0.5), (64, 0.8)], [], "no crossover"),
        ([(64, 1.1), (128, 1.3)], [32], None),  # wins everywhere: probe half the smallest
        ([(8, 1.1), (128, 1.3)], [], "wins from the smallest"),  # the smallest is the floor already
        # break-even 100·4^(ln(1/0.9)/ln(1.3/0.9)) ≈ 148.8: 133.9 rounds up to 136, 163.7 down to 160
        ([(100, 0.9), (400, 1.3)], [136, 160], None),
        ([(96, 0.99), (104, 1.2)], [], "bracketed"),  # 8 tokens apart: TP8's floor
    ],
)
def test_plan_table(pairs: list[tuple[int, float]], planned: list[int], why: str | None) -> None:
    pts = sweep(pairs)
    plan = plan_refinement(pts, 8, max_new=8)
    assert [p.tokens for p in plan.points] == planned
    assert plan.done == (not planned)
    if why is not None:
        assert why in plan.why


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
        for p in plan.points:
            measured[p.tokens] = s(p.tokens)
            added.append(p.tokens)
    else:
        pytest.fail(f"did not stop; added {added}")
    be = break_even_tokens(sweep(sorted(measured.items())))
    assert be is not None and be.lower_tokens is not None
    assert be.upper_tokens - be.lower_tokens <= max(0.2 * be.tokens, 8)
    assert be.lower_tokens < 300 <= be.upper_tokens
    assert len(added) <= 3 and all(t % 8 == 0 for t in added)


def test_bounds_curves_add_their_own_brackets() -> None:
    """The point estimate is bracketed (88–96) but the pessimistic bound crosses between 96 and 512."""
    pts = [
        KernelPoint(tokens=t, rows_per_rank=t // 8, replicated_us=100 * s, split_us=100, speedup=s,
                    speedup_low=lo, speedup_high=s + 0.05)
        for t, s, lo in ((88, 0.99, 0.95), (96, 1.01, 0.96), (512, 1.3, 1.2))
    ]
    plan = plan_refinement(pts, 8)
    assert plan.points and all("pessimistic bound" in p.reason for p in plan.points)
    assert all(96 < p.tokens < 512 for p in plan.points)
    assert plan_refinement(pts, 8, bounds=False).done  # the point estimate alone is bracketed


def test_planner_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="tp >= 1"):
        plan_refinement([], 0)
    assert plan_refinement([], 8).done
