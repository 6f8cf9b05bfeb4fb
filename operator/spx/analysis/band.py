"""The crossover as an interval, why it is (not) resolved, the indifference band, the stake, the interval rule.

Inputs are :class:`~spx.api.status.KernelPoint` s whose ``speedup_low/high`` (the samples' bootstrap
and the used gather prior's own uncertainty) and ``speedup_low/high_any_prior`` (every shipped gather
prior) are set by :func:`with_intervals` (:mod:`spx.analysis.interval`); a point without them counts as
a zero-width interval at its ``speedup``. Definitions (tokens are M, the batch's token count):

- **crossover interval**: the break-even of the optimistic curve (every point at ``speedup_high``) to
  the break-even of the pessimistic one (``speedup_low``), each interpolated like the point estimate
  (:func:`spx.analysis.crossover.break_even_tokens`, log-log). An edge is open when that curve wins at
  every measured count (below the smallest) or does not win at the largest (above it).
- **indifference band**: the same with the any-prior intervals: the token range where the split's
  effect on this projection is within what is not known (samples, the prior's fit, the priors' spread).
- **confidence** (:func:`confidence`): ``none`` (no crossover), ``within-spread`` (a bracketing
  point's own interval contains 1.0, or, for a point without an interval, its IQRs overlap), ``priors-disagree`` (a bracketing point's
  any-prior interval contains 1.0), ``unbracketed`` (the last losing and first winning measured counts
  are further apart than ±``bracket_rel`` of the break-even and than the floor: an unmeasured gap,
  :func:`spx.analysis.crossover.bracket_gap`), else ``resolved``; every failing check is given as a
  reason (the gap first), the value is the first failing one in that order.
- **interval rule** (:func:`lower_bound_threshold`): the smallest measured count from which the
  speed-up's lower bound (own interval) stays ≥ 1 at that and every larger measured count — the
  split is then known to win wherever vLLM would use it.
- **stake** (:func:`stake_at`): ``replicated − split`` µs of this projection at M (> 0: the split
  saves), times the model's layers for one prefill chunk of M tokens (ms); replicated and split times
  are interpolated log-log between the measured neighbours and never extrapolated. With ``host``, the
  host-bound regime's stake too: −Δh (:mod:`spx.analysis.regimes`; a graph point's Δg) and its
  interval, interpolated linearly in log M (a difference may change sign, so not log-log).

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from spx.analysis.crossover import DEFAULT_BRACKET_REL, Interpolation, bracket_gap, break_even_tokens, sorted_points
from spx.analysis.gather_prior import interpolate_time
from spx.analysis.interval import PointInterval
from spx.analysis.regimes import HOST_BOUND, regime_delta
from spx.analysis.threshold import recommended_threshold_tokens
from spx.api.gate import VLLM_DEFAULT_THRESHOLD_TOKENS
from spx.api.status import CrossoverConfidence, CrossoverUncertainty, KernelPoint, StakeRow
from spx.vocabulary import ThresholdRounding, ThresholdRule

#: DeepSeek-V4.1's decoder layers (``num_hidden_layers`` of its config), each running
#: ``fused_wqa_wkv`` once per forward: the stake of one prefill chunk is 40× the per-layer one.
V41_NUM_LAYERS = 40

Bound = Literal["low", "high", "low-any", "high-any", "value"]


def with_intervals(points: Iterable[KernelPoint], intervals: Mapping[int, PointInterval]) -> list[KernelPoint]:
    """``points`` (sorted by tokens) with ``speedup_low/high[_any_prior]`` from ``intervals`` (by tokens).

    Raises:
        ValueError: on a repeated token count.
    """
    out = []
    for p in sorted_points(points):
        iv = intervals.get(p.tokens)
        if iv is None:
            out.append(p)
            continue
        out.append(p.model_copy(update={
            "speedup_low": iv.own.low, "speedup_high": iv.own.high,
            "speedup_low_any_prior": iv.any_prior.low, "speedup_high_any_prior": iv.any_prior.high,
        }))
    return out


def bound(point: KernelPoint, which: Bound) -> float:
    """One end of a point's speed-up interval (``value``: the point estimate); a missing end is ``speedup``."""
    if which == "low":
        v = point.speedup_low
    elif which == "high":
        v = point.speedup_high
    elif which == "low-any":
        v = point.speedup_low_any_prior if point.speedup_low_any_prior is not None else point.speedup_low
    elif which == "high-any":
        v = point.speedup_high_any_prior if point.speedup_high_any_prior is not None else point.speedup_high
    else:
        v = None
    return point.speedup if v is None else v


