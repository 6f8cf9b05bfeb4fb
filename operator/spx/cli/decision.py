"""What a report says first: the verdict and what decided it, the bottom line in one sentence, the next step.

``spx report`` and ``spx run`` print these lines before the table (:func:`print_report`), so a user reads the
decision, its reason and what to do next before any figure. Pure presentation: every line is a field of the
judged status (``status.judgement``, written once by :func:`spx.analysis.judge.judge`: ``decidedBy``, the bottom
line built from the deciding measurement by :mod:`spx.analysis.words`, ``nextStep``, the notes); nothing is
judged or worded again here, so the report, the status and ``spx gate`` never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from spx.api import KernelStatus
from spx.api.status import JudgementStatus
from spx.cli.tables import (
    VERDICT_STYLE,
    crossover_lines,
    kernel_table,
    terminal_width,
    uncertainty_lines,
)
from spx.vocabulary import CPU_NOTE, DECIDED_BY_MEANINGS


def decided_by_line(judgement: JudgementStatus | None, verdict: str | None) -> str | None:
    """``decided by: step (the step A/B on the deployment: …)``: ``judgement.decidedBy`` and its meaning
    (:data:`spx.vocabulary.DECIDED_BY_MEANINGS`); ``None`` when the status does not say. ``none`` without a
    next step (a CPU smoke run) does not point at one: the reasons say why."""
    if verdict is None or judgement is None or judgement.decided_by is None:
        return None
    meaning = DECIDED_BY_MEANINGS[judgement.decided_by]
    if judgement.decided_by == "none" and not judgement.next_step:
        meaning = meaning.split(",", 1)[0] + "; the reasons say why"
    return f"decided by: {judgement.decided_by} ({meaning})"


def next_step_line(judgement: JudgementStatus | None) -> str | None:
    """``next step: …``: the status's ``judgement.nextStep``; ``None`` when the verdict stands."""
    return f"next step: {judgement.next_step}" if judgement is not None and judgement.next_step else None


def decision_lines(verdict: str | None, reasons: Sequence[str], judgement: JudgementStatus | None,
                   cpu: bool = False) -> list[str]:
    """The lines printed under the verdict, in this order: the CPU note (a CPU smoke run says so first), the
    deciding reason, what decided, the bottom line, the notes, the next step (each only when known)."""
    lines = [CPU_NOTE] if cpu or (judgement is not None and judgement.cpu) else []
    lines += [f"because: {reasons[0]}"] if reasons else []
    j = judgement
    for line in (decided_by_line(j, verdict), j.bottom_line if j is not None and verdict is not None else None,
                 *(j.notes if j is not None else ()), *(f"stopped early: {s}" for s in (j.stopped if j else ())),
                 next_step_line(j)):
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
    judgement: JudgementStatus | None = None,
) -> None:
    """The decision first (the verdict, its deciding reason, what decided it, the bottom line and the next
    step: :mod:`spx.cli.decision`), then the table (the CPU note and ``partial``, the partial-run note, as its
    caption), the crossover and threshold of each regime, the uncertainty and stakes, and every reason."""
    print_verdict_line(console, verdict, partial is not None)
    for line in decision_lines(verdict, reasons, judgement, cpu):
        console.print(line, highlight=False, markup=False)
    printed_cpu = cpu or (judgement is not None and judgement.cpu)  # (decision_lines said it first: once is enough)
    caption_parts = [*([f"PARTIAL RUN: {partial}"] if partial else []), *notes]
    if cpu and not printed_cpu:
        caption_parts.append(CPU_NOTE)
    caption = "\n".join(caption_parts) or None
    if kernel.points:
        console.print(kernel_table(kernel, title=title, caption=caption, width=terminal_width(console)))
    else:
        console.print(f"{title or 'sweep'}: no points measured", markup=False)
        if caption:
            console.print(caption, markup=False)
    from spx.analysis.kernel_mix import mix_expectation_line
    from spx.api.stage import V41_NUM_LAYERS

    mix = [] if cpu else [mix_expectation_line(e, V41_NUM_LAYERS) for e in kernel.mix_expectations]
    for line in [*crossover_lines(kernel, gate_threshold_tokens), *uncertainty_lines(kernel, stakes=not cpu), *mix]:
        console.print(line, highlight=False, markup=False)
    if reasons:
        console.print("reasons:", highlight=False, markup=False)
    for r in reasons:
        console.print(f"  • {r}", highlight=False, markup=False)
