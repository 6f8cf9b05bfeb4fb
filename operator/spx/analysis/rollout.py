"""The experiment's verdict over all its gates: the kernel gate, and the serving A/B and GSM8K gates.

Pure. The kernel gate (:mod:`spx.analysis.verdict`) decides Pass | Fail | Inconclusive; the serving
gate (:func:`spx.analysis.serving.gate_reasons`) and the accuracy gate
(:func:`spx.analysis.accuracy.gate`) each decide passed (``True``), failed (``False``) or not
decidable (``None``). Combined:

1. **Fail** when the kernel verdict is Fail or a serving/accuracy gate failed;
2. **Inconclusive** when the kernel verdict is Inconclusive or a serving/accuracy gate could not
   decide (``gatePassed`` unset: a variant without a value, nothing gated, a failed arm);
3. **Pass** otherwise — every gate that ran passed.

A section the spec does not have (``None``) takes no part. Reasons keep the kernel's and add one
headline per serving/accuracy gate; the reasons of the gates that decided the verdict come first.

The kernel verdict already holds the step A/B's decision where the kernel regimes disagree
(:mod:`spx.analysis.decide`); the serving and accuracy gates can only demote it (:func:`demoted_by`
names the gate that did, for ``kernel.decidedBy``).
"""

from __future__ import annotations

from collections.abc import Sequence

from spx.api.accuracy import AccuracyStatus
from spx.api.serving import ServingStatus
from spx.api.status import DecidedBy, Verdict


def serving_headline(serving: ServingStatus) -> str:
    """One line on the serving gate's outcome, naming the failing or undecidable points."""
    if serving.gate_passed is False:
        failing = {p.name for p in serving.points if p.passed is False}
        detail = [r for r in serving.reasons if r.split(":", 1)[0] in failing]
        return "serving A/B gate failed: " + "; ".join(detail or serving.reasons[:3])
    if serving.gate_passed is None:
        detail = [r for r in serving.reasons if not r.endswith(": ok")]
        return "serving A/B gate inconclusive: " + "; ".join(detail[:3] or ["no decision"])
    gated = sum(1 for p in serving.points if p.passed is not None)
    return f"serving A/B gate passed ({gated} gated point{'s' if gated != 1 else ''} within bounds)"


def accuracy_headline(accuracy: AccuracyStatus) -> str:
    """One line on the GSM8K gate's outcome (the gate's own reason, then any failed run)."""
    head = accuracy.reasons[0] if accuracy.reasons else "GSM8K: no result"
    extra = accuracy.reasons[1:3]
    if accuracy.gate_passed is False:
        return "accuracy gate failed: " + "; ".join([head, *extra])
    if accuracy.gate_passed is None:
        return "accuracy gate inconclusive: " + "; ".join([head, *extra])
    return "accuracy gate passed: " + head


#: One gate's outcome: passed (True), failed (False) or not decidable (None), and its headline.
Gate = tuple[bool | None, str]


def gate_list(serving: ServingStatus | None, accuracy: AccuracyStatus | None) -> list[Gate]:
    """The serving and accuracy gates that ran (a section the spec does not have takes no part), serving first,
    each with its headline (:func:`serving_headline`, :func:`accuracy_headline`): spx's one list of them."""
    gates: list[Gate] = []
    if serving is not None:
        gates.append((serving.gate_passed, serving_headline(serving)))
    if accuracy is not None:
        gates.append((accuracy.gate_passed, accuracy_headline(accuracy)))
    return gates


def by_outcome(gates: Sequence[Gate]) -> tuple[list[str], list[str], list[str]]:
    """The headlines of the failed, the undecided and the passed gates, each in the gates' order."""
    return ([h for ok, h in gates if ok is False], [h for ok, h in gates if ok is None],
            [h for ok, h in gates if ok is True])


def combine_verdict(
    kernel_verdict: Verdict,
    kernel_reasons: Sequence[str],
    serving: ServingStatus | None = None,
    accuracy: AccuracyStatus | None = None,
) -> tuple[Verdict, list[str]]:
    """``(verdict, reasons)`` of the whole experiment (see the module docstring)."""
    gates = gate_list(serving, accuracy)
    if not gates:
        return kernel_verdict, list(kernel_reasons)
    failed, undecided, passed = by_outcome(gates)
    verdict: Verdict
    if kernel_verdict == "Fail" or failed:
        verdict = "Fail"
        first = list(kernel_reasons) + failed if kernel_verdict == "Fail" else failed + list(kernel_reasons)
        return verdict, first + undecided + passed
    if kernel_verdict == "Inconclusive" or undecided:
        verdict = "Inconclusive"
        first = list(kernel_reasons) + undecided if kernel_verdict == "Inconclusive" else undecided + list(kernel_reasons)
        return verdict, first + passed
    return "Pass", list(kernel_reasons) + passed


def demoted_by(kernel_verdict: Verdict, verdict: Verdict, serving: ServingStatus | None,
               accuracy: AccuracyStatus | None) -> DecidedBy | None:
    """The gate that changed ``kernel_verdict`` into ``verdict`` (:func:`combine_verdict`), ``None`` when unchanged.

    A failed gate before an undecided one, serving before accuracy.
    """
    if verdict == kernel_verdict:
        return None
    for wanted in (False, None):
        if serving is not None and serving.gate_passed is wanted:
            return "serving"
        if accuracy is not None and accuracy.gate_passed is wanted:
            return "accuracy"
    return None
