"""The verdict of a run of the vLLM benches alone (``spx serving OUT``): serving A/B, GSM8K, step A/B. Pure."""

from __future__ import annotations

from spx.analysis.rollout import by_outcome, gate_list
from spx.api.accuracy import AccuracyStatus
from spx.api.serving import ServingStatus
from spx.api.status import Verdict
from spx.api.step import StepStatus


def benches_verdict(serving: ServingStatus | None, accuracy: AccuracyStatus | None, step: StepStatus | None, *,
                    allow_cpu_timings: bool = False) -> tuple[Verdict, list[str]]:
    """The verdict of a run of the vLLM benches alone (``spx serving``), deciding reason first.

    Fail when a gate failed; Pass when every gate that ran passed; else Inconclusive. The step A/B alone
    decides nothing here: it says which regime the step is in, which the kernel verdict needs (``spx run
    --serving``, the operator); its effects are reported. A CPU step A/B decides nothing unless
    ``allow_cpu_timings``.
    """
    gates = gate_list(serving, accuracy)
    step_lines: list[str] = []
    if step is not None:
        cpu = " (CPU servers: decides nothing)" if step.cpu_timings and not allow_cpu_timings else ""
        step_lines = [f"step A/B{cpu}: {r}" for r in step.reasons if not r.startswith("CPU server")]
        step_lines += [f"step A/B: {f}" for f in step.failures[:5]]
    if not gates:
        return "Inconclusive", ["no serving or accuracy gate ran: the step A/B reports effects, the verdict on the "
                                "threshold needs the kernel bench too (spx run --serving)", *step_lines]
    failed, undecided, passed = by_outcome(gates)
    if failed:
        return "Fail", failed + undecided + passed + step_lines
    if undecided:
        return "Inconclusive", undecided + passed + step_lines
    return "Pass", passed + step_lines
