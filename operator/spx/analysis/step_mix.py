"""The batch mix: how the sizes a deployment forms weigh the split's effect at each measured length. Pure.

vLLM 0.33's ``sp_shard`` pads the whole hidden state (``F.pad``) whenever a batch of ``M`` tokens is not a
multiple of TP — 7 of every 8 sizes at TP 8 — so the split's effect has two curves over ``M``: the aligned one
(``M % TP == 0``) and the off-aligned one (the pad path). The expected effect of splitting from a threshold
``T`` is the mean of the effect over the batch sizes ``T ≤ M ≤ max_num_batched_tokens`` the deployment forms,
weighted by how often it forms each:

- **uniform** (default): every size equally likely, so a share ``(TP − 1)/TP`` takes the pad path (exactly:
  the count of off-aligned integers in the range over all of them);
- **given**: buckets ``(previous le, le]`` with a weight each (vLLM's ``vllm:iteration_tokens_total``
  histogram, per bucket — not cumulative), every size within a bucket equally likely.

Each size's effect is interpolated linearly in ``M`` between the measured lengths *of its own class* (aligned
sizes from the aligned lengths, off-aligned from the off-aligned ones), constant beyond the class's smallest
and largest measured lengths. The expectation is then a fixed linear combination of the per-length effects
(:func:`expectation_weights`): its coefficients are computed once in closed form (sums of ``M`` over each
class in each interpolation segment, no loop over sizes), so a bootstrap replicate of the expectation is the
same combination of the replicates of the per-length effects. Nothing above ``max_num_batched_tokens``
enters: the deployment never forms such a batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from spx.api.step import BatchMixBucket
from spx.api.step_checks import Segment, coverage_problems, segments


@dataclass(frozen=True)
class MixWeights:
    """The expectation at one threshold as a linear combination of per-length effects.

    ``coefficients[L]`` sums to 1 over the measured lengths; ``pad_path_share`` is the weighted share of sizes
    with ``M % TP != 0``; ``mix`` says where the weights came from.
    """

    coefficients: dict[int, float]
    pad_path_share: float
    mix: Literal["uniform", "given"]

    def combine(self, effects: Mapping[int, float]) -> float:
        """``Σ coefficients[L] × effects[L]`` (every length with a coefficient must be in ``effects``)."""
        return sum(c * effects[length] for length, c in self.coefficients.items())


def _count_sum(lo: int, hi: int, tp: int, aligned: bool) -> tuple[int, int]:
    """``(count, sum)`` of the integers ``lo ≤ M ≤ hi`` of one class (aligned: ``M % tp == 0``; else the rest)."""
    if hi < lo:
        return 0, 0
    k0, k1 = -(-lo // tp), hi // tp
    n_al = max(0, k1 - k0 + 1)
    s_al = tp * (k0 + k1) * n_al // 2
    if aligned:
        return n_al, s_al
    n_all = hi - lo + 1
    return n_all - n_al, (lo + hi) * n_all // 2 - s_al


def _class_coefficients(points: Sequence[int], segs: Sequence[Segment], tp: int, aligned: bool,
                        out: dict[int, float]) -> float:
    """Add one class's (unnormalised) coefficients to ``out``; return the class's total weight."""
    total = 0.0
    for lo, hi, dens in segs:
        n, _ = _count_sum(lo, hi, tp, aligned)
        total += dens * n
        if n == 0 or not points:
            continue
        first, last = points[0], points[-1]
        below, _ = _count_sum(lo, min(hi, first), tp, aligned)
        above, _ = _count_sum(max(lo, last + 1), hi, tp, aligned)
        out[first] = out.get(first, 0.0) + dens * below
        out[last] = out.get(last, 0.0) + dens * above
        for x0, x1 in zip(points, points[1:], strict=False):
            cnt, s = _count_sum(max(lo, x0 + 1), min(hi, x1), tp, aligned)
            if cnt:
                out[x0] = out.get(x0, 0.0) + dens * (x1 * cnt - s) / (x1 - x0)
                out[x1] = out.get(x1, 0.0) + dens * (s - x0 * cnt) / (x1 - x0)
    return total


def expectation_weights(lengths: Sequence[int], tp: int, threshold: int, max_batched: int,
                        buckets: Sequence[BatchMixBucket] = ()) -> MixWeights:
    """The coefficients of the expected effect of splitting from ``threshold`` (module docstring).

    Args:
        lengths: the measured lengths (tokens; any order; aligned and off-aligned mixed).
        tp: tensor-parallel size (≥ 1; TP 1 has no pad path).
        threshold: T, tokens: sizes ``M ≥ T`` split.
        max_batched: max_num_batched_tokens: no size above it.
        buckets: the batch mix (empty: uniform).

    Returns:
        :class:`MixWeights` (coefficients normalised to sum 1).

    Raises:
        ValueError: no batch size in ``[threshold, max_batched]`` carries weight, or the measured lengths of a class
            that carries weight do not bracket its sizes (:func:`spx.api.step_checks.coverage_problems`: the pad path
            with no off-aligned length measured, or nothing measured up to max_num_batched_tokens).
    """
    segs = segments(threshold, max_batched, buckets)
    pts = sorted(set(lengths))
    al = [x for x in pts if x % tp == 0]
    off = [x for x in pts if x % tp != 0]
    raw: dict[int, float] = {}
    w_al = _class_coefficients(al, segs, tp, True, raw)
    w_off = _class_coefficients(off, segs, tp, False, raw)
    total = w_al + w_off
    if total <= 0:
        raise ValueError(f"no batch size from T={threshold} to max_num_batched_tokens={max_batched} carries weight "
                         "in the batch mix: nothing at or above this threshold is ever formed")
    if gaps := coverage_problems(pts, tp, threshold, max_batched, buckets):
        raise ValueError("; ".join(gaps))
    coeffs = {x: c / total for x, c in sorted(raw.items()) if c != 0.0}
    return MixWeights(coeffs, w_off / total, "given" if buckets else "uniform")


def interpolation_weights(points: Sequence[int], x: int) -> dict[int, float]:
    """Linear interpolation of a curve on sorted ``points`` at ``x`` as weights on the points (constant beyond
    the ends). Empty without points."""
    if not points:
        return {}
    if x <= points[0]:
        return {points[0]: 1.0}
    if x >= points[-1]:
        return {points[-1]: 1.0}
    for x0, x1 in zip(points, points[1:], strict=False):
        if x0 <= x <= x1:
            t = (x - x0) / (x1 - x0)
            return {x0: 1.0 - t, x1: t} if t not in (0.0, 1.0) else {x0 if t == 0.0 else x1: 1.0}
    return {}  # unreachable: x lies within the points


def local_mix_weights(lengths: Sequence[int], tp: int, x: int) -> dict[int, float]:
    """The effect of a batch of about ``x`` tokens, every nearby size equally likely: ``1/TP`` of the aligned
    curve at ``x`` and ``(TP − 1)/TP`` of the off-aligned curve at ``x`` (each interpolated in its class);
    one class alone when the other has no measured length or TP is 1."""
    pts = sorted(set(lengths))
    al = interpolation_weights([p for p in pts if p % tp == 0], x)
    off = interpolation_weights([p for p in pts if p % tp != 0], x)
    if tp == 1 or not off or not al:
        return al or off
    out = {p: w / tp for p, w in al.items()}
    for p, w in off.items():
        out[p] = out.get(p, 0.0) + w * (tp - 1) / tp
    return out


def break_even(xs: Sequence[int], ys: Sequence[float]) -> float | None:
    """Where a curve crosses from loss (> 0) to gain (≤ 0) for the last time, so that it is a gain at every
    larger measured ``x`` (linear interpolation, tokens); None when it is never a gain at the largest ``x`` or
    is a gain everywhere (no crossing measured)."""
    if not xs or ys[-1] > 0:
        return None
    i = len(ys) - 1
    while i > 0 and ys[i - 1] <= 0:
        i -= 1
    if i == 0:
        return None
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return x0 + (x1 - x0) * y0 / (y0 - y1)
