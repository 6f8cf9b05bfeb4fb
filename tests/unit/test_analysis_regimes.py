"""Δg and Δh per point and the sweep seen in each regime (spx.analysis.regimes)."""

import pytest

from spx.analysis.regimes import (
    GPU_BOUND,
    HOST_BOUND,
    has_host_regime,
    host_view,
    match_regime,
    point_deltas,
    regime_delta,
    regime_position,
)
from spx.api.result import CandidateStats, PointResult
from spx.api.status import KernelPoint


def _stats(span: list[float], host: list[float]) -> CandidateStats:
    s = sorted(span)
    return CandidateStats(samples_us=span, median_us=s[len(s) // 2], q1_us=s[0], q3_us=s[-1], iqr_pct=1.0,
                          host_samples_us=host)


def _result(rep: CandidateStats, split: CandidateStats, execution: str = "eager") -> PointResult:
    return PointResult(tokens=2048, padded_tokens=2048, rows_per_rank=256, replicated=rep, split=split,
                       gather_source="measured", max_abs_error=0.0, execution=execution)  # type: ignore[arg-type]


def test_deltas_are_split_minus_replicated_with_a_paired_interval_per_round() -> None:
    # GPU: the split is 20 µs shorter in every round (drift shared by both): Δg = −20 exactly, zero width;
    # host: the split issues 25…35 µs later, so Δh ≈ +30 with an interval inside [25, 35] that excludes 0
    rep = _stats([100.0, 110.0, 120.0, 130.0, 140.0], [70.0, 72.0, 250.0, 71.0, 73.0])
    split = _stats([80.0, 90.0, 100.0, 110.0, 120.0], [100.0, 97.0, 285.0, 101.0, 98.0])
    d = point_deltas(_result(rep, split))
    assert (d["gpu_delta_us"], d["gpu_delta_low_us"], d["gpu_delta_high_us"]) == (-20.0, -20.0, -20.0)
    assert d["host_delta_us"] == pytest.approx(100.0 - 72.0)  # medians: 100 and 72
    assert 0 < d["host_delta_low_us"] <= d["host_delta_us"] <= d["host_delta_high_us"] <= 35.0


def test_a_graph_point_has_one_figure_and_a_point_without_host_samples_no_host_delta() -> None:
    rep = _stats([100.0, 101.0, 102.0], [70.0, 71.0, 72.0])
    split = _stats([80.0, 81.0, 82.0], [100.0, 101.0, 102.0])
    assert "host_delta_us" not in point_deltas(_result(rep, split, "graph"))
    assert "host_delta_us" not in point_deltas(_result(_stats([1.0, 2.0], []), _stats([1.0, 2.0], [])))


def _point(tokens: int, rep: float, split: float, dh: float | None, execution: str = "eager") -> KernelPoint:
    host = {} if dh is None else {"replicated_host_us": 70.0, "split_host_us": 70.0 + dh, "host_delta_us": dh,
                                  "host_delta_low_us": dh - 5, "host_delta_high_us": dh + 5}
    return KernelPoint(tokens=tokens, rows_per_rank=tokens // 8, replicated_us=rep, split_us=split,
                       speedup=rep / split, max_abs_error=0.0, execution=execution,  # type: ignore[arg-type]
                       gpu_delta_us=split - rep, **host)  # type: ignore[arg-type]


def test_host_view_judges_host_issue_times_and_keeps_graph_points() -> None:
    eager = host_view(_point(4096, 110.0, 45.0, 30.0))
    assert (eager.replicated_us, eager.split_us) == (70.0, 100.0)
    assert eager.speedup == pytest.approx(0.7) and eager.decided  # Δh ∈ [25, 35]: excludes 0
    assert eager.speedup_low == pytest.approx(70 / 105) and eager.speedup_high == pytest.approx(70 / 95)
    assert host_view(_point(4096, 110.0, 45.0, 3.0)).decided is False  # Δh ∈ [−2, 8]: straddles 0
    graph = _point(256, 20.0, 25.0, None, "graph")
    assert host_view(graph) == graph
    assert regime_delta(graph, HOST_BOUND) == regime_delta(graph, GPU_BOUND)  # one figure for a graph
    assert regime_delta(eager, HOST_BOUND).value == 30.0  # type: ignore[union-attr]
    assert regime_delta(eager, GPU_BOUND).value == -65.0  # type: ignore[union-attr]


def test_the_host_regime_needs_every_eager_point_to_carry_delta_h() -> None:
    assert has_host_regime([_point(256, 20, 25, None, "graph"), _point(4096, 110, 45, 30)])
    assert not has_host_regime([_point(256, 20, 25, None, "graph")])  # all graph: one regime
    assert not has_host_regime([_point(2048, 60, 35, None), _point(4096, 110, 45, 30)])  # an old result's point


# --------------------------------------------------------------------------- the one regime rule

@pytest.mark.parametrize(("effect", "gpu", "host", "low", "high", "expected"), [
    (-20.0, -20.0, 15.0, -25.0, -15.0, "gpu-bound"),      # the interval covers Δg only
    (14.0, -20.0, 15.0, 10.0, 18.0, "host-bound"),        # Δh only
    (0.0, -20.0, 15.0, -30.0, 20.0, "undetermined"),      # both: the step cannot tell them apart
    (-2.0, -20.0, 15.0, -4.0, 0.0, "between"),            # neither, mid-way: the pivot
    (-14.0, -20.0, 15.0, -15.0, -13.0, "gpu-bound"),      # neither, within a quarter of the way from Δg
    (40.0, -20.0, 15.0, 35.0, 45.0, "host-bound"),        # beyond Δh: the host's difference and more
    (-30.0, -20.0, 15.0, None, None, "gpu-bound"),        # a point estimate alone: beyond Δg
    (-2.0, None, 15.0, -4.0, 0.0, "undetermined"),        # no kernel Δ to compare with
    (3.0, 5.0, 5.0, None, None, "undetermined"),          # Δg = Δh
])
def test_match_regime(effect: float, gpu: float | None, host: float | None, low: float | None, high: float | None,
                      expected: str) -> None:
    assert match_regime(effect, gpu, host, low, high) == expected


def test_regime_position() -> None:
    assert regime_position(-5.0, -40.0, 30.0) == pytest.approx(0.5) and regime_position(1.0, 2.0, 2.0) is None
