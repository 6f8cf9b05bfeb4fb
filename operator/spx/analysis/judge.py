"""The one judgement: a run's kernel points and bench documents → its status (verdict, sections, words).

Every path calls :func:`judge`, once per run: ``spx run`` and ``spx run --serving`` (their ``status.json``),
``spx serving`` (the vLLM benches alone), ``spx report`` and the operator's finish step. The status it builds
holds every field a reader prints — the verdict, what decided it, the recommended threshold of the deciding
measurement, the step's expected effect, the bottom line, the next step (``status.judgement``) — so ``spx
report``, ``spx gate``, the CR status and the metrics only read and format them. Pure: no I/O, no clock (the
caller passes ``now`` to :func:`local_status`).

Rules:

1. **No usable result** (``None``, no points, points the analysis cannot use: a repeated token count, a
   time that is not finite and > 0) → no verdict; ``Decided`` reason ``BenchmarkFailed`` with the reason.
   A run of the vLLM benches alone (``benches_only``) is judged on them: a usable step A/B decides, else the
   serving and GSM8K gates.
2. **A partial run** (``complete`` false or ``error`` set): judged on the points it has, but it never
   publishes a verdict (``Decided`` reason ``BenchmarkFailed``) and recommends only what its points
   support: a recommended threshold and a crossover only when the break-even is bracketed by two
   measured points (a losing one and a winning one); a split that wins "from the smallest measured
   count" of a run that stopped early, or a single point, yields no threshold and confidence ``none``.
   The reasons say it is partial (``n of N token counts``) and what the measured points alone show.
3. **A complete run**: the bench documents admitted (another experiment's, spec's or run's refused with a
   warning: :mod:`spx.analysis.bench_docs`), the step document summarised against the kernel points' Δg and
   Δh, then :func:`spx.analysis.summary.evaluate` once (both regimes; a usable step decides:
   :mod:`spx.analysis.decide`); with serving/accuracy statuses (or ``require_vllm`` for a spec with
   ``serving``, where a missing section counts as undecided, never as a silent pass) the verdict covers
   every gate (:func:`spx.analysis.rollout.combine_verdict`; the serving A/B demotes a step decision only with
   a resolved effect of its own); ``kernel.decidedBy`` and ``judgement.decidedBy`` name what decided.
4. **A stage that stopped early** (``stopped``: a signal, a crash, vLLM missing) in a run whose spec asked for
   it: no verdict (``BenchmarkFailed``, phase ``Failed``), what the finished stages alone show kept as
   ``measured_verdict`` and ``judgement.stopped``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from spx.analysis.bench_docs import Benches, RunIdentity, admit, step_status
from spx.analysis.decide import Decision, max_num_batched_tokens
from spx.analysis.rollout import combine_verdict, demoted_by, serving_headline
from spx.analysis.summary import Evaluation, evaluate, point_from_result, points_with_reasons
from spx.analysis.words import bottom_line, next_step
from spx.api.accuracy import AccuracyResult, AccuracyStatus
from spx.api.result import KernelResult, ResultSummary
from spx.api.serving import ServingResult, ServingStatus
from spx.api.spec import ExperimentSpec
from spx.api.status import (
    Condition,
    DecidedBy,
    DecidedReason,
    Environment,
    ExperimentStatus,
    GatherSource,
    JudgementStatus,
    KernelPoint,
    KernelStatus,
    Verdict,
)
from spx.api.step import StepResult, StepStatus
from spx.vocabulary import CompletedReason

#: ``judgement.stopped`` of the status ``spx run --serving`` writes while its vLLM benches run: a run killed then
#: (SIGTERM, SIGKILL) leaves no kernel-only verdict behind (issue #35).
BENCHES_PENDING = "the vLLM benches had not finished when this status was written (killed, or still running)"
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
        step: the step A/B's section (``status.step``), summarised once against the kernel points.
        summary: ``status.judgement``: what decided, the recommendation, expectation, bottom line, next step.
        warnings: bench documents refused (another experiment's, spec's or run's).
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
    summary: JudgementStatus | None = None
    warnings: list[str] = field(default_factory=list)

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
             serving: ServingStatus | None, accuracy: AccuracyStatus | None, step: StepStatus | None,
             stopped: Sequence[str] = (), refused: Sequence[str] = ()) -> Judgement:
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
    return Judgement(kernel=kernel, verdict=None, reason="BenchmarkFailed", reasons=[head, *withdrawn, shows, *refused],
                     message=f"benchmark failed ({head})", partial=True, measured_verdict=ev.verdict,
                     serving=serving, accuracy=accuracy, step=step,
                     summary=JudgementStatus(stopped=list(stopped)[:8], refused=[r[:500] for r in refused][:8],
                                             cpu=_device(result) == "cpu"),
                     warnings=list(refused))


def _fail(reason: str, kernel: KernelStatus | None = None, *, partial: bool = False, stopped: Sequence[str] = (),
          refused: Sequence[str] = ()) -> Judgement:
    reasons = [*(f"stopped early: {s}" for s in stopped), reason, *refused]
    return Judgement(kernel=kernel, verdict=None, reason="BenchmarkFailed", reasons=reasons,
                     message=f"benchmark failed: {reasons[0]}", partial=partial or bool(stopped),
                     summary=JudgementStatus(stopped=list(stopped)[:8], refused=[r[:500] for r in refused][:8]),
                     warnings=list(refused))


def judge(
    result: KernelResult | ResultSummary | None,
    spec: ExperimentSpec,
    *,
    serving: ServingResult | ServingStatus | None = None,
    accuracy: AccuracyResult | AccuracyStatus | None = None,
    step: StepResult | StepStatus | None = None,
    require_vllm: bool = False,
    gather_source: GatherSource | None = None,
    identity: RunIdentity | None = None,
    stopped: Sequence[str] = (),
    benches_only: bool = False,
) -> Judgement:
    """Judge one run of ``spec``, once (rules in the module docstring): every path calls this.

    Args:
        result: the bench's result document (``result.json``) or its bounded summary (a pod's
            termination message), ``None`` when the run left none (or ran the vLLM benches alone).
        spec: the experiment's spec: its gate, TP size (threshold rounding) and sweep (how many
            token counts a complete run has) are used; the result's own spec is not.
        serving, accuracy, step: the vLLM serving A/B, GSM8K and step A/B: each its result document (summarised
            here: the step against the kernel points' Δg and Δh) or its status section.
        require_vllm: the run was asked to run ``spec.serving`` / ``spec.accuracy`` (``spx run
            --serving``, the operator): a section that is missing is judged undecided.
        gather_source: overrides the result's (``measured``/``modelled``).
        identity: whose bench documents are admitted (:class:`spx.analysis.bench_docs.RunIdentity`); another's are
            refused with a warning (``Judgement.warnings``, ``status.judgement.refused``).
        stopped: stages that stopped early (a signal, a crash, vLLM missing): no verdict (module rule 4).
        benches_only: the run ran the vLLM benches alone (``spx serving``): ``result`` ``None`` is expected.

    Returns:
        The :class:`Judgement`. Never raises for a bad result: an unusable one is ``BenchmarkFailed``.
    """
    benches = admit(serving, accuracy, step, spec, identity)
    max_batched, spec_note = _largest_batch(spec)
    if result is None:
        if benches_only and (benches.any or stopped):
            return _benches(spec, benches, identity, max_batched, stopped)
        return _with_benches(_fail("the run left no result", stopped=stopped, refused=benches.refused), benches,
                             step_status(benches, [], spec, identity))
    try:
        points = _points(result)
        step_section = step_status(benches, points, spec, identity)
        cpu = _device(result) == "cpu"
        ev = evaluate(
            points, spec.gate, gather_source or result.gather_source, spec.parallelism.tensor_parallel_size,
            gemm_backend=result.gemm_backend, timer=result.timer, device=_device(result), step=step_section,
            max_batched_tokens=max_batched,
        )
    except ValueError as err:  # a repeated token count, a time that is not finite and > 0
        return _with_benches(_fail(f"the result cannot be analysed: {err}", partial=not result.complete,
                                   stopped=stopped, refused=benches.refused), benches, None)
    if isinstance(result, KernelResult) and result.max_cudagraph_capture_size is not None:
        ev = replace(ev, kernel=ev.kernel.model_copy(
            update={"max_cudagraph_capture_size": result.max_cudagraph_capture_size}))
    partial = not result.complete or result.error is not None
    if not points:
        return _with_benches(_fail(result.error or "the result has no points", partial=partial, stopped=stopped,
                                   refused=benches.refused), benches, step_section)
    if partial:
        return _partial(ev, spec, result, len(points), benches.serving, benches.accuracy, step_section,
                        stopped, benches.refused)
    serving_s, accuracy_s = _expected(spec, benches, require_vllm, stopped)
    verdict, reasons, kernel = ev.verdict, [*ev.reasons, *spec_note], ev.kernel
    if serving_s is not None or accuracy_s is not None:
        verdict, reasons, by = _combine(ev, reasons, serving_s, accuracy_s)
        kernel = kernel.model_copy(update={"decided_by": by}) if by else kernel
    d = ev.decision or Decision(verdict, kernel.decided_by or "none", tuple(reasons))
    summary = _summary(d, kernel.decided_by, kernel, step_section, spec, cpu, benches.refused, stopped)
    kernel = kernel.model_copy(update={"next_step": summary.next_step})  # (one next step: the status's)
    j = Judgement(kernel=kernel, verdict=verdict, reason=verdict, reasons=[*reasons, *benches.refused],
                  message=f"{verdict}: {reasons[0] if reasons else verdict}", serving=serving_s,
                  accuracy=accuracy_s, step=step_section, summary=summary, warnings=list(benches.refused))
    return _stopped(j, stopped) if stopped else j


def _with_benches(j: Judgement, benches: Benches, step: StepStatus | None) -> Judgement:
    """A judgement without a verdict that keeps the bench sections it was given (the status shows them)."""
    return replace(j, serving=benches.serving, accuracy=benches.accuracy, step=step)


def _expected(spec: ExperimentSpec, benches: Benches, require_vllm: bool,
              stopped: Sequence[str] = ()) -> tuple[ServingStatus | None, AccuracyStatus | None]:
    """The serving and accuracy sections, a missing one that the run was asked for filled in as undecided (with
    why, when a stage stopped: ``stopped[0]``, e.g. "the vLLM benches did not start: …", so the status and the
    pod's summary carry it to the operator)."""
    serving, accuracy = benches.serving, benches.accuracy
    why = stopped[0] if stopped else None
    if require_vllm and spec.serving is not None:
        if serving is None and spec.serving.points:
            serving = (ServingStatus(failures=[why], reasons=[why]) if why else
                       ServingStatus(reasons=["the serving A/B left no result"]))
        if accuracy is None and spec.accuracy is not None:
            accuracy = AccuracyStatus(reasons=[f"GSM8K: {why or 'the run left no result'}"],
                                      max_drop_points=spec.accuracy.max_drop_points)
    return serving, accuracy


def _combine(ev: Evaluation, reasons: list[str], serving: ServingStatus | None,
             accuracy: AccuracyStatus | None) -> tuple[Verdict, list[str], DecidedBy | None]:
    """The verdict over every gate (:func:`spx.analysis.rollout.combine_verdict`). A step decision is demoted by the
    serving A/B only with a resolved effect of its own (its gate failed), never by its noise (undecided)."""
    noise: list[str] = []
    if ev.kernel.decided_by == "step" and serving is not None and serving.gate_passed is None:
        noise = [f"{serving_headline(serving)}: it does not overrule the step A/B (no resolved effect of its own)"]
        serving = None
    verdict, combined = combine_verdict(ev.verdict, reasons, serving, accuracy)
    return verdict, [*combined, *noise], demoted_by(ev.verdict, verdict, serving, accuracy)


def _summary(d: Decision, decided_by: DecidedBy | None, kernel: KernelStatus | None, step: StepStatus | None,
             spec: ExperimentSpec, cpu: bool, refused: Sequence[str], stopped: Sequence[str]) -> JudgementStatus:
    """``status.judgement``: the deciding measurement's recommendation, expectation, bottom line and next step."""
    t = spec.gate.threshold_tokens
    by = decided_by or d.decided_by  # (a serving/accuracy gate that demoted the verdict; the recommendation stands)
    line = bottom_line(kernel, d, t, step=step, cpu=cpu)
    if cpu and not spec.gate.allow_cpu_timings and not line.startswith("CPU"):
        line = f"CPU smoke run: {line}"
    return JudgementStatus(
        decided_by=by, recommended_threshold_tokens=d.recommended_threshold_tokens,
        expected_effect=d.expectation, bottom_line=line[:2048], next_step=next_step(kernel, d, t),
        notes=list(d.notes[:8]),
        stopped=list(stopped)[:8], refused=[r[:500] for r in refused][:8], cpu=cpu,
        cpu_timings_allowed=spec.gate.allow_cpu_timings)


def stop(j: Judgement, stopped: Sequence[str]) -> Judgement:
    """``j`` for a run whose spec asked for stages that stopped early (or have not run yet: :data:`BENCHES_PENDING`,
    what ``spx run --serving`` writes while its benches run): no verdict (``BenchmarkFailed``), what the finished
    stages alone would say kept as ``measured_verdict`` (module rule 4). Nothing is judged again."""
    return _stopped(j, stopped) if stopped else j


def _stopped(j: Judgement, stopped: Sequence[str]) -> Judgement:
    head = f"{PARTIAL}: stopped early ({'; '.join(stopped)}); a run whose stages did not all finish publishes no verdict"
    shows = f"the stages that finished alone would be judged {j.verdict}" + (f": {j.reasons[0]}" if j.reasons else "")
    summary = j.summary.model_copy(update={"stopped": list(stopped)[:8]}) if j.summary else JudgementStatus(
        stopped=list(stopped)[:8])
    return replace(j, verdict=None, reason="BenchmarkFailed", reasons=[head, shows, *j.reasons[1:]],
                   message=f"benchmark failed ({head})", partial=True, measured_verdict=j.verdict, summary=summary)


def _benches(spec: ExperimentSpec, benches: Benches, identity: RunIdentity | None, max_batched: int | None,
             stopped: Sequence[str]) -> Judgement:
    """A run of the vLLM benches alone (``spx serving``): a usable step A/B decides (:func:`spx.analysis.decide.
    decide`'s rule 2; the serving A/B demotes it only with a resolved effect); else the serving and GSM8K gates
    (:func:`spx.analysis.benches.benches_verdict`)."""
    from spx.analysis.benches import benches_verdict
    from spx.analysis.decide import step_decision

    step = step_status(benches, [], spec, identity)
    sv = step_decision(step, spec.gate, max_batched)
    if sv.verdict is not None:
        assert step is not None
        d = Decision(sv.verdict, "step", sv.reasons, None, sv.next_step, step.recommended_threshold_tokens,
                     sv.expectation)
        verdict, reasons, by = _combine(Evaluation(KernelStatus(decided_by="step"), sv.verdict, list(sv.reasons), d),
                                        list(sv.reasons), benches.serving, benches.accuracy)
    else:
        verdict, reasons = benches_verdict(benches.serving, benches.accuracy, step,
                                           allow_cpu_timings=spec.gate.allow_cpu_timings)
        reasons = [*(sv.reasons if step is not None else ()), *reasons]
        by = None
        d = Decision(verdict, "none", tuple(reasons), None, sv.next_step)
    cpu = step is not None and step.cpu_timings
    summary = _summary(d, by or d.decided_by, None, step, spec, cpu, benches.refused, stopped)
    j = Judgement(kernel=None, verdict=verdict, reason=verdict, reasons=[*reasons, *benches.refused],
                  message=f"{verdict}: {reasons[0] if reasons else verdict}", serving=benches.serving,
                  accuracy=benches.accuracy, step=step, summary=summary, warnings=list(benches.refused))
    return _stopped(j, stopped) if stopped else j


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
    done: CompletedReason = "BenchmarkCompleted"
    completed = (
        _condition("Completed", "True", done, completed_summary or "benchmark completed", now)
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
        judgement=judgement.summary,
        verdict=judgement.verdict,
        verdict_reasons=list(judgement.reasons),
    )
