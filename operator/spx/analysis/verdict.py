"""Gate verdict (Pass | Fail | Inconclusive) of a kernel sweep against a :class:`~spx.api.gate.GateSpec`.

Rules, in order of precedence:

1. **Fail** when any point's ``max_abs_error`` exceeds ``gate.max_abs_error``, or a *resolved* point at
   or above ``gate.threshold_tokens`` has ``speedup < gate.min_speedup_at_or_above_threshold``.
2. **Inconclusive** when
   - no measured point is at or above the threshold;
   - an *unresolved* point at or above the threshold could change the outcome. A point with a speed-up
     interval (``speedupLow/High``: the samples' paired bootstrap, and the gather prior's own error) is
     resolved when the interval lies on one side of the minimum speed-up; a point without one (a table of
     medians) when its IQRs do not overlap (``decided``), and then for a minimum below 1 only when the
     worst speed-up inside the IQR intervals (:func:`~spx.analysis.crossover.speedup_range`) is below it.
     "Take more samples" is advised only where samples can narrow the interval (a measured gather);
     with a modelled gather the advice is to measure the gather;
   - a point has no ``max_abs_error`` (the gate requires the outputs to match, which is then unknown);
   - the gather is modelled and ``gate.allow_modelled_gather`` is false, or the timings come from a
     CPU smoke run and ``gate.allow_cpu_timings`` is false: every speed-based verdict (Pass, and a
     Fail on speed) becomes Inconclusive, since it rests on a model or on CPU timings that say nothing
     about GPUs. A Fail on correctness (``max_abs_error``) stays a Fail.
3. **Pass** otherwise.

Every verdict comes with human-readable reasons that cite the numbers, the deciding one first (a cap's
reason when the cap turned a Pass or Fail on speed into Inconclusive); informative reasons (the
break-even, how the recommended threshold compares with ``threshold_tokens``) follow the deciding ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spx.analysis.band import bound
from spx.analysis.crossover import Crossover, find_crossover, sorted_points, speedup_range, split_wins
from spx.api.gate import GateSpec
from spx.api.status import GatherSource, KernelPoint, Verdict
from spx.vocabulary import CPU_NOTE


@dataclass(frozen=True)
class GateOutcome:
    """A verdict and the reasons behind it (deciding reasons first, then informative ones).

    ``speed_verdict`` is what the speeds alone decide before the modelled-gather and CPU caps (the
    verdict two regimes are compared on); ``correctness_failed`` whether an output differed.
    """

    verdict: Verdict
    reasons: tuple[str, ...]
    speed_verdict: Verdict = "Inconclusive"
    correctness_failed: bool = False


def _x(s: float) -> str:
    return f"{s:.2f}×"


def _tokens_list(tokens: Sequence[int], limit: int = 8) -> str:
    shown = ", ".join(str(t) for t in tokens[:limit])
    return shown + (f" and {len(tokens) - limit} more" if len(tokens) > limit else "")


def _speedups(points: Sequence[KernelPoint]) -> str:
    return ", ".join(f"{p.tokens}: {_x(p.speedup)}" for p in points)


def threshold_reasons(
    points: Sequence[KernelPoint],
    threshold_tokens: int,
    crossover: Crossover,
    recommended_threshold_tokens: int | None,
    threshold_rounding: str,
    advise_move: bool = True,
) -> list[str]:
    """Informative reasons on the break-even and the recommended threshold versus ``threshold_tokens``.

    ``points`` must be sorted by tokens (:func:`~spx.analysis.crossover.sorted_points`). Never affects
    the verdict. ``advise_move`` false (the regimes disagree): no advice to move the threshold, since
    where the split pays depends on the regime the step is in.
    """
    reasons: list[str] = []
    be = crossover.break_even
    if be is None or recommended_threshold_tokens is None:
        if points:
            last = points[-1]
            reasons.append(
                f"split does not win at the largest measured count ({last.tokens} tokens: {_x(last.speedup)}): "
                "no crossover, no threshold recommended"
            )
        return reasons
    rec, thr = recommended_threshold_tokens, threshold_tokens
    by_tokens = {p.tokens: p for p in points}
    if be.at_or_below_smallest_measured:
        reasons.append(
            f"split wins at every measured count, from the smallest ({be.upper_tokens} tokens: "
            f"{_x(by_tokens[be.upper_tokens].speedup)}): the break-even is at or below {be.upper_tokens} tokens; "
            f"recommended threshold {rec} ({threshold_rounding}, an upper bound)"
        )
    else:
        assert be.lower_tokens is not None
        lo, hi = by_tokens[be.lower_tokens], by_tokens[be.upper_tokens]
        reasons.append(
            f"break-even {be.tokens:.1f} tokens ({be.interpolation} interpolation between {lo.tokens} tokens: "
            f"{_x(lo.speedup)} and {hi.tokens} tokens: {_x(hi.speedup)}, confidence {crossover.confidence}); "
            f"recommended threshold {rec} ({threshold_rounding})"
        )
        if crossover.confidence == "within-spread":
            reasons.append(
                f"the crossover bracket {lo.tokens}-{hi.tokens} tokens is within the candidates' spread or the "
                "speedup's interval (samples, gather prior): the break-even is uncertain; measure between these "
                "counts (sweep.refine), take more samples where an interval overlaps 1.0, or measure the gather"
            )
    reasons.append(_move_reason(points, thr, rec, crossover, advise_move))
    return reasons


def _move_reason(points: Sequence[KernelPoint], thr: int, rec: int, crossover: Crossover, advise_move: bool) -> str:
    """How the recommended threshold ``rec`` compares with ``thr`` (no advice to move it unless ``advise_move``)."""
    fw = crossover.first_winning_tokens
    if not advise_move:
        return (f"recommended threshold {rec} in this regime (thresholdTokens {thr}): no advice to move the "
                "threshold while the regimes disagree")
    if rec < thr:
        winners = [p for p in points if fw is not None and fw <= p.tokens < thr]
        if not winners:
            return (f"recommended threshold {rec} is below threshold {thr}, but no measured count in "
                    f"[{rec}, {thr}) confirms that the split wins there")
        at = f"{winners[0].tokens} tokens" if len(winners) == 1 else f"{winners[0].tokens}-{winners[-1].tokens} tokens"
        return f"split already wins from {fw} tokens; threshold {thr} leaves speedup on the table at {at} ({_speedups(winners)})"
    if rec > thr:
        losers = [p for p in points if thr <= p.tokens < rec and not split_wins(p)]
        detail = f": the split does not win at {_speedups(losers)}" if losers else ""
        be = crossover.break_even
        at_be = f" (break-even {be.tokens:.1f} tokens)" if be is not None else ""
        return f"recommended threshold {rec} is above threshold {thr}{at_be}{detail}"
    return f"recommended threshold {rec} equals threshold {thr}"


def _correctness(ordered: Sequence[KernelPoint], gate: GateSpec) -> tuple[list[str], list[str]]:
    """``(fail, inconclusive)`` reasons of the correctness check (max abs error; a point without one)."""
    fail = [
        f"max abs error {p.max_abs_error:.3g} at {p.tokens} tokens exceeds maxAbsError {gate.max_abs_error:.3g}: "
        "the split output does not match the replicated one"
        for p in ordered if p.max_abs_error is not None and p.max_abs_error > gate.max_abs_error
    ]
    unchecked = [p.tokens for p in ordered if p.max_abs_error is None]
    inconclusive = [
        f"no correctness check recorded at {_tokens_list(unchecked)} tokens: cannot confirm that the split "
        f"output matches the replicated one within maxAbsError {gate.max_abs_error:.3g}"
    ] if unchecked else []
    return fail, inconclusive


def _has_interval(p: KernelPoint) -> bool:
    return p.speedup_low is not None and p.speedup_high is not None


def _speed_at_threshold(gated: Sequence[KernelPoint], gate: GateSpec, gather_source: GatherSource
                        ) -> tuple[list[str], list[str]]:
    """``(slow, unresolved)`` reasons of the points at or above the threshold (module docstring, rules 1-2)."""
    thr, min_s = gate.threshold_tokens, gate.min_speedup_at_or_above_threshold
    slow: list[str] = []
    unresolved: list[str] = []
    for p in gated:
        if _has_interval(p):
            lo, hi = bound(p, "low"), bound(p, "high")
            resolved, worst = not (lo < min_s <= hi), lo
        else:
            resolved, worst = p.decided, speedup_range(p)[0]
        if resolved:
            if p.speedup < min_s:
                slow.append(
                    f"at {p.tokens} tokens the speedup is {_x(p.speedup)} (replicated {p.replicated_us:.1f} µs / "
                    f"split {p.split_us:.1f} µs), below minSpeedupAtOrAboveThreshold {_x(min_s)} required at or above "
                    f"thresholdTokens {thr}"
                )
            continue
        if not (min_s >= 1.0 or worst < min_s):
            continue
        if _has_interval(p):
            spread = f"95 % interval [{bound(p, 'low'):.3f}, {bound(p, 'high'):.3f}]"
            fix = ("measure the gather (its prior's uncertainty is in the interval) or take more samples"
                   if gather_source == "modelled" else "take more samples (the interval narrows with them)")
        else:
            spread = f"replicated IQR {p.replicated_iqr_pct:.1f} %, split IQR {p.split_iqr_pct:.1f} %"
            fix = "rerun with samples kept (the medians alone carry no interval)"
        unresolved.append(
            f"at {p.tokens} tokens the speedup {_x(p.speedup)} is within its spread ({spread}): the point is "
            f"unresolved and could change the verdict against minSpeedupAtOrAboveThreshold {_x(min_s)}; {fix}"
        )
    return slow, unresolved


def _cap_reasons(speed_verdict: Verdict, on_cpu: bool, modelled: bool, gather_source: GatherSource) -> list[str]:
    """Why a speed verdict is capped to Inconclusive (CPU timings, a modelled gather)."""
    capped_to = (
        f"the speed verdict ({speed_verdict}) is reported as Inconclusive"
        if speed_verdict != "Inconclusive"
        else "a Pass or Fail on speed could not be reported either way"
    )
    reasons = []
    if on_cpu:
        reasons.append(f"{CPU_NOTE} (allowCpuTimings false): {capped_to}")
    if modelled:
        reasons.append(
            "the gather is modelled, not measured (gatherSource modelled, allowModelledGather false): the speed "
            f"verdict depends on the gather model; {capped_to}"
        )
    elif gather_source == "modelled":
        reasons.append("the gather is modelled, not measured; accepted because allowModelledGather is true")
    return reasons


def _informative(ordered: Sequence[KernelPoint], gated: Sequence[KernelPoint], gate: GateSpec, slow: bool) -> list[str]:
    """The speed-ups at or above the threshold and the largest error (never affect the verdict)."""
    thr, min_s = gate.threshold_tokens, gate.min_speedup_at_or_above_threshold
    reasons = []
    worst_p = min(gated, key=lambda p: p.speedup) if gated else None
    if worst_p is not None and not slow and worst_p.speedup >= min_s:
        reasons.append(
            f"at every measured count >= thresholdTokens {thr} the split is at least {_x(worst_p.speedup)} "
            f"(lowest at {worst_p.tokens} tokens; minimum required {_x(min_s)}): {_speedups(gated)}"
        )
    elif gated:
        reasons.append(f"speedups at or above thresholdTokens {thr}: {_speedups(gated)}")
    errors = [p.max_abs_error for p in ordered if p.max_abs_error is not None]
    if errors and not any(e > gate.max_abs_error for e in errors):
        reasons.append(f"max abs error {max(errors):.3g} <= maxAbsError {gate.max_abs_error:.3g} at every checked point")
    return reasons


def gate_verdict(
    points: Iterable[KernelPoint],
    gate: GateSpec,
    gather_source: GatherSource,
    *,
    crossover: Crossover | None = None,
    recommended_threshold_tokens: int | None = None,
    cpu_timings: bool = False,
    advise_move: bool = True,
) -> GateOutcome:
    """Judge a sweep against the gate (rules in the module docstring).

    Args:
        points: the sweep, any order; ``speedup``, its interval and ``decided`` are taken as given.
        gate: threshold (tokens), minimum speedup (×) at or above it, max abs error, modelled-gather
            policy, threshold rounding (named in the reasons).
        gather_source: ``measured`` or ``modelled``.
        crossover: from :func:`~spx.analysis.crossover.find_crossover` (computed when omitted).
        recommended_threshold_tokens: from :mod:`spx.analysis.threshold`; ``None`` when there is no
            crossover. Only informs the reasons.
        cpu_timings: the samples are host-timed CPU smoke-run samples (``device: cpu``).
        advise_move: advise moving the threshold (:func:`threshold_reasons`; false when regimes disagree).

    Raises:
        ValueError: on a repeated token count.
    """
    ordered = sorted_points(points)
    if crossover is None:
        crossover = find_crossover(ordered)
    thr = gate.threshold_tokens
    fail, inconclusive = _correctness(ordered, gate)
    if not ordered:
        inconclusive.insert(0, "no measured points: nothing to judge")
    gated = [p for p in ordered if p.tokens >= thr]
    if ordered and not gated:
        inconclusive.append(
            f"no measured token count is at or above thresholdTokens {thr} (largest measured: "
            f"{ordered[-1].tokens}): the gate cannot be checked; extend the sweep"
        )
    slow, unresolved = _speed_at_threshold(gated, gate, gather_source)
    inconclusive += unresolved
    modelled = gather_source == "modelled" and not gate.allow_modelled_gather
    on_cpu = cpu_timings and not gate.allow_cpu_timings
    speed_verdict: Verdict = "Fail" if fail or slow else ("Inconclusive" if inconclusive else "Pass")
    verdict: Verdict
    if fail or (slow and not (modelled or on_cpu)):
        verdict = "Fail"
    elif inconclusive or modelled or on_cpu or slow:
        verdict = "Inconclusive"
    else:
        verdict = "Pass"
    # what the speeds alone would have decided; when the spread already leaves it Inconclusive the
    # cap changes nothing, so the reason says the timings could not decide either way
    caps = _cap_reasons("Fail" if slow else ("Inconclusive" if inconclusive else "Pass"), on_cpu, modelled,
                        gather_source)
    capped = verdict == "Inconclusive" and speed_verdict != "Inconclusive"  # the cap decided: its reason first
    reasons = [*(caps if capped else []), *fail, *slow, *inconclusive, *([] if capped else caps),
               *_informative(ordered, gated, gate, bool(slow)),
               *threshold_reasons(ordered, thr, crossover, recommended_threshold_tokens, gate.threshold_rounding,
                                  advise_move)]
    return GateOutcome(verdict, tuple(reasons), speed_verdict, bool(fail))
