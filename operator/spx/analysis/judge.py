"""The one judgement: a kernel result (+ serving and accuracy statuses) → the status' kernel section and verdict.

``spx run`` (its ``status.json``), ``spx report`` and the operator all call :func:`judge`, so a local run
and a cluster run reach the same verdict from the same result, and a partial run is capped the same way
everywhere. Pure: no I/O, no clock (the caller passes ``now`` to :func:`local_status`).

Rules:

1. **No usable result** (``None``, no points, points the analysis cannot use: a repeated token count, a
   time that is not finite and > 0) → no verdict; ``Decided`` reason ``BenchmarkFailed`` with the reason.
2. **A partial run** (``complete`` false or ``error`` set): judged on the points it has, but it never
   publishes a verdict (``Decided`` reason ``BenchmarkFailed``) and recommends only what its points
   support: a recommended threshold and a crossover only when the break-even is bracketed by two
   measured points (a losing one and a winning one); a split that wins "from the smallest measured
   count" of a run that stopped early, or a single point, yields no threshold and confidence ``none``.
   The reasons say it is partial (``n of N token counts``) and what the measured points alone show.
3. **A complete run**: :func:`spx.analysis.summary.evaluate` (both regimes' crossover, threshold and
   gate; the step A/B where the regimes disagree; a Pass above the deployment's largest batch refused:
   :mod:`spx.analysis.decide`); with serving/accuracy statuses (or ``require_vllm`` for a spec with
   ``serving``, where a missing section counts as undecided, never as a silent pass) the verdict covers
   every gate (:func:`spx.analysis.rollout.combine_verdict`); ``kernel.decidedBy`` names the
   measurement that decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from spx.analysis.decide import max_num_batched_tokens
from spx.analysis.rollout import combine_verdict, demoted_by
from spx.analysis.summary import Evaluation, evaluate, point_from_result, points_with_reasons
from spx.api.accuracy import AccuracyStatus
from spx.api.result import KernelResult, ResultSummary
from spx.api.serving import ServingStatus
from spx.api.spec import ExperimentSpec
from spx.api.status import (
    Condition,
    DecidedReason,
    Environment,
    ExperimentStatus,
    GatherSource,
    KernelPoint,
    KernelStatus,
    Verdict,
)
from spx.api.step import StepStatus

#: Said in every partial run's reasons and status message.
PARTIAL = "partial run"
#: Said wherever a CPU run's numbers are shown (status message, table caption, plot title).
#: Longest condition message written (Kubernetes allows 32 KiB; a readable message is short).
MESSAGE_MAX_CHARS = 4000


@dataclass(frozen=True)
class Judgement:
    """What :func:`judge` decided.

    Attributes:
        kernel: the status' ``kernel`` section (points by tokens, crossover in tokens, recommended
            threshold in tokens), capped for a partial run; ``None`` without usable points.
        verdict: ``Pass | Fail | Inconclusive`` over every gate; ``None`` for a partial or failed run.
        reason: the ``Decided`` condition's reason: the verdict, or ``BenchmarkFailed``.
        reasons: ``verdictReasons`` (deciding first); for a run without a verdict, why (first) and what
            its points show.
        message: one line for ``status.message`` / the ``Decided`` message.
        partial: the run stopped before its sweep finished (or reported an error).
        measured_verdict: for a partial run, the kernel verdict its points alone would get: shown by
            ``spx report``, never published as ``verdict``.
        serving, accuracy: the sections as judged (a missing expected one filled in as undecided).
        step: the step A/B's section as given (``status.step``).
    """

    kernel: KernelStatus | None
    verdict: Verdict | None
    reason: DecidedReason
    reasons: list[str]
    message: str
    partial: bool = False
    measured_verdict: Verdict | None = None
    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    step: StepStatus | None = None

    @property
    def decided_message(self) -> str:
        """The ``Decided`` condition's message (bounded)."""
        return self.message[:MESSAGE_MAX_CHARS]


def _device(result: KernelResult | ResultSummary) -> str | None:
    if isinstance(result, KernelResult) and result.device:
        return result.device
    return result.environment.device


