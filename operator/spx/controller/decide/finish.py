"""The terminal decision of a run whose Job ended and whose outputs were read (pure).

The judgement (result and bench documents → the status' sections, verdict and words) is called ONCE per run, in
:func:`judge_collected` (:func:`spx.analysis.judge.judge`, as ``spx run`` and ``spx report`` call it): its kernel
section serves a run without a verdict too (capped as a partial run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spx.analysis.judge import Judgement, judge
from spx.analysis.summary import point_from_result, points_with_reasons
from spx.api import wire
from spx.api.accuracy import AccuracyStatus
from spx.api.serving import ServingStatus
from spx.api.spec import ExperimentSpec
from spx.api.status import Environment, ExperimentStatus, KernelStatus
from spx.api.step import StepStatus
from spx.controller.decide import conditions as cond
from spx.controller.decide.decision import Action, DeleteJobs, Event, Observed, Plan, Results, StoreResult
from spx.controller.decide.objects import meta as _meta
from spx.controller.decide.observation import Observation
from spx.controller.decide.pod_exit import termination_message
from spx.controller.decide.results import Collected, Measurement, collect, measurement
from spx.controller.manifests.naming import result_configmap_name
from spx.controller.manifests.result_configmap import build_result_configmap
from spx.vocabulary import CompletedReason, FailureReason


def judge_collected(spec: ExperimentSpec, meas: Any, collected: Collected) -> Judgement:
    """The one judgement of a run (:func:`spx.analysis.judge.judge`, which ``spx run`` and ``spx report`` call too):
    the kernel measurement read from the pod (``meas``, what a ``ResultSummary`` carries; ``None``: none) with the
    log's bench documents (the serving, GSM8K and step results, summarised there once: the step against the
    kernel points' Δg and Δh), else the pod's bounded statuses. The operator always asked for the vLLM sections
    its spec names, so a missing one is undecided (``require_vllm``), never a silent pass. Never raises: an
    unusable result is a ``Judgement`` with ``verdict None`` and reason ``BenchmarkFailed``."""
    summary = collected.summary
    serving = collected.serving_result or (summary.serving if summary is not None else None)
    accuracy = collected.accuracy_result or (summary.accuracy if summary is not None else None)
    step = collected.step_result or (summary.step if summary is not None else None)
    if spec.serving is None:
        serving = accuracy = step = None
    elif spec.serving.step is None:
        step = None
    return judge(meas, spec, serving=serving, accuracy=accuracy, step=step, require_vllm=True)


def _collected(o: Observed, obs: Observation) -> tuple[Collected, str | None, str | None]:
    """Parse the pod's outputs: the log read at the end, or the one received while the pod ran when the
    pod is gone or that one is longer (lines written in the grace period of a deleted pod)."""
    r = o.results or Results()
    message = r.message if r.message is not None else (termination_message(obs.pod) if obs.pod else None)
    log = r.log
    progress = r.progress_log if r.progress_log is not None else o.progress_log
    if progress is not None and (log is None or len(progress) > len(log)):
        log = progress  # the pod is gone, or the stream received more than the read after the end
    return collect(message, log), message, log


def finish(o: Observed, spec: ExperimentSpec, status: ExperimentStatus, job: Mapping[str, Any], obs: Observation,
           nows: str) -> Plan:
    """The terminal decision of a run whose Job ended and whose outputs were read: its verdict
    (:func:`_verdict`) or why it failed (:func:`_failed`), the result ConfigMap stored either way."""
    gen = o.generation
    collected, message, log = _collected(o, obs)
    pod_name = str(_meta(obs.pod).get("name")) if obs.pod is not None else None
    meas = _measure(spec, obs, collected)
    judged = _judge_once(spec, collected, meas)
    serving, accuracy, step = judged.serving, judged.accuracy, judged.step
    judgement = _judgement(obs, collected, meas, judged)
    configmap = build_result_configmap(
        o.name, o.namespace, o.uid, gen,
        result=collected.result.to_wire() if collected.result is not None else None,
        termination_message=message, log=log, problems=collected.problems, pod_name=pod_name,
        serving_result=collected.serving_result.to_wire() if collected.serving_result is not None else None,
        accuracy_result=collected.accuracy_result.to_wire() if collected.accuracy_result is not None else None,
        step_result=collected.step_result.to_wire() if collected.step_result is not None else None,
    )
    environment: Environment | None = meas.environment if meas is not None else None
    if environment is not None and environment.node is None and obs.node:
        environment = environment.model_copy(update={"node": obs.node})
    update: dict[str, Any] = {
        "completion_time": nows, "result_config_map": result_configmap_name(o.name, gen), "environment": environment,
        "serving": serving, "accuracy": accuracy,
        "step": wire.fit_step(step, threshold_tokens=spec.gate.threshold_tokens) if step is not None else None}
    store, refused = _store(o, configmap, update)
    after: tuple[Action, ...] = (DeleteJobs((str(_meta(job).get("name")),), f"gave up: {obs.reason}"),) if obs.abort else ()
    if judgement is not None:
        new, events = _verdict(status, judgement, obs, update, refused, nows, gen)
        return Plan(f"verdict-{judgement.verdict}", new, events, before=store, after=after, slot_freed=True,
                        observed_duration=True)
    reason, completed_reason, msg = _failure(obs, collected, meas, (serving, accuracy, step),
                                             obs.completed_reason, pod_name)
    msg += f"; {refused}" if refused else ""
    new = cond.with_kernel(status, _partial_kernel(collected, meas, judged), None, [])
    new = cond.apply_transition(new, cond.failed(reason, msg, completed_reason, obs.message,
                                                 scheduled=cond.ran_on(obs.node)), nows, gen)
    return Plan(reason, new.model_copy(update=update), (("Warning", reason, msg),),
                    before=store, after=after, slot_freed=True, observed_duration=True)


def _measure(spec: ExperimentSpec, obs: Observation, collected: Collected) -> Measurement | None:
    """The kernel measurement or None; what cannot be read, and a bench a succeeded run left no result of, goes
    into ``collected.problems``."""
    try:
        meas: Measurement | None = measurement(collected, points_with_reasons)  # (why refinement added a count)
    except Exception as err:  # any result the analysis cannot use ends BenchmarkFailed, never a retry loop
        collected.problems.append(f"could not convert the result's points: {type(err).__name__}: {err}")
        meas = None
    summary = collected.summary
    if spec.serving is not None and obs.state == "succeeded":
        if collected.serving_result is None and (summary is None or summary.serving is None) and spec.serving.points:
            collected.problems.append("the serving A/B left no result (no serving line in the log, none in the summary)")
        if collected.accuracy_result is None and (summary is None or summary.accuracy is None) and spec.accuracy:
            collected.problems.append("GSM8K left no result (no accuracy line in the log, none in the summary)")
        if spec.serving.step is not None and collected.step_result is None and (summary is None or summary.step is None):
            collected.problems.append("the step A/B left no result (no step line in the log, none in the summary)")
    return meas


def _judge_once(spec: ExperimentSpec, collected: Collected, meas: Measurement | None) -> Judgement:
    """:func:`judge_collected`, a failure of the analysis named in ``collected.problems`` (never a retry loop)."""
    try:
        return judge_collected(spec, meas, collected)
    except Exception as err:  # a result or document the analysis cannot use: decided, not retried forever
        collected.problems.append(f"the analysis could not use the result: {type(err).__name__}: {err}")
        return Judgement(kernel=None, verdict=None, reason="BenchmarkFailed", reasons=[str(err)[:500]],
                         message=f"benchmark failed: {str(err)[:500]}")


def _judgement(obs: Observation, collected: Collected, meas: Measurement | None, judged: Judgement) -> Judgement | None:
    """The judgement of a run that succeeded with every point, None when there is no verdict (the reason in
    ``collected.problems``)."""
    if not (obs.state == "succeeded" and meas is not None and meas.complete and meas.points):
        return None
    if judged.verdict is None:
        collected.problems.append(f"the analysis could not use the result: {judged.message}")
        return None
    return judged


def _verdict(status: ExperimentStatus, judgement: Judgement, obs: Observation, update: dict[str, Any],
             refused: str, nows: str, gen: int) -> tuple[ExperimentStatus, tuple[Event, ...]]:
    """The status and events of a run with a verdict (``update``: the fields every terminal status sets)."""
    assert judgement.verdict is not None  # (_judgement returns judgements with a verdict only)
    new = cond.with_kernel(status, judgement.kernel, judgement.verdict, judgement.reasons)
    new = cond.apply_transition(new, cond.decided(judgement.verdict, judgement.reasons, "JobSucceeded", obs.message,
                                            cond.ran_on(obs.node)), nows, gen)
    update.update(serving=judgement.serving, accuracy=judgement.accuracy, judgement=judgement.summary)
    event: Event = ("Normal" if judgement.verdict == "Pass" else "Warning", f"Verdict{judgement.verdict}",
                    new.message or "")
    events = (event, ("Warning", "ResultNotStored", refused)) if refused else (event,)
    return new.model_copy(update=update), events


def _partial_kernel(collected: Collected, meas: Measurement | None, judged: Judgement) -> KernelStatus | None:
    """What the points of a run without a verdict support, capped as ``spx run`` caps it (the one judgement's
    kernel section); the points the bench printed before it died; else None."""
    if meas is not None and meas.points:
        if judged.kernel is not None:
            return judged.kernel
        return KernelStatus(points=meas.points, gather_source=meas.gather_source,  # type: ignore[arg-type]
                            gemm_backend=meas.gemm_backend, timer=meas.timer)
    if collected.partial_points:  # the points the bench printed before it died: kept
        return printed_points(collected)
    return None


def _store(o: Observed, configmap: dict[str, Any], update: dict[str, Any]) -> tuple[tuple[Action, ...], str]:
    """The action that stores the result ConfigMap — none when the API server refused it for good
    (``o.store_refused``: a quota, an admission policy); then ``update`` names no ConfigMap and the
    second value says why (for the message or a ``ResultNotStored`` event). The run is decided either
    way: a refusal that lasts must not hold it in ``Analyzing`` for ever."""
    if o.store_refused is None:
        return (StoreResult(configmap),), ""
    update["result_config_map"] = None
    return (), f"the result ConfigMap could not be written (the status keeps the points): {o.store_refused}"


def printed_points(collected: Collected) -> KernelStatus | None:
    """The kernel section of the point lines a bench printed before it stopped: the points only (the
    last line of a token count wins) — no crossover, no threshold, no verdict."""
    if not collected.partial_points:
        return None
    by_tokens = {p.tokens: p for p in collected.partial_points}
    return KernelStatus(points=[point_from_result(by_tokens[t]) for t in sorted(by_tokens)],
                        gather_source=collected.partial_points[-1].gather_source)


def job_vanished(o: Observed, status: ExperimentStatus, jname: str, nows: str) -> Plan:
    """The run's Job was deleted before it finished (confirmed with the API server): ``InfraFailed`` /
    ``JobDeleted``. What its pod wrote while it ran (the followed log, ``o.progress_log``) is kept: its
    points in ``status.kernel`` (points only: a run cut short recommends nothing) and the log, with what
    was wrong with it, in the result ConfigMap."""
    gen = o.generation
    msg = f"Job {jname} was deleted before it finished"
    update: dict[str, Any] = {"completion_time": nows}
    before: tuple[Action, ...] = ()
    kernel = None
    if o.progress_log:
        collected = collect(None, o.progress_log)
        kernel = printed_points(collected)
        if kernel is not None:
            msg += f"; {len(kernel.points)} point(s) measured before it were kept"
        problems = [p for p in collected.problems if not p.startswith("termination message")]
        update["result_config_map"] = result_configmap_name(o.name, gen)
        before, refused = _store(o, build_result_configmap(
            o.name, o.namespace, o.uid, gen, log=o.progress_log,
            problems=[f"{msg} (the log below is what its pod wrote until then)", *problems]), update)
        msg += f"; {refused}" if refused else ""
    new = cond.with_kernel(status, kernel, None, []) if kernel is not None else status
    new = cond.apply_transition(new, cond.failed("InfraFailed", msg, "JobDeleted"), nows, gen).model_copy(update=update)
    return Plan("job-vanished", new, (("Warning", "InfraFailed", msg),), before=before, slot_freed=True,
                    observed_duration=True)


def _failure(obs: Observation, collected: Collected, meas: Any,
             vllm: tuple[ServingStatus | None, AccuracyStatus | None, StepStatus | None], completed_reason: CompletedReason,
             pod_name: str | None) -> tuple[FailureReason, CompletedReason, str]:
    """(Decided reason, Completed reason, message) of a run that reached no verdict; ``vllm``: the serving,
    accuracy and step statuses (the first failure of one is named)."""
    serving, accuracy, step = vllm
    problems = "; ".join(collected.problems)
    kept = f"; {len(collected.partial_points)} point(s) measured before it were kept" if collected.partial_points else ""
    if obs.state == "succeeded":
        if obs.pod is None and meas is None:
            return ("InfraFailed", "ResultLost",
                    f"the pod of the Job succeeded but was removed before its result was read "
                    f"(garbage-collected while the operator was away?){kept}")
        # The Job did succeed (Completed keeps JobSucceeded); the result is what failed.
        if meas is None:
            return "BenchmarkFailed", completed_reason, f"the bench exited 0 but left no usable result: {problems}"
        if not meas.complete:
            return ("BenchmarkFailed", completed_reason,
                    f"the bench reported an incomplete run: {meas.error or 'no error given'}")
        if not meas.points:
            return "BenchmarkFailed", completed_reason, "the bench's result has no points"
        return "BenchmarkFailed", completed_reason, f"the analysis could not use the result: {problems}"
    reason = obs.outcome or "InfraFailed"
    msg = obs.message + (kept if obs.reason in ("NodeLost", "Evicted", "PodDeleted") else "")
    if meas is not None and meas.error:
        msg += f"; the bench reported: {meas.error}"
    if meas is None and collected.problems and obs.outcome == "BenchmarkFailed":
        msg += f"; result: {problems}"
    vllm_note = (serving.failures[0] if serving is not None and serving.failures
                 else accuracy.reasons[0] if accuracy is not None and accuracy.gate_passed is None
                 and accuracy.reasons else f"step A/B: {step.failures[0]}" if step is not None and step.failures
                 else None)
    if vllm_note:  # e.g. the vLLM benches could not start
        msg += f"; {vllm_note}"
    return reason, completed_reason, msg