def curve(points: Iterable[KernelPoint], which: Bound) -> list[KernelPoint]:
    """The points with ``speedup`` replaced by one end of their interval (sorted by tokens)."""
    return [p.model_copy(update={"speedup": max(bound(p, which), 1e-9)}) for p in sorted_points(points)]


@dataclass(frozen=True)
class TokenInterval:
    """A token range ``[low, high]`` (float tokens); ``low_open``: below the smallest measured count
    (``low`` is then that count), ``high_open``: above the largest (``high`` is then that count);
    ``None`` ends: no such curve crossing at all (the optimistic curve never wins)."""

    low: float | None
    high: float | None
    low_open: bool = False
    high_open: bool = False


def token_interval(points: Sequence[KernelPoint], low: Bound, high: Bound,
                   interpolation: Interpolation = "log-log") -> TokenInterval:
    """Break-evens of the optimistic (``high``) and pessimistic (``low``) curves (module docstring),
    interpolated like the point estimate (``interpolation``).

    Raises:
        ValueError: on a repeated token count.
    """
    ordered = sorted_points(points)
    if not ordered:
        return TokenInterval(None, None)
    optimistic = break_even_tokens(curve(ordered, high), interpolation)
    pessimistic = break_even_tokens(curve(ordered, low), interpolation)
    if optimistic is None:
        return TokenInterval(None, None)
    lo = optimistic.tokens
    lo_open = optimistic.at_or_below_smallest_measured
    if pessimistic is None:
        return TokenInterval(lo, float(ordered[-1].tokens), lo_open, True)
    return TokenInterval(min(lo, pessimistic.tokens), max(lo, pessimistic.tokens), lo_open, False)


def lower_bound_threshold(points: Iterable[KernelPoint]) -> int | None:
    """Smallest measured count from which the speed-up's lower bound stays ≥ 1 (module docstring).

    ``None`` when the lower bound is < 1 at the largest measured count (or there are no points).

    Raises:
        ValueError: on a repeated token count.
    """
    first: int | None = None
    for p in reversed(sorted_points(points)):
        if bound(p, "low") < 1.0:
            break
        first = p.tokens
    return first


def recommended_threshold(
    points: Iterable[KernelPoint], break_even: float | None, rule: ThresholdRule, rounding: ThresholdRounding,
    tensor_parallel_size: int,
) -> int | None:
    """The threshold to recommend (tokens), by ``spec.gate.thresholdRule``: the one rule ``spx run``/``spx report``
    (:func:`spx.analysis.summary.evaluate`) and ``spx predict`` (:mod:`spx.analysis.predict`) apply.

    ``break-even``: ``break_even`` (the interpolated crossover, tokens) rounded up by ``rounding``;
    ``lower-bound``: :func:`lower_bound_threshold` of ``points`` rounded up the same way. ``None`` when the
    rule finds no count (no break-even; a lower bound < 1 at the largest count).

    Raises:
        ValueError: a repeated token count, ``tensor_parallel_size < 1``
            (:func:`spx.analysis.threshold.recommended_threshold_tokens`).
    """
    tokens = lower_bound_threshold(points) if rule == "lower-bound" else break_even
    return recommended_threshold_tokens(tokens, rounding, tensor_parallel_size) if tokens else None


