"""The adaptive sweep's loop (spx.bench.adaptive) on a synthetic projection, one process per rank replayed.

``measure`` here computes a point from a closed-form curve instead of timing a GEMM: the loop's
logic (what is measured, in which order, with which reason, on which rank) is under test; the real
measurement runs in tests/integration/test_adaptive_local.py (2 gloo ranks).
"""

from __future__ import annotations

import pytest

from spx.analysis.crossover import break_even_tokens
from spx.analysis.stats import candidate_stats
from spx.analysis.summary import point_from_result
from spx.api.result import PointResult
from spx.api.spec import ExperimentSpec
from spx.bench.adaptive import adaptive_sweep

SPEC = ExperimentSpec.model_validate({
    "sweep": {"tokens": [16, 64, 256, 1024, 4096], "refine": {"maxRounds": 6, "pointsPerRound": 2,
                                                              "maxAddedPoints": 8}},
})


def synthetic(tokens: int) -> PointResult:
    """Replicated 10 µs · (M/100)^0.6 + 5, split = replicated / s(M) with s(M) = (M/300)^0.25: break-even 300."""
    rep = 10.0 * (tokens / 100) ** 0.6 + 5.0
    split = rep / (tokens / 300.0) ** 0.25
    wobble = [1.0, 1.001, 0.999, 1.0005, 0.9995]
    padded = -(-tokens // 8) * 8
    return PointResult(tokens=tokens, padded_tokens=padded, rows_per_rank=padded // 8,
                       replicated=candidate_stats([rep * w for w in wobble]),
                       split=candidate_stats([split * w for w in wobble]), gather_source="measured", max_abs_error=0.0)


def test_rank0_refines_until_bracketed_and_other_ranks_measure_the_same_counts() -> None:
    measured0: list[int] = []
    plans: list[list[tuple[int, str]]] = []
    seen: list[PointResult] = []

    def measure0(counts: list[int]) -> list[PointResult]:
        measured0.extend(counts)
        return [synthetic(t) for t in counts]

    def broadcast0(plan: list[tuple[int, str]] | None) -> list[tuple[int, str]]:
        plans.append(list(plan or []))
        return list(plan or [])

    points = adaptive_sweep(SPEC, measure0, broadcast0, on_point=seen.append)
    assert points is not None and [p.tokens for p in points] == sorted(measured0)
    # the listed counts, then T + 1 for the gate threshold T = 2048 (2T + 1 lies above the largest listed),
    # then the decision's own count T, then the break-even's bracket
    assert measured0[:7] == [16, 64, 256, 1024, 4096, 2049, 2048]
    reasons = {p.tokens: p.added_because or "" for p in points if p.added_because}
    assert reasons[2049].startswith("off-alignment (T + 1 for gate.thresholdTokens T = 2,048)")
    assert "the decision: measure gate.thresholdTokens 2,048 itself" in reasons[2048]
    added = [p for p in points if p.tokens not in (2048, 2049) and p.added_because]
    assert added and all("break-even" in (p.added_because or "") for p in added)
    assert all(p.tokens % 8 == 0 for p in added) and len(added) <= 4
    assert [p.tokens for p in seen] == measured0  # streamed as measured, reasons included
    be = break_even_tokens([point_from_result(p) for p in points])
    assert be is not None and be.lower_tokens is not None
    assert be.lower_tokens < 300 <= be.upper_tokens
    assert be.upper_tokens - be.lower_tokens <= max(0.2 * be.tokens, 8)
    assert plans[-1] == []  # it stopped because the planner had nothing left, not on a cap

    # rank 1: no points of its own; it measures what rank 0's broadcasts say, in the same order
    measured1: list[int] = []
    replay = iter(plans)

    def measure1(counts: list[int]) -> None:
        measured1.extend(counts)

    def broadcast1(plan: list[tuple[int, str]] | None) -> list[tuple[int, str]]:
        assert plan is None  # only rank 0 plans
        return next(replay)

    assert adaptive_sweep(SPEC, measure1, broadcast1) is None
    assert measured1 == measured0


def test_caps_stop_the_loop() -> None:
    spec = SPEC.model_copy(update={"sweep": SPEC.sweep.model_copy(update={
        "refine": SPEC.sweep.refine.model_copy(update={"max_added_points": 1})})})  # type: ignore[union-attr]
    points = adaptive_sweep(spec, lambda c: [synthetic(t) for t in c], lambda p: list(p or []))
    assert points is not None
    assert sum(1 for p in points if p.added_because and not p.added_because.startswith("off-alignment")) == 1


@pytest.mark.parametrize(("off_alignment", "threshold", "extra"), [
    (True, 2048, [2049, 4097]),  # T + 1 and 2T + 1, each up to the largest listed count
    (True, 3072, [3073, 6145]),  # a threshold that is not a power of two
    (True, 16384, []),  # above the largest listed count: nothing to add
    (False, 2048, []),  # sweep.offAlignment false
])
def test_without_refine_the_sweep_measures_the_listed_and_the_off_alignment_counts(
        off_alignment: bool, threshold: int, extra: list[int]) -> None:
    spec = ExperimentSpec.model_validate({"sweep": {"tokens": [1024, 2048, 8192], "offAlignment": off_alignment},
                                          "gate": {"thresholdTokens": threshold}})
    measured: list[int] = []

    def measure(counts: list[int]) -> list[PointResult]:
        measured.extend(counts)
        return [synthetic(t) for t in counts]

    points = adaptive_sweep(spec, measure, lambda p: list(p or []))
    assert measured == [1024, 2048, 8192, *extra]
    assert points is not None and [p.tokens for p in points] == sorted(measured)  # strictly increasing
    assert [p.tokens for p in points if p.added_because] == extra
