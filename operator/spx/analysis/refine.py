"""The refinement planner of the adaptive sweep (``sweep.refine``): points so far → next token counts.

Pure and deterministic, so every rank of a run that sees the same points plans the same counts. Per
round it looks at several speed-up *curves* over the measured counts (:mod:`spx.analysis.band`): the
point estimate, the two ends of each point's own interval (the effective-time bounds: samples and
the gather prior's fit) and, for a modelled gather, the two ends over every gather prior. For each
curve with a crossover whose bracket (its last losing and first winning measured counts,
:func:`spx.analysis.crossover.break_even_tokens`) is wider than ``±bracket_rel`` of its break-even
and than the floor, it proposes the counts at ``break-even · (1 ∓ bracket_rel)`` (a secant step:
when the interpolation is right the next bracket is narrow enough), or the bracket's geometric middle
when those fall on its ends. When the point estimate wins at every measured count, it probes half
the smallest count (the break-even may lie below it).

Token counts: any integer M is a batch vLLM can see; the split pads M up to a multiple of TP
(``sp_shard``), so a count that is not a multiple of TP times padding rows that no unpadded batch of
that size has. Proposals are multiples of TP (rows per rank exactly M / TP), rounded *into* the
bracket, and the floor defaults to TP (counts closer than that share rows per rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spx.analysis.band import Bound, curve
from spx.analysis.crossover import DEFAULT_BRACKET_REL, break_even_tokens, sorted_points
from spx.api.status import KernelPoint

#: (curve name, which end of the interval) in the order their proposals are kept.
CURVES: tuple[tuple[str, Bound], ...] = (
    ("point estimate", "value"),
    ("pessimistic bound", "low"),
    ("optimistic bound", "high"),
    ("any-prior pessimistic bound", "low-any"),
    ("any-prior optimistic bound", "high-any"),
)


@dataclass(frozen=True)
class PlannedPoint:
    """A token count to measure next and why (one line, stored as the point's ``addedBecause``)."""

    tokens: int
    reason: str


@dataclass(frozen=True)
class RefinePlan:
    """Next counts (``points``, empty when done) and why the planner stops or goes on (``why``)."""

    points: tuple[PlannedPoint, ...]
    why: str

    @property
    def done(self) -> bool:
        """True when nothing is left to measure."""
        return not self.points


def _inside(lo: int, hi: int, x: float, tp: int, toward: str) -> int | None:
    """A multiple of ``tp`` strictly between ``lo`` and ``hi``, nearest ``x`` rounded ``toward`` up/down."""
    m = math.ceil(x / tp) * tp if toward == "up" else math.floor(x / tp) * tp
    m = min(max(m, (lo // tp + 1) * tp), math.ceil(hi / tp) * tp - tp)
    return m if lo < m < hi else None


def plan_refinement(
    points: Sequence[KernelPoint],
    tp: int,
    *,
    bracket_rel: float = DEFAULT_BRACKET_REL,
    floor_tokens: int | None = None,
    max_new: int = 4,
    bounds: bool = True,
) -> RefinePlan:
    """Next token counts for an adaptive sweep (method: module docstring).

    Args:
        points: the points measured so far (intervals where known, :func:`spx.analysis.band.with_intervals`).
        tp: the TP size (≥ 1): proposals are multiples of it.
        bracket_rel: a bracket within ``±bracket_rel`` of its break-even is narrow enough (0.10: ±10 %).
        floor_tokens: a bracket no wider than this is narrow enough (default ``tp``; e.g. the GEMM's
            tile step in M).
        max_new: at most this many counts per round (point-estimate proposals first).
        bounds: also bracket the crossings of the interval ends (``False``: the point estimate only).

    Returns:
        :class:`RefinePlan`: proposals never repeat a measured count and carry their reason.

    Raises:
        ValueError: ``tp < 1``, ``bracket_rel <= 0``, ``floor_tokens < 1``, ``max_new < 1`` or a
            repeated token count.
    """
    if tp < 1 or bracket_rel <= 0 or max_new < 1 or (floor_tokens is not None and floor_tokens < 1):
        raise ValueError(f"need tp >= 1, bracket_rel > 0, floor_tokens >= 1, max_new >= 1; got {tp}, "
                         f"{bracket_rel}, {floor_tokens}, {max_new}")
    ordered = sorted_points(points)
    if not ordered:
        return RefinePlan((), "no points measured: nothing to refine")
    floor = floor_tokens if floor_tokens is not None else tp
    measured = {p.tokens for p in ordered}
    proposals: dict[int, list[str]] = {}
    notes: list[str] = []
    for name, which in CURVES if bounds else CURVES[:1]:
        be = break_even_tokens(curve(ordered, which))
        if be is None:
            notes.append(f"{name}: no crossover in the measured range")
            continue
        if be.lower_tokens is None:
            smallest = be.upper_tokens
            probe = max(tp, (smallest // 2) // tp * tp)
            if which == "value" and smallest > floor and probe < smallest:
                proposals.setdefault(probe, []).append(
                    f"{name}: the split wins at every measured count; probe below the smallest ({smallest:,})")
            else:
                notes.append(f"{name}: wins from the smallest measured count {smallest:,}")
            continue
        lo, hi, t = be.lower_tokens, be.upper_tokens, be.tokens
        if hi - lo <= max(2 * bracket_rel * t, float(floor)):
            notes.append(f"{name}: bracketed by {lo:,}–{hi:,} tokens around ≈ {t:,.0f}")
            continue
        picks = {m for m in (_inside(lo, hi, t * (1 - bracket_rel), tp, "up"),
                             _inside(lo, hi, t * (1 + bracket_rel), tp, "down")) if m is not None}
        if not picks:
            mid = _inside(lo, hi, math.sqrt(lo * hi), tp, "up")
            if mid is None:
                notes.append(f"{name}: {lo:,}–{hi:,} has no multiple of TP{tp} inside (the floor)")
                continue
            picks = {mid}
        half = 100 * (hi - lo) / 2 / t
        for m in sorted(picks):
            if m not in measured:
                proposals.setdefault(m, []).append(
                    f"{name}: break-even ≈ {t:,.0f} tokens bracketed only by {lo:,}–{hi:,} (±{half:.0f} % > "
                    f"±{100 * bracket_rel:.0f} %); measure at {m:,} (= {m // tp} rows per rank × TP{tp})")
    chosen = list(proposals.items())[:max_new]
    planned = tuple(PlannedPoint(m, "; ".join(rs)[:500]) for m, rs in sorted(chosen))
    why = "; ".join(notes) if not planned else f"{len(planned)} count(s) to refine"
    return RefinePlan(planned, why[:1000])