def confidence(
    points: Iterable[KernelPoint], bracket_rel: float = DEFAULT_BRACKET_REL, floor_tokens: int = 1,
    interpolation: Interpolation = "log-log",
) -> tuple[CrossoverConfidence, list[str]]:
    """``(confidence, reasons)`` of the point-estimate crossover (rules: module docstring).

    Args:
        points: the sweep, with intervals where known.
        bracket_rel: the bracket must lie within ``±bracket_rel`` of the break-even (0.10: ±10 %).
        floor_tokens: a bracket no wider than this many tokens is narrow enough whatever its relative
            width (e.g. TP: counts closer than TP have the same rows per rank).
        interpolation: of the break-even (as the point estimate's).

    Raises:
        ValueError: on a repeated token count, ``bracket_rel <= 0`` or ``floor_tokens < 1``.
    """
    if bracket_rel <= 0 or floor_tokens < 1:
        raise ValueError(f"need bracket_rel > 0 and floor_tokens >= 1, got {bracket_rel}, {floor_tokens}")
    ordered = sorted_points(points)
    be = break_even_tokens(ordered, interpolation)
    if be is None:
        return "none", ["no crossover: the split does not win at the largest measured count"]
    by_tokens = {p.tokens: p for p in ordered}
    bracket = [by_tokens[t] for t in (be.lower_tokens, be.upper_tokens) if t is not None]
    found: list[tuple[CrossoverConfidence, str]] = []
    gap = bracket_gap(be, bracket_rel, floor_tokens)
    if gap is not None:
        found.append(("unbracketed", gap))
    for p in bracket:
        lo, hi = bound(p, "low"), bound(p, "high")
        iqr_only = p.speedup_low is None or p.speedup_high is None  # no interval: the IQRs decide
        if (iqr_only and not p.decided) or lo <= 1.0 <= hi:
            found.append(("within-spread", (
                f"at {p.tokens:,} tokens the speed-up {p.speedup:.3f}× has interval [{lo:.3f}, {hi:.3f}]"
                + (" that overlaps 1.0" if lo <= 1.0 <= hi else " and the candidates' IQRs overlap"))))
        else:
            alo, ahi = bound(p, "low-any"), bound(p, "high-any")
            if alo <= 1.0 <= ahi:
                found.append(("priors-disagree", (
                    f"at {p.tokens:,} tokens the gather priors disagree: the speed-up interval over every "
                    f"gather prior is [{alo:.3f}, {ahi:.3f}], across 1.0")))
    if not found:
        return "resolved", []
    order: list[CrossoverConfidence] = ["within-spread", "priors-disagree", "unbracketed"]
    return min((f[0] for f in found), key=order.index), [r for _, r in found]


