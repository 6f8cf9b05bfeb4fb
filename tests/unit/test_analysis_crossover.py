"""spx.analysis.crossover: first winning count, interpolated break-even, confidence."""

from __future__ import annotations

import math
import random

import pytest

from spx.analysis.crossover import (
    break_even_tokens,
    crossover_confidence,
    decided_from_iqr_pct,
    decided_from_quartiles,
    find_crossover,
    first_winning_tokens,
    interpolate_break_even,
    iqr_interval,
    speedup,
    speedup_range,
    with_decided_from_iqr,
)
from spx.analysis.reference import parse_kernel_table
from spx.api.status import KernelPoint
from spx_testing.factories import H20_CSV, kernel_point

#: Synthetic point: split 100 µs, replicated 100·s µs.
pt = kernel_point


def sweep(pairs: list[tuple[int, float]]) -> list[KernelPoint]:
    return [pt(t, s) for t, s in pairs]


# --- the H20 reference table -------------------------------------------------------------------

def test_h20_first_win_is_48_and_every_larger_count_wins() -> None:
    points = parse_kernel_table(H20_CSV)
    assert first_winning_tokens(points) == 48
    assert all(p.speedup > 1 for p in points if p.tokens >= 48)
    assert all(p.speedup <= 1 for p in points if p.tokens < 48)


def test_h20_break_even_by_hand() -> None:
    # Last losing 24 tokens (19.2 / 21.1), first winning 48 tokens (25.9 / 20.3);
    # log s linear in log M:  M* = 24 · 2 ** (−ln s24 / (ln s48 − ln s24)).
    s24, s48 = 19.2 / 21.1, 25.9 / 20.3
    expected = 24.0 * 2.0 ** (-math.log(s24) / (math.log(s48) - math.log(s24)))
    be = break_even_tokens(parse_kernel_table(H20_CSV))
    assert be is not None
    assert be.tokens == pytest.approx(expected, abs=1e-6)
    assert be.tokens == pytest.approx(29.124367, abs=1e-6)
    assert (be.lower_tokens, be.upper_tokens, be.at_or_below_smallest_measured) == (24, 48, False)
    # 24 and 48 tokens are ±41 % of the break-even: an unmeasured gap, never "resolved" (issue 20)
    assert crossover_confidence(parse_kernel_table(H20_CSV)) == "unbracketed"
    assert crossover_confidence(parse_kernel_table(H20_CSV), bracket_rel=0.5) == "resolved"


# --- synthetic sweeps ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "pairs", "first", "lower", "upper", "tokens", "below", "confidence"),
    [
        ("never wins", [(8, 0.5), (64, 0.8), (512, 0.95)], None, None, None, None, False, "none"),
        ("wins then loses at the end", [(8, 0.5), (64, 1.3), (512, 0.9)], None, None, None, None, False, "none"),
        ("always wins", [(8, 1.1), (64, 1.5), (512, 3.0)], 8, None, 8, 8.0, True, "resolved"),
        # wins, loses, wins: the first winning count is the last switch (64 → 128).
        ("wins loses wins", [(8, 1.2), (16, 1.1), (32, 0.9), (64, 0.8), (128, 1.5)], 128, 64, 128,
         64.0 * 2.0 ** (-math.log(0.8) / (math.log(1.5) - math.log(0.8))), False, "unbracketed"),
        # a tie loses; the break-even is then the tie itself
        ("tie loses", [(10, 1.0), (20, 2.0)], 20, 10, 20, 10.0, False, "unbracketed"),
        # a bracket within ±10 % of the break-even (100 → 1.0 at ≈ 104.9 ... 110)
        ("narrow bracket", [(100, 0.95), (110, 1.05)], 110, 100, 110,
         100.0 * 1.1 ** (-math.log(0.95) / (math.log(1.05) - math.log(0.95))), False, "resolved"),
        ("single losing point", [(100, 0.7)], None, None, None, None, False, "none"),
        ("single winning point", [(100, 1.7)], 100, None, 100, 100.0, True, "resolved"),
        ("empty", [], None, None, None, None, False, "none"),
    ],
)
def test_crossover_table(
    name: str, pairs: list[tuple[int, float]], first: int | None, lower: int | None, upper: int | None,
    tokens: float | None, below: bool, confidence: str,
) -> None:
    points = sweep(pairs)
    assert first_winning_tokens(points) == first
    be = break_even_tokens(points)
    if tokens is None:
        assert be is None
    else:
        assert be is not None
        assert be.tokens == pytest.approx(tokens, abs=1e-9)
        assert (be.lower_tokens, be.upper_tokens, be.at_or_below_smallest_measured) == (lower, upper, below)
    assert crossover_confidence(points) == confidence


def test_point_order_does_not_matter() -> None:
    points = parse_kernel_table(H20_CSV)
    shuffled = points[:]
    random.Random(7).shuffle(shuffled)
    assert find_crossover(shuffled) == find_crossover(points)


