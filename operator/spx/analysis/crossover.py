"""Speedup, per-point confidence and the crossover of the split candidate over the replicated one.

Conventions used throughout ``spx.analysis``:

- ``speedup = replicated_us / split_us``; the split *wins* at a point when ``speedup > 1`` (a tie loses:
  splitting has to buy something to be worth its complexity).
- A point is *decided* when the two candidates' interquartile intervals ``[q1, q3]`` do not overlap
  (closed intervals, so touching intervals overlap). With only a relative spread known, the interval
  is ``median · (1 ± iqr_pct / 200)``. :attr:`KernelPoint.decided` carries this; the functions here
  read that field and never re-derive it, because the exact quartiles (used by
  :func:`spx.analysis.points_from_result`) are better than the symmetric approximation.
- The break-even is interpolated in log-token space between the last losing and the first winning
  measured point, with ``log(speedup)`` linear in ``log(tokens)`` (a power law between the two
  points; GEMM and gather times are close to power laws in M over a factor of two to four), and
  solved for ``speedup = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from spx.api.status import CrossoverConfidence, KernelPoint
from spx.vocabulary import Interpolation as Interpolation


def speedup(replicated_us: float, split_us: float) -> float:
    """``replicated_us / split_us`` (dimensionless; > 1 means the split wins).

    Raises:
        ValueError: when either time is not finite and > 0.
    """
    for name, value in (("replicated_us", replicated_us), ("split_us", split_us)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be finite and > 0 µs, got {value}")
    return replicated_us / split_us


def median_point(
    tokens: int, rows_per_rank: int, replicated_us: float, split_us: float, gather_us: float | None = None
) -> KernelPoint:
    """A :class:`KernelPoint` known only by its medians (µs): no spread, no error check.

    ``speedup`` is :func:`speedup` of the two times; the IQR fields are 0, ``max_abs_error`` is
    ``None`` and the point is marked ``decided`` (the spread is unknown, not zero).

    Raises:
        ValueError: when a time is not finite and > 0, or ``tokens`` / ``rows_per_rank`` is out of
            the model's range (pydantic ``ValidationError``, a ``ValueError``).
    """
    return KernelPoint(
        tokens=tokens,
        rows_per_rank=rows_per_rank,
        replicated_us=replicated_us,
        split_us=split_us,
        gather_us=gather_us,
        speedup=speedup(replicated_us, split_us),
        decided=True,
    )


def split_wins(point: KernelPoint) -> bool:
    """True when the split candidate is strictly faster at this point (``point.speedup > 1``)."""
    return point.speedup > 1.0


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """True when the closed intervals ``a = (lo, hi)`` and ``b = (lo, hi)`` share at least one value."""
    return a[0] <= b[1] and b[0] <= a[1]


def iqr_interval(median_us: float, iqr_pct: float) -> tuple[float, float]:
    """Approximate ``[q1, q3]`` in µs from a median (µs) and a relative IQR (percent).

    ``median · (1 − iqr_pct/200), median · (1 + iqr_pct/200)``: the IQR centred on the median, used
    when only ``iqr_pct`` is known (a real distribution may be skewed).
    """
    half = iqr_pct / 200.0
    return median_us * (1.0 - half), median_us * (1.0 + half)


def decided_from_quartiles(
    replicated_q1_us: float, replicated_q3_us: float, split_q1_us: float, split_q3_us: float
) -> bool:
    """True when the replicated ``[q1, q3]`` and the split ``[q1, q3]`` (µs) do not overlap."""
    return not intervals_overlap((replicated_q1_us, replicated_q3_us), (split_q1_us, split_q3_us))


def candidate_iqr_pcts(point: KernelPoint) -> tuple[float, float]:
    """``(replicated, split)`` relative IQRs in percent of a point.

    When neither per-candidate value is set (both 0) but ``iqr_pct`` (the larger of the two) is, both
    candidates are given ``iqr_pct``: the conservative reading of a point that only carries the max.
    """
    rep, split = point.replicated_iqr_pct, point.split_iqr_pct
    if rep == 0.0 and split == 0.0 and point.iqr_pct > 0.0:
        return point.iqr_pct, point.iqr_pct
    return rep, split


def decided_from_iqr_pct(point: KernelPoint) -> bool:
    """Whether a point is decided, judged from its medians and relative IQRs only.

    Intervals are ``median · (1 ± iqr_pct/200)`` per candidate (see :func:`candidate_iqr_pcts`).
    A point with no spread recorded (all IQRs 0) is decided unless the two medians are equal.
    """
    rep_pct, split_pct = candidate_iqr_pcts(point)
    return not intervals_overlap(
        iqr_interval(point.replicated_us, rep_pct), iqr_interval(point.split_us, split_pct)
    )


def with_decided_from_iqr(point: KernelPoint) -> KernelPoint:
    """A copy of ``point`` whose ``decided`` is recomputed by :func:`decided_from_iqr_pct`."""
    return point.model_copy(update={"decided": decided_from_iqr_pct(point)})


def speedup_range(point: KernelPoint) -> tuple[float, float]:
    """``(worst, best)`` speedup consistent with the candidates' IQR intervals (dimensionless).

    ``worst = rep_q1 / split_q3`` and ``best = rep_q3 / split_q1`` with the intervals of
    :func:`iqr_interval`; an interval reaching 0 µs (IQR ≥ 200 %) gives ``best = inf``.
    """
    rep_pct, split_pct = candidate_iqr_pcts(point)
    rep_lo, rep_hi = iqr_interval(point.replicated_us, rep_pct)
    split_lo, split_hi = iqr_interval(point.split_us, split_pct)
    worst = max(rep_lo, 0.0) / split_hi
    best = rep_hi / split_lo if split_lo > 0 else math.inf
    return worst, best


def sorted_points(points: Iterable[KernelPoint]) -> list[KernelPoint]:
    """The points ordered by increasing ``tokens``.

    Raises:
        ValueError: when a token count appears more than once.
    """
    ordered = sorted(points, key=lambda p: p.tokens)
    dupes = sorted({a.tokens for a, b in zip(ordered, ordered[1:], strict=False) if a.tokens == b.tokens})
    if dupes:
        raise ValueError(f"token counts {dupes} appear more than once; give one point per token count")
    return ordered


def first_winning_tokens(points: Iterable[KernelPoint]) -> int | None:
    """Smallest measured token count from which the split wins there and at every larger measured count.

    With a sweep that wins, loses, then wins again this is the start of the last winning run (the last
    switch from losing to winning). ``None`` when the split does not win at the largest measured
    count, or there are no points.

    Raises:
        ValueError: on a repeated token count.
    """
    ordered = sorted_points(points)
    first: int | None = None
    for p in reversed(ordered):
        if not split_wins(p):
            break
        first = p.tokens
    return first


@dataclass(frozen=True)
class BreakEven:
    """Interpolated token count where ``speedup = 1``.

    Attributes:
        tokens: the break-even M (tokens, float).
        lower_tokens: the last losing measured count bracketing it (``None`` when the split wins at
            every measured count).
        upper_tokens: the first winning measured count (= :func:`first_winning_tokens`).
        at_or_below_smallest_measured: True when the split wins at every measured count; ``tokens``
            is then the smallest measured count and only an upper bound of the true break-even.
        interpolation: ``"log-log"`` (log speedup linear in log tokens) or ``"linear"``.
    """

    tokens: float
    lower_tokens: int | None
    upper_tokens: int
    at_or_below_smallest_measured: bool
    interpolation: Interpolation = "log-log"


def interpolate_break_even(
    lower_tokens: float,
    lower_speedup: float,
    upper_tokens: float,
    upper_speedup: float,
    interpolation: Interpolation = "log-log",
) -> float:
    """Token count where the line through two (tokens, speedup) points crosses ``speedup = 1``.

    ``"log-log"``: ``log s`` linear in ``log M``, so
    ``M* = M0 · (M1/M0) ** (−log s0 / (log s1 − log s0))``.
    ``"linear"``: ``s`` linear in ``M``, so ``M* = M0 + (1 − s0) / (s1 − s0) · (M1 − M0)``.

    Raises:
        ValueError: unless ``0 < lower_tokens < upper_tokens``, ``0 < lower_speedup ≤ 1 < upper_speedup``.
    """
    if not 0 < lower_tokens < upper_tokens:
        raise ValueError(f"need 0 < lower_tokens < upper_tokens, got {lower_tokens}, {upper_tokens}")
    if not 0 < lower_speedup <= 1.0 < upper_speedup:
        raise ValueError(
            f"need 0 < lower_speedup <= 1 < upper_speedup to bracket a break-even, got {lower_speedup}, {upper_speedup}"
        )
    if interpolation == "log-log":
        y0, y1 = math.log(lower_speedup), math.log(upper_speedup)
        return lower_tokens * math.pow(upper_tokens / lower_tokens, -y0 / (y1 - y0))
    if interpolation == "linear":
        return lower_tokens + (1.0 - lower_speedup) / (upper_speedup - lower_speedup) * (upper_tokens - lower_tokens)
    raise ValueError(f"unknown interpolation {interpolation!r}; use 'log-log' or 'linear'")


def break_even_tokens(points: Iterable[KernelPoint], interpolation: Interpolation = "log-log") -> BreakEven | None:
    """Interpolated break-even between the last losing and the first winning measured point.

    The bracket is (the measured count just below :func:`first_winning_tokens`, that count); see
    :func:`interpolate_break_even` for the formula (default: ``log speedup`` linear in ``log tokens``).
    When the split wins at every measured count the result is the smallest measured count with
    ``at_or_below_smallest_measured = True``. ``None`` when there is no crossover (the split does not
    win at the largest measured count, or no points).

    Raises:
        ValueError: on a repeated token count or an unknown interpolation.
    """
    ordered = sorted_points(points)
    first = first_winning_tokens(ordered)
    if first is None:
        return None
    idx = next(i for i, p in enumerate(ordered) if p.tokens == first)
    if idx == 0:
        return BreakEven(float(first), None, first, True, interpolation)
    lose, win = ordered[idx - 1], ordered[idx]
    tokens = interpolate_break_even(lose.tokens, lose.speedup, win.tokens, win.speedup, interpolation)
    return BreakEven(tokens, lose.tokens, win.tokens, False, interpolation)


#: A crossover is resolved only when its bracket lies within ±10 % of the break-even (issue 20).
DEFAULT_BRACKET_REL = 0.10


def bracket_gap(be: BreakEven, bracket_rel: float = DEFAULT_BRACKET_REL, floor_tokens: int = 1) -> str | None:
    """Why the bracket of ``be`` is too wide to call its crossover resolved, or ``None`` when it is narrow enough.

    Narrow enough: ``upper − lower ≤ max(2 · bracket_rel · break-even, floor_tokens)`` (the last losing
    and the first winning measured counts within ``±bracket_rel`` of the break-even, or no further apart
    than the floor). A split that wins at every measured count has no lower end: ``None`` (its
    break-even is only bounded above, which :attr:`BreakEven.at_or_below_smallest_measured` says).
    """
    if be.lower_tokens is None:
        return None
    width = be.upper_tokens - be.lower_tokens
    if width <= max(2 * bracket_rel * be.tokens, float(floor_tokens)):
        return None
    half = 100 * width / 2 / be.tokens
    return (f"unmeasured gap: the break-even ≈ {be.tokens:,.0f} tokens is bracketed only by {be.lower_tokens:,} "
            f"and {be.upper_tokens:,} tokens (±{half:.0f} %); resolved needs ±{100 * bracket_rel:.0f} % "
            f"or a gap of at most {floor_tokens} tokens")


def resolved_against_one(point: KernelPoint) -> bool:
    """Whether a point says on which side of 1.0 its speed-up lies: by its interval when it has one
    (``speedupLow/High``: the paired bootstrap, which narrows with samples), else by ``decided`` (IQRs)."""
    if point.speedup_low is not None and point.speedup_high is not None:
        return not (point.speedup_low <= 1.0 <= point.speedup_high)
    return point.decided


def crossover_confidence(
    points: Iterable[KernelPoint], bracket_rel: float = DEFAULT_BRACKET_REL, floor_tokens: int = 1
) -> CrossoverConfidence:
    """How far the crossover can be trusted, from the medians, IQRs and the bracket.

    ``"none"`` when there is no crossover; ``"within-spread"`` when a bracketing point (the last losing
    and the first winning one; only the smallest point when the split wins everywhere) is not resolved
    (:func:`resolved_against_one`);
    ``"unbracketed"`` when the last losing and first winning measured counts are further apart than
    :func:`bracket_gap` allows (``resolved`` is never claimed across an unmeasured gap); else
    ``"resolved"``. :func:`spx.analysis.band.confidence` adds the speed-up intervals and gives reasons.

    Raises:
        ValueError: on a repeated token count.
    """
    ordered = sorted_points(points)
    be = break_even_tokens(ordered)
    if be is None:
        return "none"
    bracket = {be.upper_tokens} | ({be.lower_tokens} if be.lower_tokens is not None else set())
    if not all(resolved_against_one(p) for p in ordered if p.tokens in bracket):
        return "within-spread"
    if bracket_gap(be, bracket_rel, floor_tokens) is not None:
        return "unbracketed"
    return "resolved"


@dataclass(frozen=True)
class Crossover:
    """Everything :func:`find_crossover` derives from a sweep.

    Attributes:
        first_winning_tokens: see :func:`first_winning_tokens`.
        break_even: see :func:`break_even_tokens` (``None``: no crossover).
        confidence: see :func:`crossover_confidence`.
    """

    first_winning_tokens: int | None
    break_even: BreakEven | None
    confidence: CrossoverConfidence


def find_crossover(
    points: Iterable[KernelPoint], interpolation: Interpolation = "log-log", floor_tokens: int = 1
) -> Crossover:
    """First winning count, interpolated break-even and confidence of a sweep (any point order).

    ``floor_tokens``: see :func:`bracket_gap`.

    Raises:
        ValueError: on a repeated token count or an unknown interpolation.
    """
    ordered = sorted_points(points)
    return Crossover(
        first_winning_tokens=first_winning_tokens(ordered),
        break_even=break_even_tokens(ordered, interpolation),
        confidence=crossover_confidence(ordered, floor_tokens=floor_tokens),
    )