def _points(result: KernelResult | ResultSummary) -> list[KernelPoint]:
    if isinstance(result, KernelResult):
        if len({p.tokens for p in result.points}) != len(result.points):
            return [point_from_result(p) for p in result.points]  # evaluate names the repeated count
        return points_with_reasons(result)
    return list(result.points)


def cap_partial(kernel: KernelStatus) -> tuple[KernelStatus, list[str]]:
    """The kernel section of a partial run, keeping only what its points support (module rule 2).

    Returns the capped section and a reason per withdrawn claim.
    """
    points = kernel.points
    if kernel.recommended_threshold_tokens is None and kernel.crossover_tokens is None:
        return kernel, []
    winning = [p for p in points if p.speedup > 1]
    losing_below = [p for p in points if p.speedup <= 1 and winning and p.tokens < winning[0].tokens]
    bracketed = bool(winning and losing_below) and len(points) >= 2
    if bracketed:
        return kernel, []
    capped = kernel.model_copy(update={
        "crossover_tokens": None, "crossover_tokens_rounded": None, "recommended_threshold_tokens": None,
        "crossover_confidence": "none", "uncertainty": None,
    })
    return capped, [
        f"{PARTIAL}: no crossover and no threshold are recommended: the split wins from the smallest of the "
        f"{len(points)} measured token count(s), and the counts that did not run could not confirm a break-even"
    ]


def _largest_batch(spec: ExperimentSpec) -> tuple[int | None, list[str]]:
    """The deployment's largest batch (:func:`spx.analysis.decide.max_num_batched_tokens`) and a reason when
    ``spec.serving.extraArgs`` has a malformed value (then not checked, and said so)."""
    try:
        return max_num_batched_tokens(spec), []
    except ValueError as err:
        return None, [f"the deployment's largest batch is unknown: {err}"]


def _partial(ev: Evaluation, spec: ExperimentSpec, result: KernelResult | ResultSummary, measured: int,
             serving: ServingStatus | None, accuracy: AccuracyStatus | None, step: StepStatus | None) -> Judgement:
    """The judgement of a partial run (module rule 2): no verdict, what its points support and show."""
    kernel, withdrawn = cap_partial(ev.kernel)
    kernel = kernel.model_copy(update={"decided_by": None, "next_step": None})  # no verdict: nothing decided it
    total = len(spec.sweep.tokens)
    why = result.error or "the run did not complete (no error recorded)"
    refine = spec.sweep.refine
    counted = (f"{measured} of {total} token counts" if refine is None else
               f"{measured} of {total} listed + up to {refine.max_added_points} adaptive token counts")
    head = f"{PARTIAL}: {counted} measured before it stopped ({why}); a partial run publishes no verdict"
    shows = f"the measured points alone would be judged {ev.verdict}" + (f": {ev.reasons[0]}" if ev.reasons else "")
    return Judgement(kernel=kernel, verdict=None, reason="BenchmarkFailed", reasons=[head, *withdrawn, shows],
                     message=f"benchmark failed ({head})", partial=True, measured_verdict=ev.verdict,
                     serving=serving, accuracy=accuracy, step=step)


def _fail(reason: str, kernel: KernelStatus | None = None, *, partial: bool = False) -> Judgement:
    return Judgement(kernel=kernel, verdict=None, reason="BenchmarkFailed", reasons=[reason],
                     message=f"benchmark failed: {reason}", partial=partial)


