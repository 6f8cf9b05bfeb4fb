"""What a report says first: the verdict and what decided it, the bottom line in one sentence, the next step.

``spx report`` and ``spx run`` print these lines before the table (:func:`print_report`), so a
user reads the decision, its reason and what to do next before any figure. Pure presentation of a judged
:class:`~spx.api.KernelStatus` (:func:`spx.analysis.judge.judge`): the figures are the status's own —
the stake rows (``kernel.uncertainty.stake``: −Δg and −Δh per layer and per prefill chunk of M tokens over
the model's layers), both regimes' summaries (``kernel.regimes``), ``kernel.decidedBy`` and
``kernel.nextStep``, and the step A/B's effects (``status.step``) when it ran.

Where the regimes disagree about the gate threshold, the bottom line recommends no threshold and gives
both regimes' figures (the analysis withholds its advice to move the threshold there too:
:func:`spx.analysis.verdict.threshold_reasons`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from spx.api import KernelStatus
from spx.api.status import RegimeSummary, StakeRow
from spx.api.step import StepPoint as StepEffect  # CONTRACT STUB (session 9): h3 rewrites the step decision
from spx.api.step import StepStatus
from spx.cli.tables import (
    VERDICT_STYLE,
    crossover_lines,
    fmt_tokens,
    host_deltas_differ,
    kernel_table,
    regime_of,
    terminal_width,
    uncertainty_lines,
)
from spx.vocabulary import CPU_NOTE, DECIDED_BY_MEANINGS

#: A regime as the bottom line names it.
REGIME_NAME = {"gpu-bound": "GPU-bound", "host-bound": "host-bound"}

#: The step that settles a disagreement between the regimes, when the status names none.
STEP_NEXT = ("run the step A/B on the deployment: set spec.serving.step (thresholds to try) and run `spx serving "
             "EXPERIMENT --out DIR` (or `spx run EXPERIMENT --serving`); the operator runs it in its bench pod")

#: The step that settles a verdict resting on a modelled gather.
GATHER_NEXT = ("measure the all-gather: run the sweep on as many GPUs of one node as tensorParallelSize "
               "(kernel.gather auto measures it there), or accept the model with gate.allowModelledGather")


def regimes_disagree(kernel: KernelStatus) -> bool:
    """Whether the GPU-bound and host-bound regimes disagree about the gate threshold (both judged)."""
    return kernel.regimes_agree is False and host_deltas_differ(kernel.points)


def decided_by_line(kernel: KernelStatus, verdict: str | None) -> str | None:
    """``decided by: step (the step A/B on the deployment: …)``: ``kernel.decidedBy`` and its meaning
    (:data:`spx.vocabulary.DECIDED_BY_MEANINGS`); ``None`` when the status does not say. ``none`` without a
    next step (a CPU smoke run: :func:`next_step_line` finds none) does not point at one: the reasons say why."""
    if verdict is None or kernel.decided_by is None:
        return None
    meaning = DECIDED_BY_MEANINGS[kernel.decided_by]
    if kernel.decided_by == "none" and next_step_line(kernel, verdict) is None:
        meaning = meaning.split(",", 1)[0] + "; the reasons say why"
    return f"decided by: {kernel.decided_by} ({meaning})"


def next_step_line(kernel: KernelStatus, verdict: str | None, gate_threshold: int | None = None) -> str | None:
    """``next step: …``: the status's ``nextStep``; else, when nothing decided, the first of: extend a sweep
    that stops below the gate threshold, the step A/B where the regimes disagree (:data:`STEP_NEXT`), measure
    a modelled gather (:data:`GATHER_NEXT`); ``None`` when the verdict stands."""
    if kernel.next_step:
        return f"next step: {kernel.next_step}"
    undecided = verdict == "Inconclusive" and kernel.decided_by in (None, "none")
    largest = max((p.tokens for p in kernel.points), default=None)
    if undecided and gate_threshold is not None and largest is not None and largest < gate_threshold:
        return (f"next step: extend the sweep to the gate threshold: add {gate_threshold} (and larger counts, up to "
                f"the deployment's largest batch) to sweep.tokens; the largest measured is {largest:,}")
    if undecided and regimes_disagree(kernel):
        return f"next step: {STEP_NEXT}"
    if undecided and kernel.gather_source == "modelled":
        return f"next step: {GATHER_NEXT}"
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
    name = REGIME_NAME[r.regime if r is not None else "gpu-bound"]
    if rec is None:
        return "no threshold is recommended: the split does not win at the largest measured count"
    wins = f"the split wins from ≈ {fmt_tokens(cross)} tokens" if cross is not None else "the split wins at every count"
    return f"recommended threshold {rec:,} tokens because {wins} in the {name} regime"


def _because_both(gpu: RegimeSummary | None, host: RegimeSummary | None, kernel: KernelStatus) -> str:
    """Where the regimes agree: the larger of their recommended thresholds (the split wins in both from
    there), because of both break-evens; none when either regime has none."""
    if gpu is None or host is None:
        return _because(gpu or host, kernel)
    if gpu.recommended_threshold_tokens is None or host.recommended_threshold_tokens is None:
        return ("no threshold is recommended: the split does not win at the largest measured count in the "
                + ("GPU-bound" if gpu.recommended_threshold_tokens is None else "host-bound") + " regime")
    rec = max(gpu.recommended_threshold_tokens, host.recommended_threshold_tokens)
    return (f"recommended threshold {rec:,} tokens because the split wins in both regimes from there (GPU-bound "
            f"break-even ≈ {fmt_tokens(gpu.crossover_tokens)}, host-bound ≈ {fmt_tokens(host.crossover_tokens)} "
            "tokens)")


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
        return _step_bottom_line(kernel, effect)
    return _kernel_bottom_line(kernel, gate_threshold)


def _step_bottom_line(kernel: KernelStatus, effect: StepEffect) -> str:
    """The bottom line from the step A/B's effect at the gate threshold (it decided: the regimes disagree)."""
    t = f"{effect.threshold_tokens:,}"
    verb = {"gain": "gaining", "loss": "costing"}.get(effect.outcome, "moving")
    regime = "regime undetermined" if effect.regime == "undetermined" else effect.regime
    head = (f"bottom line: on this node the step A/B measured the split at {t} tokens {verb} "
            f"{abs(effect.effect_ms):.2f} ms per {t}-token prefill step, 95 % interval [{effect.effect_low_ms:+.2f}, "
            f"{effect.effect_high_ms:+.2f}] ms ({effect.per_layer_us:+.1f} µs per layer; {regime})")
    holds = next((r for r in kernel.regimes if r.regime == effect.regime), None)
    advice = (f"; {_because(holds, kernel)}" if holds is not None else "")
    if effect.outcome == "gain":
        return f"{head}; threshold {t} stands: the split gains there" + advice
    if effect.outcome == "loss":
        return f"{head}; do not split from {t}: the split costs there" + advice
    return f"{head}; within the noise at {t}: neither a gain nor a loss"


