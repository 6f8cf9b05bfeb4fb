"""The refinement planner of the adaptive sweep (``sweep.refine``): points so far → next token counts.

Pure and deterministic, so every rank of a run that sees the same points plans the same counts. Per
round it looks at one or several speed-up *curves* over the measured counts (:mod:`spx.analysis.band`):
the point estimate and, with ``bounds``, the two ends of each point's own interval (samples and the
gather prior's fit) and the two ends over every gather prior. The crossover of a curve is top-down
(:func:`spx.analysis.crossover.break_even_tokens`): its bracket is the measured count just below the
*winning run* (the first count from which the curve wins at every larger measured count) and that
run's first count. So a loss anywhere inside the winning run moves the crossover up, and the planner
checks the run before it narrows the bracket. In this order, rules 2 and 3 only when no curve has an
open gap (a narrowing probe of one curve inside another's gap would split it off the grid and can step
over a dip):

1. **Verify the winning run.** A gap between two adjacent measured counts ``a < b`` of the run is
   *open* when ``b / a > 1.5`` (:data:`VERIFY_MAX_RATIO`: the widest step of the committed dense H200
   sweep, 256 → 384 and 512 → 768) and the pessimistic bound at ``a`` or ``b`` is below 1 (a loss in
   between is not excluded: on H200 the split loses at 192 tokens between winning 128 and 512, where
   Humming runs the replicated GEMM as two 96-row blocks instead of one 160-row block at 160 tokens
   and gets 15 % faster). One probe per open gap: its geometric middle on a grid of 4 counts per
   octave (:func:`grid_count`). The pessimistic bound is ``speedupLow`` for the point estimate and the
   own interval's ends, ``speedupLowAnyPrior`` for the any-prior ends; the pessimistic curves
   themselves (whose winners are > 1 by definition) never open a gap.
2. **Narrow the bracket**: when the bracket (last losing, first
   winning measured count) is wider than ``±bracket_rel`` of its break-even and than the floor, one
   probe at the interpolated break-even rounded to a multiple of TP and clamped into the bracket's
   middle half (so whatever the measurement says, the next bracket is at most ¾ as wide: a secant
   step that cannot stall at one end, as regula falsi does on a curved speed-up).
3. **Probe below the smallest count**, when the point estimate wins at every
   measured count (the break-even may lie below it): half the smallest count.

Where the decision is (issue #28): with ``gate_threshold`` the gate threshold ``T`` itself is measured
first when it lies inside the measured range and was not listed (the verdict is judged from ``T`` up);
with ``host_points`` (the sweep in the host-bound regime, :func:`spx.analysis.regimes.host_view`) the
host-bound point estimate is one more curve, so the host regime's crossover is bracketed too (where the
regimes disagree lies between the two crossovers). Off-alignment counts (:func:`off_alignment_counts`:
``T + 1``, ``2T + 1``) are measured by the sweep itself (``sweep.offAlignment``), not by the planner.

Token counts: any integer M is a batch vLLM can see; the split pads M up to a multiple of TP
(``sp_shard``), so a count that is not a multiple of TP times padding rows that no unpadded batch of
that size has. Proposals are multiples of TP (rows per rank exactly M / TP) strictly inside their gap,
and the floor defaults to TP (counts closer than that share rows per rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spx.analysis.band import Bound, bound, curve
from spx.analysis.crossover import DEFAULT_BRACKET_REL, break_even_tokens, first_winning_tokens, sorted_points
from spx.api.status import KernelPoint

#: (curve name, which end of the interval, the pessimistic end that verifies its winning run), in the
#: order their proposals are kept.
CURVES: tuple[tuple[str, Bound, Bound], ...] = (
    ("point estimate", "value", "low"),
    ("pessimistic bound", "low", "low"),
    ("optimistic bound", "high", "low"),
    ("any-prior pessimistic bound", "low-any", "low-any"),
    ("any-prior optimistic bound", "high-any", "low-any"),
)

#: A gap of the winning run wider than this ratio (b / a) is verified when an end's pessimistic bound is
#: below 1: the widest step of the dense H200 sweep (32 … 1024; 256 → 384 and 512 → 768), the sweep that
#: found the split's loss at 192 tokens (examples/results/h200-1gpu-adaptive/before/dense). A dip
#: narrower than this step can still hide between two counts; no finite sweep rules that out.
VERIFY_MAX_RATIO = 1.5

#: Grid counts per octave of a verification probe: multiples of 2^(floor(log2 m) − 2) (… 64, 80, 96,
#: 112, 128, 160, 192, 224, 256 …), as GEMM tile steps in M are powers of two.
GRID_PER_OCTAVE = 4


@dataclass(frozen=True)
class PlannedPoint:
    """A token count to measure next and why (one line, stored as the point's ``addedBecause``)."""

    tokens: int
    reason: str


def off_alignment_counts(tokens: Sequence[int], threshold: int) -> list[PlannedPoint]:
    """The off-alignment counts of the gate threshold ``T`` to measure besides ``tokens``: ``T + 1`` and ``2T + 1``.

    A batch of ``T + 1`` tokens is split with a pad (``sp_shard`` pads M up to a multiple of TP: one pad
    copy) and a partial tile; 7 of 8 real batch sizes are not multiples of TP = 8. Counts already listed or
    above the largest listed count (the bench sizes its buffers by it) are left out; the rest come
    with their reason (``addedBecause``), in increasing order.
    """
    listed, top = set(tokens), max(tokens, default=0)
    out = []
    for count, what in ((threshold + 1, "T + 1"), (2 * threshold + 1, "2T + 1")):
        if count not in listed and count <= top:
            out.append(PlannedPoint(count, f"off-alignment ({what} for gate.thresholdTokens T = {threshold:,}): the "
                                           "split's pad copy and a partial tile, which 7 of 8 real batch sizes pay"))
    return out


@dataclass(frozen=True)
class RefinePlan:
    """Next counts (``points``, empty when done) and why the planner stops or goes on (``why``)."""

    points: tuple[PlannedPoint, ...]
    why: str

    @property
    def done(self) -> bool:
        """True when nothing is left to measure."""
        return not self.points


def _inside(lo: int, hi: int, x: float, tp: int) -> int | None:
    """The multiple of ``tp`` strictly between ``lo`` and ``hi`` nearest ``x`` (ties: the larger)."""
    first, last = (lo // tp + 1) * tp, math.ceil(hi / tp) * tp - tp
    if first > last:
        return None
    return min(max(math.floor(x / tp + 0.5) * tp, first), last)


def grid_count(lo: int, hi: int, tp: int) -> int | None:
    """The "nice" count strictly between ``lo`` and ``hi`` nearest (in log) their geometric middle.

    Nice: with ``m = sqrt(lo · hi)``, a multiple of ``lcm(2 ** max(floor(log2 m) − 2, 0), tp)`` (4 counts
    per octave, :data:`GRID_PER_OCTAVE`, and a multiple of TP). When no grid count lies strictly inside
    (small counts, or a TP that is not a power of two), the multiple of ``tp`` nearest ``m``; ``None``
    when there is none (the gap is below TP's resolution). Tokens are ints ≥ 1, ``lo < hi``.
    """
    m = math.sqrt(lo * hi)
    step = math.lcm(2 ** max(math.floor(math.log2(m)) - int(math.log2(GRID_PER_OCTAVE)), 0), tp)
    cands = [k * step for k in (math.floor(m / step), math.ceil(m / step)) if lo < k * step < hi]
    if cands:
        return min(cands, key=lambda c: (abs(math.log(c / m)), -c))
    return _inside(lo, hi, m, tp)


def _verify(ordered: Sequence[KernelPoint], wins: Sequence[KernelPoint], pessimistic: Bound, tp: int,
            notes: list[str]) -> list[tuple[int, str]]:
    """One probe per open gap of the winning run ``wins`` (module docstring, rule 1)."""
    by_tokens = {p.tokens: p for p in ordered}
    probes = []
    for a, b in zip(wins, wins[1:], strict=False):
        if b.tokens / a.tokens <= VERIFY_MAX_RATIO:
            continue
        lows = [(p.tokens, bound(by_tokens[p.tokens], pessimistic)) for p in (a, b)]
        below = [(t, v) for t, v in lows if v < 1.0]
        if not below:
            continue
        m = grid_count(a.tokens, b.tokens, tp)
        if m is None:
            notes.append(f"{a.tokens:,}–{b.tokens:,} has no multiple of TP{tp} inside (the floor)")
            continue
        kind = "any-prior pessimistic bound" if pessimistic == "low-any" else "pessimistic bound"
        # truncated, not rounded, to 3 decimals: a bound of 0.996 must not read "1.00 < 1"
        ends = " and ".join(f"{t:,}'s {kind} {math.floor(v * 1000) / 1000:.3f} < 1" for t, v in below)
        probes.append((m, f"verify the winning run: {a.tokens:,}–{b.tokens:,} (×{b.tokens / a.tokens:.1f}) has no "
                          f"measured count and {ends}; measure at {m:,} (= {m // tp} rows per rank × TP{tp})"))
    return probes


def _narrow(lo: int, hi: int, t: float, tp: int, bracket_rel: float) -> tuple[int, str] | None:
    """The one probe that narrows the bracket ``lo``–``hi`` around the break-even ``t`` (rule 2)."""
    w = hi - lo
    mid_lo, mid_hi = math.ceil((lo + w / 4) / tp) * tp, math.floor((hi - w / 4) / tp) * tp
    if mid_lo <= mid_hi:
        m: int | None = min(max(math.floor(t / tp + 0.5) * tp, mid_lo), mid_hi)
    else:  # the middle half holds no multiple of TP: the nearest one strictly inside
        m = _inside(lo, hi, t, tp)
    if m is None:
        return None
    half = 100 * w / 2 / t
    return m, (f"narrow the bracket: break-even ≈ {t:,.0f} tokens bracketed only by {lo:,}–{hi:,} (±{half:.0f} % > "
               f"±{100 * bracket_rel:.0f} %); measure at {m:,} (= {m // tp} rows per rank × TP{tp})")


Proposals = dict[int, dict[str, list[str]]]  # count → reason → the curves that give it


def _curve_proposals(name: str, ordered: Sequence[KernelPoint], which: Bound, pessimistic: Bound, tp: int,
                     floor: int, bracket_rel: float, verify: Proposals, narrow: Proposals, notes: list[str]) -> None:
    """Rules 1-3 (module docstring) for one curve of ``ordered``: adds to ``verify`` / ``narrow`` / ``notes``."""
    pts = curve(ordered, which)
    first = first_winning_tokens(pts)
    be = break_even_tokens(pts)
    if first is None or be is None:
        notes.append(f"{name}: no crossover in the measured range")
        return
    gap_notes: list[str] = []
    for m, reason in _verify(ordered, [p for p in pts if p.tokens >= first], pessimistic, tp, gap_notes):
        verify.setdefault(m, {}).setdefault(reason, []).append(name)
    notes.extend(f"{name}: {n}" for n in gap_notes)
    if be.lower_tokens is None:
        smallest = be.upper_tokens
        probe = max(tp, (smallest // 2) // tp * tp)
        if which == "value" and smallest > floor and probe < smallest:
            narrow.setdefault(probe, {}).setdefault(
                f"the split wins at every measured count; probe below the smallest ({smallest:,})", []).append(name)
        else:
            notes.append(f"{name}: wins from the smallest measured count {smallest:,}")
        return
    lo, hi, t = be.lower_tokens, be.upper_tokens, be.tokens
    pick = _narrow(lo, hi, t, tp, bracket_rel)
    if hi - lo <= max(2 * bracket_rel * t, float(floor)):
        notes.append(f"{name}: bracketed by {lo:,}–{hi:,} tokens around ≈ {t:,.0f}")
    elif pick is None:
        notes.append(f"{name}: {lo:,}–{hi:,} has no multiple of TP{tp} inside (the floor)")
    else:
        narrow.setdefault(pick[0], {}).setdefault(pick[1], []).append(name)


def plan_refinement(
    points: Sequence[KernelPoint],
    tp: int,
    *,
    bracket_rel: float = DEFAULT_BRACKET_REL,
    floor_tokens: int | None = None,
    max_new: int = 4,
    bounds: bool = True,
    gate_threshold: int | None = None,
    host_points: Sequence[KernelPoint] | None = None,
) -> RefinePlan:
    """Next token counts for an adaptive sweep (rules: module docstring).

    Args:
        points: the points measured so far (intervals where known, :func:`spx.analysis.band.with_intervals`;
            a point without them counts as a zero-width interval).
        tp: the TP size (≥ 1): proposals are multiples of it (the gate threshold excepted).
        bracket_rel: a bracket within ``±bracket_rel`` of its break-even is narrow enough (0.10: ±10 %).
        floor_tokens: a bracket no wider than this is narrow enough (default ``tp``; e.g. the GEMM's
            tile step in M).
        max_new: at most this many counts per round (the gate threshold first, then the point estimate's
            proposals, then each curve's in :data:`CURVES` order, then the host-bound curve's).
        bounds: also the ends of the intervals (``False``: the point estimate only).
        gate_threshold: ``gate.thresholdTokens``: measured first when inside the range and not measured.
        host_points: the points in the host-bound regime (:func:`spx.analysis.regimes.regime_points`);
            ``None``: one regime.

    Returns:
        :class:`RefinePlan`: proposals never repeat a measured count and carry their reason (the rule
        and the curve; a count two curves ask for carries both reasons).

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
    verify: Proposals = {}
    narrow: Proposals = {}
    notes: list[str] = []
    thr = gate_threshold
    if thr is not None and thr not in measured and ordered[0].tokens < thr < ordered[-1].tokens:
        verify[thr] = {f"the decision: measure gate.thresholdTokens {thr:,} itself (judged from it up)": ["gate threshold"]}
    for name, which, pessimistic in CURVES if bounds else CURVES[:1]:
        _curve_proposals(name, ordered, which, pessimistic, tp, floor, bracket_rel, verify, narrow, notes)
    if host_points is not None:
        _curve_proposals("host-bound point estimate", sorted_points(host_points), "value", "low", tp, floor,
                         bracket_rel, verify, narrow, notes)
    # every curve's winning run is verified before any bracket is narrowed: a probe inside a run's gap
    # placed by another curve's narrowing would split that gap off-grid and could step over a dip
    proposals = {m: rs for m, rs in (verify or narrow).items() if m not in measured}
    chosen = list(proposals.items())[:max_new]
    planned = tuple(PlannedPoint(m, "; ".join(f"{', '.join(names)}: {r}" for r, names in rs.items())[:500])
                    for m, rs in sorted(chosen))
    why = "; ".join(notes) if not planned else f"{len(planned)} count(s) to refine"
    return RefinePlan(planned, why[:1000])