def judge(
    result: KernelResult | ResultSummary | None,
    spec: ExperimentSpec,
    *,
    serving: ServingStatus | None = None,
    accuracy: AccuracyStatus | None = None,
    require_vllm: bool = False,
    gather_source: GatherSource | None = None,
    step: StepStatus | None = None,
) -> Judgement:
    """Judge one run of ``spec`` (rules in the module docstring).

    Args:
        result: the bench's result document (``result.json``) or its bounded summary (a pod's
            termination message), ``None`` when the run left none.
        spec: the experiment's spec: its gate, TP size (threshold rounding) and sweep (how many
            token counts a complete run has) are used; the result's own spec is not.
        serving, accuracy: the vLLM serving A/B and GSM8K statuses, when they ran.
        require_vllm: the run was asked to run ``spec.serving`` / ``spec.accuracy`` (``spx run
            --serving``, the operator): a section that is missing is judged undecided.
        gather_source: overrides the result's (``measured``/``modelled``).
        step: the step A/B's status (``status.step``): decides when the kernel regimes disagree.

    Returns:
        The :class:`Judgement`. Never raises for a bad result: an unusable one is ``BenchmarkFailed``.
    """
    if result is None:
        return _fail("the run left no result")
    max_batched, spec_note = _largest_batch(spec)
    try:
        points = _points(result)
        ev = evaluate(
            points, spec.gate, gather_source or result.gather_source, spec.parallelism.tensor_parallel_size,
            gemm_backend=result.gemm_backend, timer=result.timer, device=_device(result), step=step,
            max_batched_tokens=max_batched,
        )
    except ValueError as err:  # a repeated token count, a time that is not finite and > 0
        return _fail(f"the result cannot be analysed: {err}", partial=not result.complete)
    if isinstance(result, KernelResult) and result.max_cudagraph_capture_size is not None:
        ev = Evaluation(ev.kernel.model_copy(update={"max_cudagraph_capture_size": result.max_cudagraph_capture_size}),
                        ev.verdict, ev.reasons)
    partial = not result.complete or result.error is not None
    if not points:
        return _fail(result.error or "the result has no points", partial=partial)
    if partial:
        return _partial(ev, spec, result, len(points), serving, accuracy, step)
    verdict, reasons, kernel = ev.verdict, [*ev.reasons, *spec_note], ev.kernel
    if require_vllm and spec.serving is not None:
        if serving is None and spec.serving.points:
            serving = ServingStatus(reasons=["the serving A/B left no result"])
        if accuracy is None and spec.accuracy is not None:
            accuracy = AccuracyStatus(reasons=["GSM8K: the run left no result"],
                                      max_drop_points=spec.accuracy.max_drop_points)
    if serving is not None or accuracy is not None:
        verdict, reasons = combine_verdict(ev.verdict, reasons, serving, accuracy)
        by = demoted_by(ev.verdict, verdict, serving, accuracy)
        kernel = kernel.model_copy(update={"decided_by": by}) if by else kernel
    first = reasons[0] if reasons else verdict
    return Judgement(kernel=kernel, verdict=verdict, reason=verdict, reasons=reasons, message=f"{verdict}: {first}",
                     serving=serving, accuracy=accuracy, step=step)


def _condition(type_: str, status: str, reason: str, message: str, now: str) -> Condition:
    return Condition.model_validate({"type": type_, "status": status, "reason": reason,
                                     "message": message[:MESSAGE_MAX_CHARS], "lastTransitionTime": now})


def local_status(
    judgement: Judgement,
    *,
    now: str,
    started_at: str | None = None,
    finished_at: str | None = None,
    environment: Environment | None = None,
    completed_summary: str | None = None,
    note: str | None = None,
) -> ExperimentStatus:
    """``status.json`` of a run outside Kubernetes (``spx run``), in the operator's vocabulary.

    Conditions ``Completed`` (``BenchmarkCompleted`` / ``BenchmarkFailed``) and ``Decided`` (reason:
    the verdict, or ``BenchmarkFailed``); ``phase`` ``Succeeded`` with a verdict, else ``Failed``;
    ``note`` (e.g. the CPU smoke-run note) prefixes the message. ``now`` is RFC 3339 UTC.
    """
    ok = judgement.verdict is not None
    prefix = f"{note}. " if note else ""
    completed = (
        _condition("Completed", "True", "BenchmarkCompleted", completed_summary or "benchmark completed", now)
        if ok else _condition("Completed", "False", "BenchmarkFailed", judgement.reasons[0], now)
    )
    decided = _condition("Decided", "True", judgement.reason, judgement.reasons[0] if judgement.reasons
                         else judgement.reason, now)
    return ExperimentStatus(
        phase="Succeeded" if ok else "Failed",
        start_time=started_at,
        completion_time=finished_at or now,
        message=f"{prefix}{judgement.message}"[:MESSAGE_MAX_CHARS],
        conditions=[completed, decided],
        environment=environment,
        kernel=judgement.kernel,
        serving=judgement.serving,
        accuracy=judgement.accuracy,
        step=judgement.step,
        verdict=judgement.verdict,
        verdict_reasons=list(judgement.reasons),
    )
