"""What a report says first: the verdict and what decided it, the bottom line in one sentence, the next step.

``spx report`` and ``spx run`` print these lines before the table (:func:`print_report`), so a
user reads the decision, its reason and what to do next before any figure. Pure presentation of a judged
:class:`~spx.api.KernelStatus` (:func:`spx.analysis.judge.judge`): the figures are the status's own —
the stake rows (``kernel.uncertainty.stake``: −Δg and −Δh per layer and per prefill chunk of M tokens over
the model's layers), both regimes' summaries (``kernel.regimes``), ``kernel.decidedBy`` and
``kernel.nextStep``, and the step A/B's effects (``status.step``) when it ran.

Where the regimes disagree about the gate threshold, advice to move the threshold is withheld
(:func:`shown_reasons`): a recommendation that holds in one regime and costs in the other is no advice.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from spx.api import KernelStatus
from spx.api.status import RegimeSummary, StakeRow
from spx.api.step import StepEffect, StepStatus
from spx.cli.tables import (
    CPU_NOTE,
    VERDICT_STYLE,
    crossover_lines,
    fmt_tokens,
    host_deltas_differ,
    kernel_table,
    regime_of,
    terminal_width,
    uncertainty_lines,
)

#: What decided a verdict, as the report's first line says it (``kernel.decidedBy``).
DECIDED_BY_TEXT = {
    "correctness": "correctness (the split's output differs from the replicated one)",
    "kernel": "the kernel sweep (both regimes agree, or only one applies)",
    "step": "the step A/B on the deployment (the kernel regimes disagree)",
    "deployment": "the deployment (the threshold lies above the largest batch it forms)",
    "serving": "the serving A/B (it demoted the kernel verdict)",
    "accuracy": "GSM8K (it demoted the kernel verdict)",
    "none": "nothing: no measurement decided",
}

#: The step that settles a disagreement between the regimes, when the status names none.
STEP_NEXT = ("run the step A/B on the deployment: set spec.serving.step (thresholds to try) and run `spx serving "
             "EXPERIMENT --out DIR` (or `spx run EXPERIMENT --serving`); the operator runs it in its bench pod")

#: Phrases of the kernel gate's advice to move the threshold (:func:`spx.analysis.verdict.threshold_reasons`).
THRESHOLD_ADVICE = ("leaves speedup on the table", "is below threshold", "is above threshold", "equals threshold")


def regimes_disagree(kernel: KernelStatus) -> bool:
    """Whether the GPU-bound and host-bound regimes disagree about the gate threshold (both judged)."""
    return kernel.regimes_agree is False and host_deltas_differ(kernel.points)


def shown_reasons(kernel: KernelStatus, reasons: Sequence[str]) -> list[str]:
    """``reasons`` as the report prints them: where the regimes disagree, without the advice to move the
    threshold (it holds in one regime only) and with one line saying it was withheld."""
    if not regimes_disagree(kernel):
        return list(reasons)
    kept = [r for r in reasons if not any(a in r for a in THRESHOLD_ADVICE)]
    if len(kept) < len(reasons):
        kept.append("advice to move the threshold is withheld: the regimes disagree about it, and what one "
                    "regime gains the other loses")
    return kept


def decided_by_line(kernel: KernelStatus, verdict: str | None) -> str | None:
    """``decided by: …`` for ``kernel.decidedBy`` (``None`` when the status does not say)."""
    if verdict is None or kernel.decided_by is None:
        return None
    return f"decided by: {DECIDED_BY_TEXT.get(kernel.decided_by, kernel.decided_by)}"


def next_step_line(kernel: KernelStatus, verdict: str | None) -> str | None:
    """``next step: …``: the status's ``nextStep``, else, where the regimes disagree and nothing decided, the
    step A/B (:data:`STEP_NEXT`); ``None`` when the verdict stands."""
    if kernel.next_step:
        return f"next step: {kernel.next_step}"
    if verdict == "Inconclusive" and regimes_disagree(kernel) and kernel.decided_by in (None, "none"):
        return f"next step: {STEP_NEXT}"
    return None


def _stake_at(kernel: KernelStatus, tokens: float | None) -> StakeRow | None:
    u = kernel.uncertainty
    if u is None or tokens is None:
        return None
    return next((r for r in u.stake if abs(r.tokens - tokens) < 1e-6), None)


def _effect(saving_ms: float | None) -> str | None:
    """``gains 0.78 ms`` / ``costs 1.04 ms`` of a saving (> 0: the split saves)."""
    if saving_ms is None:
        return None
    return f"{'gains' if saving_ms > 0 else 'costs'} {abs(saving_ms):.2f} ms"


def _because(r: RegimeSummary | None, kernel: KernelStatus) -> str:
    """``recommended threshold T because …`` from one regime (or the top-level GPU-bound figures)."""
    rec = r.recommended_threshold_tokens if r is not None else kernel.recommended_threshold_tokens
    cross = r.crossover_tokens if r is not None else kernel.crossover_tokens
    name = r.regime if r is not None else "gpu-bound"
    if rec is None:
        return "no threshold is recommended: the split does not win at the largest measured count"
    wins = f"the split wins from ≈ {fmt_tokens(cross)} tokens" if cross is not None else "the split wins at every count"
    return f"recommended threshold {rec:,} tokens because {wins} in the {name} regime"


def _chunk(row: StakeRow, host: bool) -> str | None:
    return _effect(row.host_saving_ms_per_chunk if host else row.saving_ms_per_chunk)


def _step_effect(step: StepStatus | None, threshold: int) -> StepEffect | None:
    if step is None:
        return None
    return next((e for e in step.effects if e.threshold_tokens == threshold and e.role == "split"), None)


def bottom_line(kernel: KernelStatus, verdict: str | None, gate_threshold: int | None, *,
                step: StepStatus | None = None, cpu: bool = False) -> str | None:
    """The bottom line in one sentence: what the split at the gate threshold gains or costs per prefill chunk
    on this node and which threshold is recommended, because of what (the regime that holds, the step A/B, the
    deployment or correctness); both regimes' figures when nothing decided. ``None`` without a verdict or a
    threshold (a partial run)."""
    if verdict is None or gate_threshold is None or not kernel.points:
        return None
    t = f"{gate_threshold:,}"
    if cpu:
        return "bottom line: none about GPUs (a CPU smoke run proves the pipeline; its timings say nothing about GPUs)"
    if kernel.decided_by == "correctness":
        return "bottom line: the split's output differs from the replicated one beyond gate.maxAbsError: do not split"
    if kernel.decided_by == "deployment" and kernel.max_num_batched_tokens is not None:
        return (f"bottom line: a threshold of {t} tokens lies above the largest batch this deployment forms "
                f"({kernel.max_num_batched_tokens:,} tokens): the split would never engage; "
                + _because(regime_of(kernel, "gpu-bound"), kernel))
    effect = _step_effect(step, gate_threshold) if kernel.decided_by == "step" else None
    if effect is not None:
        holds = regime_of(kernel, effect.regime) if effect.regime in ("gpu-bound", "host-bound") else None  # type: ignore[arg-type]
        return (f"bottom line: on this node the step A/B measured the split at {t} tokens "
                f"{'gaining' if effect.effect_ms < 0 else 'costing'} {abs(effect.effect_ms):.2f} ms per {t}-token "
                f"prefill step [{effect.effect_low_ms:+.2f}, {effect.effect_high_ms:+.2f}] ({effect.per_layer_us:+.1f} µs "
                f"per layer, {effect.regime}); " + (_because(holds, kernel) if holds else
                                                     f"the step A/B decides the threshold {t}"))
    return _kernel_bottom_line(kernel, gate_threshold)


def _kernel_bottom_line(kernel: KernelStatus, gate_threshold: int) -> str:
    """The bottom line from the kernel sweep's stake at the gate threshold (both regimes where they differ)."""
    t = f"{gate_threshold:,}"
    row = _stake_at(kernel, gate_threshold)
    gpu = _chunk(row, False) if row is not None else None
    if gpu is None:
        return f"bottom line: the sweep does not reach the gate threshold ({t} tokens): no stake there"
    host_shown = host_deltas_differ(kernel.points)
    host = _chunk(row, True) if row is not None and host_shown else None
    where = f"on this node the split at {t} tokens"
    per = f"per {t}-token prefill chunk ({row.layers} layers)"
    gpu_r, host_r = regime_of(kernel, "gpu-bound"), regime_of(kernel, "host-bound")
    if host is None:
        return f"bottom line: {where} {gpu} {per}; " + _because(gpu_r, kernel)
    if not regimes_disagree(kernel):
        return f"bottom line: {where} {gpu} {per} if the layer is GPU-bound and {host} if host-bound; " + _because(
            gpu_r, kernel)
    recs = (f"GPU-bound alone: {_rec(gpu_r, kernel)}, host-bound alone: {_rec(host_r, kernel)}")
    return (f"bottom line: {where} {gpu} {per} if the layer is GPU-bound and {host} if it is host-bound; no "
            f"threshold is recommended until a step measurement says which regime holds ({recs})")


