"""GPU-bound and host-bound effective times, and the verdict when the two bounds disagree.

An eagerly run layer (vLLM above its CUDA-graph capture limit) costs, per candidate, the GPU span
when the GPU is the bottleneck (*GPU-bound*: the host issues ahead of it) and ``max(host issue time,
GPU span)`` when the host is (*host-bound*: the GPU waits for each launch). Which one holds in a
serving step depends on what else the step queues, so spx reports both and the verdict says which one
it rests on:

- no host times (results from before they were measured): the GPU-bound verdict, resting on it;
- both bounds Fail (e.g. on correctness, which no bound changes): Fail;
- the recommended thresholds lie on different sides of ``gate.thresholdTokens`` (one at or below it,
  the other above it or absent): **Inconclusive**, the bounds disagree about the gate's side;
- both bounds reach the same verdict: that verdict, resting on both;
- otherwise the verdicts differ (e.g. Pass and Fail on speed): **Inconclusive**, naming both.

Pure; table-tested in ``tests/unit/test_analysis_bounds.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spx.analysis.crossover import decided_from_quartiles, speedup
from spx.analysis.stats import quartiles
from spx.api.result import CandidateStats
from spx.api.status import KernelPoint, Verdict

GPU_BOUND = "gpu-bound"
HOST_BOUND = "host-bound"
BOTH = "both"


def host_bound_samples(stats: CandidateStats) -> list[float]:
    """Per-sample ``max(host issue µs, GPU span µs)`` of one candidate; empty without host samples.

    Samples are paired by index (sample i of the host pass with sample i of the span pass: both are
    the i-th launch of that candidate in the same alternating order).
    """
    if not stats.host_samples_us:
        return []
    return [max(h, s) for h, s in zip(stats.host_samples_us, stats.samples_us, strict=False)]


def host_bound_fields(replicated: CandidateStats, split: CandidateStats) -> dict[str, object]:
    """The :class:`KernelPoint` host fields of a point's two candidates (empty without host samples)."""
    rep, spl = host_bound_samples(replicated), host_bound_samples(split)
    if not rep or not spl:
        return {}
    r1, r2, r3 = quartiles(rep)
    s1, s2, s3 = quartiles(spl)
    if r2 <= 0 or s2 <= 0:
        return {}
    return {
        "replicated_host_us": statistics.median(replicated.host_samples_us),
        "split_host_us": statistics.median(split.host_samples_us),
        "replicated_host_bound_us": r2,
        "split_host_bound_us": s2,
        "host_bound_decided": decided_from_quartiles(r1, r3, s1, s3),
    }


def has_host_times(points: Iterable[KernelPoint]) -> bool:
    """True when every point carries host-bound effective times (and there is at least one point)."""
    pts = list(points)
    return bool(pts) and all(p.replicated_host_bound_us and p.split_host_bound_us for p in pts)


def host_bound_view(point: KernelPoint) -> KernelPoint:
    """``point`` with its host-bound effective times as the candidates' times (speedup and decided too).

    Raises:
        ValueError: the point has no host-bound times.
    """
    rep, split = point.replicated_host_bound_us, point.split_host_bound_us
    if not rep or not split:
        raise ValueError(f"the point at {point.tokens} tokens has no host-bound times")
    return point.model_copy(update={
        "replicated_us": rep,
        "split_us": split,
        "speedup": speedup(rep, split),
        "decided": bool(point.host_bound_decided) if point.host_bound_decided is not None else True,
        "replicated_iqr_pct": 0.0,
        "split_iqr_pct": 0.0,
        "iqr_pct": 0.0,
    })


def host_bound_points(points: Sequence[KernelPoint]) -> list[KernelPoint]:
    """:func:`host_bound_view` of every point.

    Raises:
        ValueError: a point without host-bound times.
    """
    return [host_bound_view(p) for p in points]


def _side(recommended: int | None, threshold_tokens: int) -> str:
    if recommended is None:
        return "no threshold"
    return "at or below" if recommended <= threshold_tokens else "above"


@dataclass(frozen=True)
class BoundsVerdict:
    """:func:`combine_bounds`' outcome: the verdict, what it rests on, and the reasons it adds (first)."""

    verdict: Verdict
    rests_on: str
    reasons: tuple[str, ...]


def combine_bounds(
    gpu_verdict: Verdict,
    host_verdict: Verdict | None,
    gpu_recommended: int | None,
    host_recommended: int | None,
    threshold_tokens: int,
) -> BoundsVerdict:
    """The verdict over both bounds (rules in the module docstring).

    Args:
        gpu_verdict / host_verdict: the gate verdicts of the GPU-bound and host-bound points
            (``host_verdict`` ``None``: no host times).
        gpu_recommended / host_recommended: the recommended thresholds (tokens; ``None``: no crossover).
        threshold_tokens: ``gate.thresholdTokens``.
    """
    if host_verdict is None:
        return BoundsVerdict(gpu_verdict, GPU_BOUND, ("the verdict rests on the GPU-bound times (no host times measured)",))
    gpu_side, host_side = _side(gpu_recommended, threshold_tokens), _side(host_recommended, threshold_tokens)
    both_fail = gpu_verdict == host_verdict == "Fail"  # e.g. the outputs differ: no bound can pass that
    if gpu_side != host_side and not both_fail:
        return BoundsVerdict("Inconclusive", BOTH, (
            f"the GPU-bound and host-bound cases disagree about the side of thresholdTokens {threshold_tokens}: "
            f"GPU-bound recommended threshold {gpu_recommended if gpu_recommended is not None else 'none'} "
            f"({gpu_side}), host-bound {host_recommended if host_recommended is not None else 'none'} ({host_side}); "
            "the speed verdict depends on whether the layer is GPU- or host-bound in the serving step",
        ))
    if gpu_verdict == host_verdict:
        return BoundsVerdict(gpu_verdict, BOTH, (f"GPU-bound and host-bound cases agree: {gpu_verdict}",))
    return BoundsVerdict("Inconclusive", BOTH, (
        f"the GPU-bound case is judged {gpu_verdict} and the host-bound case {host_verdict}: the speed verdict "
        "depends on whether the layer is GPU- or host-bound in the serving step",
    ))