def test_repeated_token_count_raises() -> None:
    with pytest.raises(ValueError, match="appear more than once"):
        first_winning_tokens([pt(8, 1.0), pt(8, 2.0)])


@pytest.mark.parametrize(
    ("interpolation", "expected"),
    [("linear", 150.0), ("log-log", 100.0 * 2.0 ** (math.log(2.0) / math.log(3.0)))],
)
def test_interpolation_choices(interpolation: str, expected: float) -> None:
    # (100 tokens, 0.5×) → (200 tokens, 1.5×)
    assert interpolate_break_even(100, 0.5, 200, 1.5, interpolation) == pytest.approx(expected)  # type: ignore[arg-type]
    be = break_even_tokens([pt(100, 0.5), pt(200, 1.5)], interpolation)  # type: ignore[arg-type]
    assert be is not None and be.tokens == pytest.approx(expected) and be.interpolation == interpolation


@pytest.mark.parametrize(
    "args",
    [(200, 0.5, 100, 1.5, "log-log"), (100, 1.2, 200, 1.5, "log-log"), (100, 0.5, 200, 0.9, "log-log"),
     (100, 0.5, 200, 1.5, "cubic"), (0, 0.5, 200, 1.5, "linear")],
)
def test_interpolate_break_even_rejects_non_brackets(args: tuple[float, float, float, float, str]) -> None:
    with pytest.raises(ValueError):
        interpolate_break_even(*args)  # type: ignore[arg-type]


# --- confidence --------------------------------------------------------------------------------

def test_speedup_and_validation() -> None:
    assert speedup(25.9, 20.3) == pytest.approx(1.2758620689655)
    with pytest.raises(ValueError):
        speedup(0.0, 1.0)
    with pytest.raises(ValueError):
        speedup(1.0, math.nan)


@pytest.mark.parametrize(
    ("rep_q", "split_q", "decided"),
    [((95.0, 105.0), (85.0, 94.0), True), ((95.0, 105.0), (90.0, 96.0), False),
     ((95.0, 105.0), (105.0, 110.0), False),  # touching intervals overlap
     ((95.0, 105.0), (106.0, 110.0), True)],
)
def test_decided_from_quartiles(rep_q: tuple[float, float], split_q: tuple[float, float], decided: bool) -> None:
    assert decided_from_quartiles(*rep_q, *split_q) is decided


def test_decided_from_iqr_pct() -> None:
    assert iqr_interval(100.0, 10.0) == pytest.approx((95.0, 105.0))
    # replicated 100 ± 5 %, split 90 ± 5 %: [95, 105] vs [85.5, 94.5] → decided
    assert decided_from_iqr_pct(pt(64, 1.0 / 0.9, rep_iqr=10.0, split_iqr=10.0)) is True
    # split 92 µs: [87.4, 96.6] overlaps [95, 105] → undecided
    p = KernelPoint(tokens=64, rows_per_rank=8, replicated_us=100.0, split_us=92.0, speedup=100 / 92,
                    replicated_iqr_pct=10.0, split_iqr_pct=10.0, iqr_pct=10.0)
    assert decided_from_iqr_pct(p) is False and with_decided_from_iqr(p).decided is False
    # only the max iqr_pct known: used for both candidates
    only_max = p.model_copy(update={"replicated_iqr_pct": 0.0, "split_iqr_pct": 0.0})
    assert decided_from_iqr_pct(only_max) is False
    # no spread recorded at all: decided unless the medians are equal
    assert decided_from_iqr_pct(pt(64, 1.2)) is True
    assert decided_from_iqr_pct(pt(64, 1.0)) is False


def test_speedup_range() -> None:
    worst, best = speedup_range(pt(64, 1.2, rep_iqr=10.0, split_iqr=20.0))
    assert worst == pytest.approx(120 * 0.95 / (100 * 1.1))
    assert best == pytest.approx(120 * 1.05 / (100 * 0.9))


@pytest.mark.parametrize(
    ("undecided_at", "confidence"),
    [(None, "resolved"), (32, "within-spread"), (64, "within-spread"), (16, "resolved"), (128, "resolved")],
)
def test_confidence_depends_on_the_bracketing_points_only(undecided_at: int | None, confidence: str) -> None:
    pairs = [(16, 0.5), (32, 0.9), (64, 1.1), (128, 2.0)]
    points = [pt(t, s, decided=t != undecided_at) for t, s in pairs]
    # the bracket 32-64 is ±35 % of the break-even ≈ 46: allowed here (±50 %) to isolate the spread rule
    assert crossover_confidence(points, bracket_rel=0.5) == confidence
    expected_default = "within-spread" if confidence == "within-spread" else "unbracketed"
    assert crossover_confidence(points) == expected_default


def test_always_wins_with_undecided_smallest_point_is_within_spread() -> None:
    assert crossover_confidence([pt(8, 1.05, decided=False), pt(16, 2.0)]) == "within-spread"
