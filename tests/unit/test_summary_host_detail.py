"""The pod's bounded summary with eager points (host times): host detail goes last, the points stay."""

from __future__ import annotations

from pathlib import Path

from spx.analysis import judge, points_from_result
from spx.analysis.regimes import has_host_regime
from spx.api import SUMMARY_MAX_BYTES, KernelResult, ResultSummary
from spx.api.wire import build_summary

RESULT = Path(__file__).resolve().parents[2] / "examples" / "results" / "h200-1gpu-eager" / "humming-auto-1" / "result.json"


def test_a_full_h200_sweep_fits_and_a_short_one_keeps_its_host_regime() -> None:
    result = KernelResult.model_validate_json(RESULT.read_text())
    points = points_from_result(result)
    eager = [p for p in points if p.execution == "eager"]
    assert len(points) == 17 and eager and all(p.host_delta_us is not None for p in eager)
    assert all(p.host_delta_us is None and p.gpu_delta_us is not None for p in points if p.execution == "graph")
    full = ResultSummary.model_validate_json(text := build_summary(result, points))
    assert len(text.encode()) <= SUMMARY_MAX_BYTES
    assert [p.tokens for p in full.points] == [p.tokens for p in points]  # every point kept
    # the IQRs and Δh's interval went, the host regime stayed: the summary is judged like the result
    assert has_host_regime(full.points) and all(p.iqr_pct == 0.0 for p in full.points)
    spec = result.spec
    by_result, by_summary = judge(result, spec), judge(full, spec)
    assert by_result.kernel is not None and by_summary.kernel is not None
    assert (by_summary.verdict, by_summary.kernel.decided_by) == (by_result.verdict, by_result.kernel.decided_by)
    assert [r.speed_verdict for r in by_summary.kernel.regimes] == [r.speed_verdict for r in by_result.kernel.regimes]
    short_points = points[-8:]
    short = ResultSummary.model_validate_json(build_summary(result, short_points))
    assert has_host_regime(short.points)  # Δh and the host medians survive: the host regime is judged alike
    assert all(p.host_delta_low_us is not None for p in short.points)
    assert [p.execution for p in short.points] == ["eager"] * 8
