"""The split's GPU and host differences per point (Δg, Δh) and the sweep seen in each regime.

An eager step is a queue (:mod:`spx.research.queue`; docs/kernel-benchmark.md, "Regimes"): replacing the
replicated projection by the split moves the step by the split's **GPU difference** Δg (split −
replicated GPU span) while the GPU is the bottleneck (*gpu-bound*), by its **host difference** Δh (split
− replicated host issue time) while the host is (*host-bound*), and by something between at the pivot —
never by the difference of the per-op ``max(host, span)``, which describes no regime. So each point
carries both differences with their 95 % intervals, and the sweep is judged once per regime with the
same threshold rule:

- **gpu-bound**: the points as measured (GPU spans);
- **host-bound** (:func:`host_view`): each eager point's candidates replaced by their host issue times
  (speed-up ``replicated host / split host``, interval from Δh's); a graph point keeps its GPU span
  (the whole forward is one CUDA graph in vLLM, whose host cost does not depend on its contents:
  host-bound = GPU-bound there).

Intervals (:func:`point_deltas`): the paired bootstrap over rounds
(:func:`spx.analysis.interval.bootstrap_difference`: sample ``i`` of both candidates come from round
``i``); with a modelled gather Δg is widened by the gather prior's own band (as the speed-up's
``own`` interval, :func:`spx.analysis.interval.point_interval`). Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spx.analysis.interval import DTYPE_BYTES, DeltaInterval, bootstrap_difference, gather_band_us
from spx.api.result import CandidateStats, PointResult
from spx.api.spec import ExperimentSpec
from spx.api.status import KernelPoint, KernelRegime
from spx.api.step import StepRegime

GPU_BOUND: KernelRegime = "gpu-bound"
HOST_BOUND: KernelRegime = "host-bound"
#: A step effect that covers neither Δg nor Δh is said to match the one it lies within this fraction of
#: |Δh − Δg| of (or beyond); between: the pivot (:func:`match_regime`).
MATCH_FRACTION = 0.25


def regime_position(effect: float, gpu: float, host: float) -> float | None:
    """Where ``effect`` lies between Δg and Δh: ``(effect − Δg) / (Δh − Δg)`` (0 at Δg, 1 at Δh; None when
    Δg = Δh). All in one unit (µs per layer)."""
    return None if host == gpu else (effect - gpu) / (host - gpu)


def match_regime(effect: float, gpu: float | None, host: float | None, low: float | None = None,
                 high: float | None = None) -> StepRegime:
    """Which kernel regime a measured step effect matches: spx's one rule (all µs per layer).

    ``gpu``/``host`` are the kernel's Δg and Δh at the length; ``[low, high]`` the effect's interval (a point
    estimate alone: ``low = high = effect``). In order:

    1. Δg or Δh unknown, Δg = Δh, or an interval covering both → ``undetermined`` (the step cannot tell them
       apart);
    2. an interval covering Δg only → ``gpu-bound``; Δh only → ``host-bound``;
    3. otherwise by :func:`regime_position` ``p``: ``p ≤`` :data:`MATCH_FRACTION` → ``gpu-bound`` (at Δg, or
       beyond it), ``p ≥ 1 −`` :data:`MATCH_FRACTION` → ``host-bound``, else ``between`` (the pivot: the step
       is host-bound in some segments, GPU-bound in others; docs/kernel-benchmark.md, "Regimes").
    """
    lo = effect if low is None else low
    hi = effect if high is None else high
    if gpu is None or host is None or gpu == host:
        return "undetermined"
    cover_g, cover_h = lo <= gpu <= hi, lo <= host <= hi
    if cover_g and cover_h:
        return "undetermined"
    if cover_g or cover_h:
        return "gpu-bound" if cover_g else "host-bound"
    p = regime_position(effect, gpu, host)
    assert p is not None  # gpu != host
    if p <= MATCH_FRACTION:
        return "gpu-bound"
    return "host-bound" if p >= 1 - MATCH_FRACTION else "between"


def _delta(rep: Sequence[float], split: Sequence[float], seed: int) -> DeltaInterval | None:
    usable = rep and split and all(math.isfinite(v) and v >= 0 for v in (*rep, *split))
    return bootstrap_difference(rep, split, seed=seed) if usable else None


def point_deltas(point: PointResult, spec: ExperimentSpec | None = None) -> dict[str, float]:
    """The :class:`~spx.api.status.KernelPoint` Δ fields of one result point (µs per call = per layer).

    ``gpu_delta_us`` (+ ``_low``/``_high``) from the GPU-span samples (without samples: the medians'
    difference, zero width); ``host_delta_us`` (+ ends) only for an eager point whose both candidates
    carry host samples. With ``spec`` and a modelled gather, Δg's interval is widened by the used
    prior's own band (the split time moves with the gather, the replicated one does not).
    """
    rep, split = point.replicated, point.split
    out: dict[str, float] = {}
    g = _delta(rep.samples_us, split.samples_us, point.tokens)
    if g is None:
        d = split.median_us - rep.median_us
        g = DeltaInterval(d, d, d)
    lo, hi = g.low, g.high
    tp = spec.parallelism.tensor_parallel_size if spec is not None else 1
    if spec is not None and point.gather_source == "modelled" and point.gather_us is not None and tp > 1:
        band = gather_band_us(point.padded_tokens, spec.projection.output_size,
                              DTYPE_BYTES.get(spec.projection.activation_dtype, 2), tp, spec.kernel.gather_model)
        lo -= max(0.0, point.gather_us - band.own_low_us)
        hi += max(0.0, band.own_high_us - point.gather_us)
    out.update(gpu_delta_us=g.value, gpu_delta_low_us=lo, gpu_delta_high_us=hi)
    if point.execution != "graph":
        h = _delta(rep.host_samples_us, split.host_samples_us, point.tokens + 1)
        if h is not None:
            out.update(host_delta_us=h.value, host_delta_low_us=h.low, host_delta_high_us=h.high)
    return out


def host_medians(replicated: CandidateStats, split: CandidateStats) -> dict[str, float]:
    """``replicated_host_us`` / ``split_host_us`` (medians of the host samples); empty without them."""
    if not replicated.host_samples_us or not split.host_samples_us:
        return {}
    return {"replicated_host_us": statistics.median(replicated.host_samples_us),
            "split_host_us": statistics.median(split.host_samples_us)}


def has_host_regime(points: Iterable[KernelPoint]) -> bool:
    """True when there is an eager point and every eager point carries Δh and both host medians.

    Results from before host times were measured, and all-graph sweeps, have one regime (gpu-bound).
    """
    eager = [p for p in points if p.execution != "graph"]
    return bool(eager) and all(
        p.host_delta_us is not None and p.replicated_host_us and p.split_host_us for p in eager)


def _ratio(rep: float, split: float) -> float:
    return rep / split if split > 0 else math.inf


def host_view(point: KernelPoint) -> KernelPoint:
    """``point`` in the host-bound regime (module docstring); a graph point or one without Δh unchanged.

    Times become the host medians, ``speedup`` their ratio, the speed-up interval
    ``rep / (rep + Δh_high) … rep / (rep + Δh_low)`` (the replicated median held fixed: the same side of
    1.0 as Δh's interval of 0), ``decided`` whether Δh's interval excludes 0; the IQRs are not known.
    """
    rep, split, d = point.replicated_host_us, point.split_host_us, point.host_delta_us
    if point.execution == "graph" or not rep or not split or d is None:
        return point
    lo = point.host_delta_low_us if point.host_delta_low_us is not None else d
    hi = point.host_delta_high_us if point.host_delta_high_us is not None else d
    s_lo, s_hi = _ratio(rep, rep + hi), _ratio(rep, rep + lo)
    s_lo = max(s_lo, 1e-9)
    return point.model_copy(update={
        "replicated_us": rep, "split_us": split, "speedup": _ratio(rep, split),
        "decided": not (lo <= 0.0 <= hi),
        "speedup_low": s_lo, "speedup_high": s_hi, "speedup_low_any_prior": s_lo, "speedup_high_any_prior": s_hi,
        "replicated_iqr_pct": 0.0, "split_iqr_pct": 0.0, "iqr_pct": 0.0,
    })


def regime_points(points: Sequence[KernelPoint], regime: KernelRegime) -> list[KernelPoint]:
    """The points as seen in ``regime`` (gpu-bound: unchanged; host-bound: :func:`host_view` of each)."""
    return list(points) if regime == GPU_BOUND else [host_view(p) for p in points]


@dataclass(frozen=True)
class RegimeDelta:
    """A point's difference in one regime, µs per layer (negative: the split saves), and its interval."""

    tokens: int
    value: float
    low: float
    high: float


def regime_delta(point: KernelPoint, regime: KernelRegime) -> RegimeDelta | None:
    """Δg (gpu-bound, or any graph point) or Δh (host-bound, eager) of a point; ``None`` when not measured."""
    if regime == HOST_BOUND and point.execution != "graph":
        v, lo, hi = point.host_delta_us, point.host_delta_low_us, point.host_delta_high_us
    else:
        v, lo, hi = point.gpu_delta_us, point.gpu_delta_low_us, point.gpu_delta_high_us
        if v is None:  # a point built from medians only (a table): the medians' difference, no interval
            v = point.split_us - point.replicated_us
    if v is None:
        return None
    return RegimeDelta(point.tokens, v, lo if lo is not None else v, hi if hi is not None else v)