def _interp_log(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    return interpolate_time(x, xs, ys, "log-log")


def _lin_log(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """``ys`` interpolated linearly in ``log x`` between the neighbours of ``x`` (``xs`` ascending, x inside)."""
    for i in range(1, len(xs)):
        if x <= xs[i]:
            a, b = xs[i - 1], xs[i]
            f = 0.0 if b == a else (math.log(x) - math.log(a)) / (math.log(b) - math.log(a))
            return ys[i - 1] + f * (ys[i] - ys[i - 1])
    return ys[-1]


def host_stake(points: Sequence[KernelPoint], tokens: float, layers: int) -> dict[str, float]:
    """The host-bound columns of a :class:`StakeRow` at ``tokens`` (module docstring); empty outside the range."""
    deltas = [d for d in (regime_delta(p, HOST_BOUND) for p in sorted_points(points)) if d is not None]
    if not deltas or not deltas[0].tokens <= tokens <= deltas[-1].tokens:
        return {}
    xs = [float(d.tokens) for d in deltas]
    if len(xs) == 1:
        v, lo, hi = deltas[0].value, deltas[0].low, deltas[0].high
    else:
        v, lo, hi = (_lin_log(tokens, xs, [getattr(d, k) for d in deltas]) for k in ("value", "low", "high"))
    saving, s_lo, s_hi = -v, -hi, -lo
    return {"host_saving_us": saving, "host_saving_low_us": s_lo, "host_saving_high_us": s_hi,
            "host_saving_ms_per_chunk": saving * layers / 1000, "host_saving_low_ms_per_chunk": s_lo * layers / 1000,
            "host_saving_high_ms_per_chunk": s_hi * layers / 1000}


def stake_at(points: Sequence[KernelPoint], label: str, tokens: float, layers: int = V41_NUM_LAYERS,
             host: bool = False) -> StakeRow:
    """What splitting at ``tokens`` saves (> 0) or costs (< 0) per layer and per prefill chunk.

    ``saving_us = replicated − split`` (interpolated log-log between measured neighbours);
    ``saving_low/high_us`` from the any-prior interval of the speed-up (also interpolated):
    ``replicated · (1 − 1/s)``; unset when no point carries an interval. ``*_ms_per_chunk`` = × ``layers`` / 1000. Outside the measured range
    every value is ``None`` (not extrapolated). ``host``: also the host-bound columns (:func:`host_stake`).

    Raises:
        ValueError: ``layers < 1`` or a repeated token count.
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    ordered = sorted_points(points)
    if not ordered or not ordered[0].tokens <= tokens <= ordered[-1].tokens:
        return StakeRow(label=label, tokens=tokens, layers=layers)
    xs = [float(p.tokens) for p in ordered]
    rep = _interp_log(tokens, xs, [p.replicated_us for p in ordered])
    split = _interp_log(tokens, xs, [p.split_us for p in ordered])
    s_lo = _interp_log(tokens, xs, [max(bound(p, "low-any"), 1e-9) for p in ordered])
    s_hi = _interp_log(tokens, xs, [max(bound(p, "high-any"), 1e-9) for p in ordered])
    lo_us, hi_us = rep * (1 - 1 / s_lo), rep * (1 - 1 / s_hi) if math.isfinite(s_hi) else rep
    saving = rep - split
    row = StakeRow(label=label, tokens=tokens, layers=layers, replicated_us=rep, split_us=split,
                   saving_us=saving, saving_ms_per_chunk=saving * layers / 1000,
                   **(host_stake(ordered, tokens, layers) if host else {}))
    if not any(p.speedup_low is not None for p in ordered):
        return row  # no interval known: no bounds (unknown, not zero)
    low, high = min(lo_us, saving), max(hi_us, saving)
    return row.model_copy(update={"saving_low_us": low, "saving_high_us": high,
                                  "saving_low_ms_per_chunk": low * layers / 1000,
                                  "saving_high_ms_per_chunk": high * layers / 1000})


def _by_tokens(marks: Sequence[tuple[str, float]]) -> dict[float, list[str]]:
    """Labels grouped by token count, in first-seen order."""
    out: dict[float, list[str]] = {}
    for label, t in marks:
        out.setdefault(t, []).append(label)
    return out


THRESHOLD_RULE = (
    "lower-bound: the smallest measured token count from which the lower end of the speed-up's 95 % interval "
    "(samples' paired bootstrap + the gather prior's own standard error) stays >= 1 at every larger measured count"
)


def uncertainty(
    points: Sequence[KernelPoint],
    *,
    recommended_threshold_tokens: int | None,
    gate_threshold_tokens: int,
    layers: int = V41_NUM_LAYERS,
    bracket_rel: float = DEFAULT_BRACKET_REL,
    floor_tokens: int = 1,
    level: float = 0.95,
    interpolation: Interpolation = "log-log",
    host: bool = False,
) -> tuple[CrossoverConfidence, CrossoverUncertainty]:
    """Confidence and the ``kernel.uncertainty`` section of a sweep (definitions: module docstring).

    Stake rows: the band's closed edges, the recommended threshold, the interval rule's threshold,
    the gate threshold and vLLM's default 2048 when the gate's differs (one row per token count, its labels joined; rows outside
    the measured range carry no values), with the host-bound regime's columns when ``host``. When no point carries an interval (a table without samples) the
    crossover interval and the band are left unset: their width is unknown, not zero.

    Raises:
        ValueError: see :func:`confidence` and :func:`stake_at`.
    """
    ordered = sorted_points(points)
    conf, reasons = confidence(ordered, bracket_rel, floor_tokens, interpolation)
    known = any(p.speedup_low is not None for p in ordered)
    unknown = TokenInterval(None, None)
    cross = token_interval(ordered, "low", "high", interpolation) if known else unknown
    band = token_interval(ordered, "low-any", "high-any", interpolation) if known else unknown
    lb = lower_bound_threshold(ordered)
    be = break_even_tokens(ordered, interpolation)
    marks: list[tuple[str, float]] = []
    if band.low is not None and not band.low_open:
        marks.append(("band low edge", band.low))
    if band.high is not None and not band.high_open:
        marks.append(("band high edge", band.high))
    if recommended_threshold_tokens is not None:
        marks.append(("recommended threshold", float(recommended_threshold_tokens)))
    if lb is not None:
        marks.append(("lower-bound threshold", float(lb)))
    marks.append(("gate threshold", float(gate_threshold_tokens)))
    if gate_threshold_tokens != VLLM_DEFAULT_THRESHOLD_TOKENS:  # (at 2048 the gate threshold's row is it)
        marks.append(("vLLM default", float(VLLM_DEFAULT_THRESHOLD_TOKENS)))
    return conf, CrossoverUncertainty(
        level=level,
        confidence_reasons=reasons,
        bracket_low_tokens=be.lower_tokens if be else None,
        bracket_high_tokens=be.upper_tokens if be else None,
        crossover_low_tokens=cross.low, crossover_high_tokens=cross.high,
        crossover_low_open=cross.low_open, crossover_high_open=cross.high_open,
        band_low_tokens=band.low, band_high_tokens=band.high,
        band_low_open=band.low_open, band_high_open=band.high_open,
        lower_bound_threshold_tokens=lb,
        threshold_rule=THRESHOLD_RULE,
        layers=layers,
        stake=[stake_at(ordered, ", ".join(labels), t, layers, host) for t, labels in _by_tokens(marks).items()],
    )