def _kernel_bottom_line(kernel: KernelStatus, gate_threshold: int) -> str:
    """The bottom line from the kernel sweep's stake at the gate threshold and, when the sweep reaches it, at
    the largest batch the deployment forms (a full prefill chunk); both regimes where they differ."""
    t = f"{gate_threshold:,}"
    row = _stake_at(kernel, gate_threshold)
    if row is None or row.saving_ms_per_chunk is None:
        return f"bottom line: the sweep does not reach the gate threshold ({t} tokens): no stake there"
    host_shown = host_deltas_differ(kernel.points) and row.host_saving_ms_per_chunk is not None
    full = _full_chunk(kernel, gate_threshold, row.layers, host_shown)
    gpu = _regime_effect(row, full, host=False, first=True)
    modelled = "; gather modelled" if kernel.gather_source == "modelled" else ""
    where = f"on this node ({row.layers} layers{modelled}) the split at {t} tokens"
    gpu_r, host_r = regime_of(kernel, "gpu-bound"), regime_of(kernel, "host-bound")
    if not host_shown:
        return f"bottom line: {where} {gpu}; " + _because(gpu_r, kernel)
    both = (f"{where} {gpu} if the step is GPU-bound, and {_regime_effect(row, full, host=True, first=False)} "
            "if it is host-bound")
    if not regimes_disagree(kernel):
        return f"bottom line: {both}; " + _because_both(gpu_r, host_r, kernel)
    recs = f"GPU-bound alone: {_rec(gpu_r, kernel)}, host-bound alone: {_rec(host_r, kernel)}"
    return (f"bottom line: {both}; no threshold is recommended until a step measurement says which regime holds "
            f"({recs})")


def _regime_effect(row: StakeRow, full: StakeRow | None, *, host: bool, first: bool) -> str:
    """``gains 0.79 ms per 2,048-token prefill chunk and gains 2.60 ms per full 8,192-token chunk`` in one regime
    (``first``: with the units spelled out; else ``costs 1.13 ms and costs 2.10 ms``)."""
    at = _chunk(row, host)
    full_effect = _chunk(full, host) if full is not None else None
    if not first:
        return f"{at}" + (f" and {full_effect}" if full_effect else "")
    text = f"{at} per {row.tokens:,.0f}-token prefill chunk"
    if full is not None and full_effect:
        text += f" and {full_effect} per full {full.tokens:,.0f}-token chunk"
    return text


def _full_chunk(kernel: KernelStatus, gate_threshold: int, layers: int, host: bool) -> StakeRow | None:
    """The stake at the largest batch the deployment forms (``kernel.maxNumBatchedTokens``), when it is above
    the gate threshold and inside the measured range (never extrapolated)."""
    from spx.analysis.band import stake_at

    m = kernel.max_num_batched_tokens
    if m is None or m <= gate_threshold:
        return None
    row = stake_at(kernel.points, "largest batch", float(m), layers, host=host)
    return row if row.saving_ms_per_chunk is not None else None


def _rec(r: RegimeSummary | None, kernel: KernelStatus) -> str:
    rec = r.recommended_threshold_tokens if r is not None else kernel.recommended_threshold_tokens
    return "none" if rec is None else f"{rec:,}"


def decision_lines(kernel: KernelStatus, verdict: str | None, reasons: Sequence[str], gate_threshold: int | None, *,
                   step: StepStatus | None = None, cpu: bool = False) -> list[str]:
    """The lines printed under the verdict, in this order: the deciding reason, what decided, the bottom
    line, the next step (each only when known)."""
    lines = [f"because: {reasons[0]}"] if reasons else []
    for line in (decided_by_line(kernel, verdict), bottom_line(kernel, verdict, gate_threshold, step=step, cpu=cpu),
                 next_step_line(kernel, verdict, gate_threshold)):
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
        style = next((v for k, v in VERDICT_STYLE.items() if k == verdict), "bold")
        console.print(f"verdict: [{style}]{verdict}[/]")


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
    if reasons:
        console.print("reasons:", highlight=False, markup=False)
    for r in reasons:
        console.print(f"  • {r}", highlight=False, markup=False)
