"""What an eager step's time says about the split: the step effect per layer against the per-op Δg and Δh. Pure.

In an asynchronous CUDA queue, replacing one op in every layer changes the step's time by the op's
GPU difference Δg (split − replicated span) while the GPU is the bottleneck, by its host difference Δh
(split − replicated issue time) while the host is, and by something between at the pivot
(docs/kernel-benchmark.md "The step as a queue, measured"). :func:`paired_effect` turns alternating
step samples into the effect per layer with a paired bootstrap interval (rounds resampled, as
:mod:`spx.analysis.interval` does for the speed-up); :func:`regime_of` places an effect between Δg
and Δh. Used by ``benchmarks/eager_step.py``.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Bootstrap resamples and level of every interval here.
RESAMPLES = 1000
LEVEL = 0.95
#: An effect within this fraction of |Δh − Δg| of one end is said to match it; between: the pivot.
MATCH_FRACTION = 0.25


@dataclass(frozen=True)
class Effect:
    """A difference (µs) and its interval ``low ≤ value ≤ high`` (median of paired differences; bootstrap)."""

    value: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        """``{"value", "low", "high", "n"}`` rounded to 0.01 µs, for JSON."""
        return {"value": round(self.value, 2), "low": round(self.low, 2), "high": round(self.high, 2), "n": self.n}


def _quantile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def paired_effect(replicated: Sequence[float], split: Sequence[float], per: float = 1.0, seed: int = 0) -> Effect:
    """Median over rounds of ``(split[i] − replicated[i]) / per`` and its percentile bootstrap interval.

    ``replicated[i]`` and ``split[i]`` come from the same round (alternating order, so a drift shared
    by both stays paired). ``per`` divides (e.g. the layers of a step: the effect per layer).
    Deterministic (``seed``).

    Raises:
        ValueError: the two sequences differ in length or are empty, or ``per <= 0``.
    """
    if len(replicated) != len(split) or not replicated:
        raise ValueError(f"need paired samples of equal, non-zero length; got {len(replicated)} and {len(split)}")
    if per <= 0:
        raise ValueError(f"per must be > 0, got {per}")
    diffs = [(s - r) / per for r, s in zip(replicated, split, strict=True)]
    value = statistics.median(diffs)
    rng = random.Random(seed)
    boots = [statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(RESAMPLES)]
    low, high = _quantile(boots, (1 - LEVEL) / 2), _quantile(boots, (1 + LEVEL) / 2)
    return Effect(value, min(low, value), max(high, value), len(diffs))


def regime_of(effect: float, dg: float, dh: float) -> tuple[str, float | None]:
    """Which per-op difference a step effect matches, and where it lies between them.

    Returns ``(label, position)``: ``position = (effect − Δg) / (Δh − Δg)`` (0 at Δg, 1 at Δh; None when
    Δg = Δh), label ``Δg`` (GPU-bound: position ≤ :data:`MATCH_FRACTION`), ``Δh`` (host-bound: ≥ 1 −
    :data:`MATCH_FRACTION`) or ``pivot`` between. All in µs per layer.
    """
    if dh == dg:
        return "Δg=Δh", None
    position = (effect - dg) / (dh - dg)
    if position <= MATCH_FRACTION:
        return "Δg", position
    if position >= 1 - MATCH_FRACTION:
        return "Δh", position
    return "pivot", position