def _rec(r: RegimeSummary | None, kernel: KernelStatus) -> str:
    rec = r.recommended_threshold_tokens if r is not None else kernel.recommended_threshold_tokens
    return "none" if rec is None else f"{rec:,}"


def decision_lines(kernel: KernelStatus, verdict: str | None, reasons: Sequence[str], gate_threshold: int | None, *,
                   step: StepStatus | None = None, cpu: bool = False) -> list[str]:
    """The lines printed under the verdict, in this order: the deciding reason, what decided, the bottom
    line, the next step (each only when known)."""
    shown = shown_reasons(kernel, reasons)
    lines = [f"because: {shown[0]}"] if shown else []
    for line in (decided_by_line(kernel, verdict), bottom_line(kernel, verdict, gate_threshold, step=step, cpu=cpu),
                 next_step_line(kernel, verdict)):
        if line:
            lines.append(line)
    return lines


def print_verdict(console: Console, verdict: str | None, reasons: Sequence[str], partial: bool = False) -> None:
    """Print ``verdict`` (coloured; ``none`` when the run did not complete) and one bullet per reason."""
    print_verdict_line(console, verdict, partial)
    for r in reasons:
        console.print(f"  • {r}", highlight=False, markup=False)


def print_verdict_line(console: Console, verdict: str | None, partial: bool = False) -> None:
    """Print ``verdict: …`` (coloured; ``none`` with why when the run did not complete)."""
    if verdict is None:
        why = "partial run: no verdict from a run that stopped early" if partial else "the run did not complete"
        console.print(f"[bold red]verdict: none[/] ({why})")
    else:
        console.print(f"verdict: [{VERDICT_STYLE.get(verdict, 'bold')}]{verdict}[/]")


