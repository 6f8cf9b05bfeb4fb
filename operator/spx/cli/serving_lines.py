"""What ``spx serving OUT`` prints: the verdict, then per point the change, noise and check, then the step A/B."""

from __future__ import annotations

from spx.api.serving import ServingPointStatus, ServingStatus
from spx.api.status import ExperimentStatus
from spx.api.step import StepStatus


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def _point_line(p: ServingPointStatus) -> str:
    fmt = _fmt
    change = "—" if p.change_pct is None else f"{p.change_pct:+.2f}%"
    noise = "no noise estimate" if p.within_kind_pct is None else f"noise ±{p.within_kind_pct:.2f}%"
    check = ("control (split cannot engage)" if p.control else "ok" if p.passed else
             "FAIL" if p.passed is False else "undecided")
    at = f" T={p.threshold_tokens}" if p.threshold_tokens is not None else ""
    temp = p.sampling.get("temperature")
    return (f"  {p.name}{at}: {p.metric} main {fmt(p.main_mean)} → split {fmt(p.split_mean)} {p.unit}, change {change} "
            f"({noise}): {check}" + (f"; temperature {temp}" if temp else ""))


def serving_lines(serving: ServingStatus) -> list[str]:
    """The serving A/B: gate, per point change / noise / check, failures."""
    gate = "passed" if serving.gate_passed else "FAILED" if serving.gate_passed is False else "inconclusive"
    lines = [f"serving A/B: gate {gate}" + (" (CPU servers)" if serving.cpu_timings else "")]
    lines += [_point_line(p) for p in serving.points]
    lines += [f"  failed: {f}" for f in serving.failures]
    return lines


def step_lines(step: StepStatus) -> list[str]:
    """The one-server step A/B: the statistic and interval it uses, whether it may decide (and why not), what the
    effects say (:func:`spx.analysis.step.summarize`'s reasons), the failures."""
    usable = "usable" if step.usable else "NOT usable"
    lines = [f"step A/B (one server, the split switched per request; {step.statistic} of per-round paired "
             f"differences, {step.confidence:.0%} simultaneous intervals; {step.rounds} rounds"
             + (f", stopped: {step.stopped_because}" if step.stopped_because else "") + f"): {usable}"
             + (" (CPU server)" if step.cpu_timings else "")]
    lines += [f"  not usable: {r}" for r in step.unusable_reasons[:6]]
    lines += [f"  {r}" for r in step.reasons]
    lines += [f"  failed: {f}" for f in step.failures[:10]]
    return lines


def bench_lines(status: ExperimentStatus) -> list[str]:
    """Everything ``spx serving`` prints: the verdict and its deciding reason first, then each section."""
    if status.verdict is None:  # (no verdict: the benches stopped or never started; the status says why)
        lines = [f"verdict: none ({status.phase or 'undecided'}): {status.message or 'no bench decided'}"]
    else:
        lines = [f"verdict: {status.verdict}: {status.verdict_reasons[0] if status.verdict_reasons else ''}"]
    j = status.judgement  # (the one judgement's words: spx.analysis.judge)
    if j is not None:
        lines += [*([f"decided by: {j.decided_by}"] if j.decided_by else []), *([j.bottom_line] if j.bottom_line else []),
                  *j.notes, *(f"stopped early: {s}" for s in j.stopped), *(f"not judged: {r}" for r in j.refused),
                  *([f"next step: {j.next_step}"] if j.next_step else [])]
    if status.serving is not None:
        lines += serving_lines(status.serving)
    if status.accuracy is not None:
        lines.append("GSM8K: " + ("; ".join(status.accuracy.reasons) or "no result"))
    if status.step is not None:
        lines += step_lines(status.step)
    return lines
