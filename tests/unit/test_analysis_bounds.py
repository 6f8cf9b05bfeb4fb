"""GPU-bound vs host-bound: effective times, and the verdict when the bounds disagree (spx.analysis.bounds)."""

import pytest

from spx.analysis.bounds import combine_bounds, host_bound_fields, host_bound_view
from spx.analysis.summary import evaluate
from spx.api import GateSpec
from spx.api.result import CandidateStats
from spx.api.status import KernelPoint


@pytest.mark.parametrize(
    ("gpu", "host", "gpu_rec", "host_rec", "verdict", "rests_on", "says"),
    [
        ("Pass", None, 1024, None, "Pass", "gpu-bound", "no host times"),
        ("Fail", None, None, None, "Fail", "gpu-bound", "no host times"),
        ("Pass", "Pass", 1024, 2048, "Pass", "both", "agree"),  # both at or below 2048
        ("Fail", "Fail", 4096, 8192, "Fail", "both", "agree"),  # both above
        ("Pass", "Fail", 1024, 4096, "Inconclusive", "both", "disagree about the side of thresholdTokens 2048"),
        ("Pass", "Inconclusive", 1024, None, "Inconclusive", "both", "host-bound none (no threshold)"),
        ("Pass", "Inconclusive", 1024, 2048, "Inconclusive", "both", "judged Pass and the host-bound case Inconclusive"),
        ("Fail", "Fail", 1024, None, "Fail", "both", "agree"),  # a correctness Fail stays a Fail
        ("Inconclusive", "Pass", 4096, 2048, "Inconclusive", "both", "(above)"),
    ],
)
def test_combine_bounds(gpu, host, gpu_rec, host_rec, verdict, rests_on, says):
    out = combine_bounds(gpu, host, gpu_rec, host_rec, 2048)
    assert (out.verdict, out.rests_on) == (verdict, rests_on)
    assert says in out.reasons[0]


def _stats(span, host):
    return CandidateStats(samples_us=span, median_us=sorted(span)[len(span) // 2], q1_us=min(span), q3_us=max(span),
                          iqr_pct=1.0, host_samples_us=host)


def test_host_bound_is_the_per_sample_max_of_host_and_span():
    rep = _stats([50.0, 52.0, 51.0], [90.0, 30.0, 95.0])  # max: 90, 52, 95
    split = _stats([20.0, 21.0, 22.0], [120.0, 130.0, 125.0])
    f = host_bound_fields(rep, split)
    assert f["replicated_host_bound_us"] == 90.0 and f["split_host_bound_us"] == 125.0
    assert f["replicated_host_us"] == 90.0 and f["split_host_us"] == 125.0
    assert f["host_bound_decided"] is True
    assert host_bound_fields(_stats([1.0], []), split) == {}


def _point(tokens, rep, split, rep_host, split_host):
    return KernelPoint(tokens=tokens, rows_per_rank=tokens // 8, replicated_us=rep, split_us=split, speedup=rep / split,
                       max_abs_error=0.0, replicated_host_bound_us=max(rep, rep_host),
                       split_host_bound_us=max(split, split_host), host_bound_decided=True)


def test_host_bound_view_swaps_in_the_effective_times():
    view = host_bound_view(_point(2048, 60.0, 30.0, 80.0, 110.0))
    assert (view.replicated_us, view.split_us) == (80.0, 110.0)
    assert view.speedup == pytest.approx(80 / 110)
    with pytest.raises(ValueError, match="no host-bound times"):
        host_bound_view(KernelPoint(tokens=8, rows_per_rank=1, replicated_us=1.0, split_us=1.0, speedup=1.0))


def test_evaluate_is_inconclusive_when_gpu_bound_passes_and_host_bound_fails():
    # GPU-bound: the split wins from 1024 tokens; host-bound: the split's extra launches keep it behind until 8192
    points = [
        _point(512, 20.0, 25.0, 60.0, 100.0),
        _point(1024, 40.0, 30.0, 60.0, 100.0),
        _point(2048, 60.0, 35.0, 70.0, 100.0),
        _point(4096, 110.0, 45.0, 110.0, 100.0),
        _point(8192, 210.0, 70.0, 210.0, 100.0),
    ]
    ev = evaluate(points, GateSpec(thresholdTokens=2048, minSpeedupAtOrAboveThreshold=1.0), "measured", 8,
                  gemm_backend="humming", timer="cupti", device="cuda")
    assert ev.kernel.recommended_threshold_tokens == 1024
    assert ev.kernel.host_bound is not None
    assert ev.kernel.host_bound.recommended_threshold_tokens == 4096 and ev.kernel.host_bound.verdict == "Fail"
    assert ev.verdict == "Inconclusive" and ev.kernel.verdict_bound == "both"
    assert "disagree about the side of thresholdTokens 2048" in ev.reasons[0]
    assert any(r.startswith("host-bound: ") for r in ev.reasons)