def print_report(
    console: Console,
    kernel: KernelStatus,
    *,
    verdict: str | None,
    reasons: Sequence[str],
    title: str | None = None,
    cpu: bool = False,
    gate_threshold_tokens: int | None = None,
    notes: Sequence[str] = (),
    partial: str | None = None,
    step: StepStatus | None = None,
) -> None:
    """The decision first (the verdict, its deciding reason, what decided it, the bottom line and the next
    step: :mod:`spx.cli.decision`), then the table (the CPU note and ``partial``, the partial-run note, as its
    caption), the crossover and threshold of each regime, the uncertainty and stakes, and every reason."""
    print_verdict_line(console, verdict, partial is not None)
    for line in decision_lines(kernel, verdict, reasons, gate_threshold_tokens, step=step, cpu=cpu):
        console.print(line, highlight=False, markup=False)
    caption_parts = [*([f"PARTIAL RUN: {partial}"] if partial else []), *([CPU_NOTE] if cpu else []), *notes]
    caption = "\n".join(caption_parts) or None
    if kernel.points:
        console.print(kernel_table(kernel, title=title, caption=caption, width=terminal_width(console)))
    else:
        console.print(f"{title or 'sweep'}: no points measured", markup=False)
        if caption:
            console.print(caption, markup=False)
    for line in [*crossover_lines(kernel, gate_threshold_tokens), *uncertainty_lines(kernel, stakes=not cpu)]:
        console.print(line, highlight=False, markup=False)
    if shown := shown_reasons(kernel, reasons):
        console.print("reasons:", highlight=False, markup=False)
    for r in shown:
        console.print(f"  • {r}", highlight=False, markup=False)
