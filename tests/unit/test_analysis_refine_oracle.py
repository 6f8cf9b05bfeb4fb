"""Oracle regression: the planner replayed on the committed dense H200 sweep finds the dense sweep's bracket.

The "measurement" of a count is the dense sweep's point (tests/data/h200_humming_dense_speedups.csv,
copied from examples/results/h200-1gpu-adaptive/before/dense/status.json: speed-up and its four interval ends).
A count the dense sweep does not hold (the planner may ask for e.g. 216) is a stand-in: every value is
interpolated log-log (log value linear in log tokens) between the two measured neighbours, the same
model the break-even's interpolation assumes. The loop mirrors :func:`spx.bench.adaptive.adaptive_sweep`
with the benchmark's settings (benchmarks/adaptive_vs_dense.py: coarse 32, 128, 512, 1024 at 30 samples,
2 counts per round, at most 4 added) and counts samples as the benchmark does (points × samples × 2
candidates; the dense sweep: 13 × 50 × 2).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from spx.analysis.crossover import break_even_tokens
from spx.analysis.refine import plan_refinement
from spx.api.status import KernelPoint

DENSE_CSV = Path(__file__).parent.parent / "data" / "h200_humming_dense_speedups.csv"
FIELDS = ("speedup", "speedup_low", "speedup_high", "speedup_low_any_prior", "speedup_high_any_prior")
COARSE = (32, 128, 512, 1024)
DENSE_SAMPLES = 13 * 50 * 2


def dense() -> dict[int, tuple[float, ...]]:
    with DENSE_CSV.open() as f:
        return {int(r["tokens"]): tuple(float(r[k]) for k in FIELDS) for r in csv.DictReader(f)}


def oracle(tokens: int, table: dict[int, tuple[float, ...]]) -> KernelPoint:
    """The dense point at ``tokens``, or the log-log interpolation between its measured neighbours."""
    if tokens in table:
        v = table[tokens]
    else:
        a = max(t for t in table if t < tokens)
        b = min(t for t in table if t > tokens)
        f = math.log(tokens / a) / math.log(b / a)
        v = tuple(math.exp(math.log(x) + f * (math.log(y) - math.log(x))) for x, y in zip(table[a], table[b], strict=True))
    return KernelPoint(tokens=tokens, rows_per_rank=-(-tokens // 8), replicated_us=100.0 * v[0], split_us=100.0,
                       **dict(zip(FIELDS, v, strict=True)))


def replay(bounds: bool, max_added: int, rounds: int = 8) -> tuple[dict[int, KernelPoint], list[list[int]], bool]:
    """Coarse counts, then planned rounds of at most 2 counts until done or ``max_added`` (the loop's caps)."""
    table = dense()
    measured = {t: oracle(t, table) for t in COARSE}
    planned: list[list[int]] = []
    added = 0
    for _ in range(rounds):
        plan = plan_refinement(list(measured.values()), 8, max_new=max(1, min(2, max_added - added)), bounds=bounds)
        if plan.done:
            return measured, planned, True
        if added >= max_added:  # the planner would go on: stopped on the cap
            return measured, planned, False
        planned.append([p.tokens for p in plan.points])
        for p in plan.points:
            measured[p.tokens] = oracle(p.tokens, table)
        added += len(plan.points)
    return measured, planned, False


def test_replayed_dense_h200_sweep_gives_the_dense_bracket_with_under_40_pct_of_its_samples() -> None:
    measured, planned, done = replay(bounds=False, max_added=4)
    # verify 128–512 (128's pessimistic bound 0.99 < 1), then both halves (the 192 dip shows), then narrow once
    assert planned == [[256], [192, 384], [216]]
    assert done  # stopped because the bracket is narrow enough, not on the cap
    be = break_even_tokens(list(measured.values()))
    assert be is not None and be.lower_tokens is not None
    assert 192 <= be.lower_tokens < be.upper_tokens <= 256  # the dense sweep's bracket 192–256 (or inside it)
    assert (be.lower_tokens, be.upper_tokens) == (192, 216)
    assert be.tokens == pytest.approx(213.8, abs=0.5)  # the dense sweep's own break-even
    samples = len(measured) * 30 * 2
    assert samples <= 0.40 * DENSE_SAMPLES, (samples, DENSE_SAMPLES)  # 480 of 1,300: 37 %


def test_bounds_mode_keeps_the_point_estimates_bracket() -> None:
    """With every interval end bracketed too (more counts), the point estimate still finds the dip."""
    measured, _, done = replay(bounds=True, max_added=16, rounds=16)
    assert done
    be = break_even_tokens(list(measured.values()))
    assert be is not None and be.lower_tokens is not None and 192 <= be.lower_tokens < be.upper_tokens <= 256
