"""What an eager step's time says about the split: the step effect per layer against the per-op Δg and Δh. Pure.

In an asynchronous CUDA queue, replacing one op in every layer changes the step's time by the op's
GPU difference Δg (split − replicated span) while the GPU is the bottleneck, by its host difference Δh
(split − replicated issue time) while the host is, and by something between at the pivot
(docs/kernel-benchmark.md "The step as a queue, measured"). :func:`paired_effect` turns alternating
step samples into the effect per layer with a paired bootstrap interval (rounds resampled: spx's one
bootstrap, :func:`spx.analysis.stats.bootstrap`); :func:`regime_of` places an effect between Δg and Δh
(spx's one regime rule, :func:`spx.analysis.regimes.match_regime`). Used by ``benchmarks/eager_step.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spx.analysis.regimes import match_regime, regime_position
from spx.analysis.stats import bootstrap
from spx.api.step import StepRegime


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
    iv = bootstrap([diffs], statistics.median, paired=True, seed=seed)
    return Effect(iv.value, iv.low, iv.high, len(diffs))


def regime_of(effect: float, dg: float, dh: float) -> tuple[StepRegime, float | None]:
    """Which per-op difference a step effect matches, and where it lies between them (µs per layer).

    Returns ``(label, position)``: the label of spx's one regime rule on the point estimate
    (:func:`spx.analysis.regimes.match_regime`: ``gpu-bound`` near Δg, ``host-bound`` near Δh, ``between``
    at the pivot, ``undetermined`` when Δg = Δh) and ``position = (effect − Δg) / (Δh − Δg)`` (0 at Δg, 1 at
    Δh; None when Δg = Δh).
    """
    return match_regime(effect, dg, dh), regime_position(effect, dg, dh)
