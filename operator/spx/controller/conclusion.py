"""The controller's decision step: pure, side-effect free, table-tested.

``conclude(Observed) -> Decision``: from what the reactor observed about one experiment (its spec,
stored status, its Jobs and their pods, the answers to earlier questions, the time) to the new
status, the events to post and the actions to take — the shape of kopf's
``_core/intents/causes.py`` (detect a cause, purely) against ``_core/reactor/processing.py`` (carry
it out). :mod:`spx.controller.reactor` carries a :class:`Decision` out; when a decision needs
something only the API server can tell (:data:`Need`: is that Job really gone, is there a slot,
what did the pod write), the reactor finds out and calls :func:`conclude` again with the answer.

Nothing here awaits, reads a clock or touches the network.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spx.analysis import combine_verdict, evaluate, points_from_result
from spx.analysis.accuracy import summarize as summarize_accuracy
from spx.analysis.serving import summarize as summarize_serving
from spx.analysis.summary import point_from_result
from spx.api.accuracy import AccuracyStatus
from spx.api.loading import SpecError
from spx.api.serving import ServingStatus
from spx.api.spec import ExperimentSpec
from spx.api.status import Environment, ExperimentStatus, KernelStatus
from spx.controller import conditions as cond
from spx.controller.manifests import BenchOptions, build_job, job_name, result_configmap_name
from spx.controller.pod_outcome import Observation, Timeouts, observe, termination_message
from spx.controller.result_configmap import build_result_configmap
from spx.controller.results import Collected, collect, measurement, vllm_statuses

Manifest = dict[str, Any]


# Questions the reactor answers (then decides again) -------------------------------------------------


@dataclass(frozen=True)
class AskAdmission:
    """Is there a slot under the operator's concurrency limit for a new run?"""


@dataclass(frozen=True)
class CreateJob:
    """Create this Job; tell me how it went (created/adopted, refused, or a foreign Job has the name)."""

    manifest: Manifest


@dataclass(frozen=True)
class ConfirmJobGone:
    """The status names Job ``name`` but the store has none: ask the API server, not the cache."""

    name: str


@dataclass(frozen=True)
class FetchFailedCreate:
    """Why did the Job controller create no pod for Job ``job`` (its latest ``FailedCreate`` event)?"""

    job: str


@dataclass(frozen=True)
class ReadResults:
    """Read the pod's termination message and log (``pod`` None: the pod is gone)."""

    pod: str | None


Need = AskAdmission | CreateJob | ConfirmJobGone | FetchFailedCreate | ReadResults


# Effects the reactor carries out --------------------------------------------------------------------


@dataclass(frozen=True)
class DeleteJobs:
    """Delete these Jobs (background propagation: their pods go with them)."""

    names: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class StoreResult:
    """Create (or refresh) the result ConfigMap — only while the owning experiment still exists."""

    manifest: Manifest


@dataclass(frozen=True)
class ReadProgress:
    """Read the running pod's log now, so its points survive a node loss."""

    pod: str
    pod_uid: str


Action = DeleteJobs | StoreResult | ReadProgress

#: (type, reason, message) of a core/v1 Event about the experiment.
Event = tuple[str, str, str]


@dataclass(frozen=True)
class Decision:
    """What to do for one experiment.

    Order of execution: ``before`` (effects), the ``status`` write (None: leave ``.status`` as it
    is) with its ``events``, ``after`` (effects), then ``need`` (find out and decide again) or a
    re-check in ``requeue_after_s`` seconds. ``slot_freed``: queued experiments may start now.
    ``outcome`` labels ``spx_reconcile_total``.
    """

    outcome: str
    status: ExperimentStatus | None = None
    events: tuple[Event, ...] = ()
    before: tuple[Action, ...] = ()
    after: tuple[Action, ...] = ()
    need: Need | None = None
    requeue_after_s: float | None = None
    slot_freed: bool = False
    observed_duration: bool = False


# What the reactor observed ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """The answer to :class:`AskAdmission`: ``admitted``, else how many run (``active``) of ``limit``;
    ``synced`` False while the reactor has not listed both experiments and Jobs yet (then: wait)."""

    admitted: bool
    active: int = 0
    limit: int = 0
    synced: bool = True


@dataclass(frozen=True)
class JobCreation:
    """The answer to :class:`CreateJob`: ``code``/``message`` of a refusal (400/403/422), or
    ``foreign`` (a Job of that name belongs to someone else)."""

    code: int | None = None
    message: str = ""
    foreign: bool = False


@dataclass(frozen=True)
class Results:
    """The raw outputs of the run's pod (the answer to :class:`ReadResults`): its termination message
    and its log (None: not available), and the log read while it still ran (``progress_log``)."""

    message: str | None = None
    log: str | None = None
    progress_log: str | None = None


@dataclass(frozen=True)
class Observed:
    """The inputs of :func:`conclude` for one experiment (plain data; the reactor fills it in).

    ``jobs``: this experiment's Jobs (any generation) from the store; ``pods``: the pods of those
    Jobs; ``spec``: the validated spec of this generation or the validation error. The answers to
    earlier :data:`Need` questions: ``admission``, ``creation``, ``job_gone`` (the API server said
    404 for the status' Job), ``failed_create``, ``results``, ``progress_log`` (the running pod's log
    as last read, and when: ``progress_read_at``), ``status_rejected`` (the API server's 422 message
    for the last status write).
    """

    name: str
    namespace: str
    uid: str
    generation: int
    spec: ExperimentSpec | SpecError
    status: ExperimentStatus
    now: dt.datetime
    jobs: Sequence[Mapping[str, Any]] = ()
    pods: Sequence[Mapping[str, Any]] = ()
    deleting: bool = False
    timeouts: Timeouts = Timeouts()
    bench_image: str = "ghcr.io/spx-dev/spx-bench:0.1.0"
    bench: BenchOptions = BenchOptions()
    progress_interval_s: float = 30.0
    admission: Admission | None = None
    creation: JobCreation | None = None
    job_gone: bool = False
    failed_create: str | None = None
    results: Results | None = None
    progress_log: str | None = None
    progress_read_at: dt.datetime | None = None
    status_rejected: str | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def job_finished(job: Mapping[str, Any]) -> bool:
    """The Job has its final ``Complete`` or ``Failed`` condition (the Job controller is done with it)."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return True
    return False


def job_ending(job: Mapping[str, Any]) -> bool:
    """``FailureTarget``/``SuccessCriteriaMet`` is set: the Job controller is terminating its pods
    (their grace period) and will set the final condition — do not delete it meanwhile."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("FailureTarget", "SuccessCriteriaMet") and c.get("status") == "True":
            return True
    return False


# The decision ------------------------------------------------------------------------------------------


def conclude(o: Observed) -> Decision:
    """The next step for one experiment (see the module docstring)."""
    if o.deleting:
        return Decision("deleting")  # garbage collection removes the children; write nothing
    nows = cond.now_rfc3339(o.now)
    gen = o.generation
    jname = job_name(o.name, gen)
    status = o.status
    if status.observed_generation != gen:
        status = cond.new_run(status, gen, nows)

    if o.status_rejected is not None:
        return _status_rejected(o, status, nows)

    live = [j for j in o.jobs if not _deleting(j)]
    if isinstance(o.spec, SpecError):  # an invalid spec never reaches a GPU
        stop = DeleteJobs(tuple(str(_meta(j).get("name")) for j in live), "the spec is invalid") if live else None
        if o.status.observed_generation == gen and cond.decided_reason(o.status) == "InvalidSpec":
            return Decision("invalid", before=(stop,) if stop else ())
        new = cond.apply_step(cond.new_run(o.status, gen, nows), cond.invalid_spec(o.spec.problems), nows, gen)
        new = new.model_copy(update={"completion_time": nows})
        return Decision("invalid", new, (("Warning", "InvalidSpec", new.message or ""),),
                        before=(stop,) if stop else (), slot_freed=True)
    spec = o.spec

    stale = tuple(str(_meta(j).get("name")) for j in live if _meta(j).get("name") != jname)
    before: tuple[Action, ...] = (DeleteJobs(stale, f"superseded by generation {gen}"),) if stale else ()
    job = next((j for j in o.jobs if _meta(j).get("name") == jname), None)
    if job is not None and _deleting(job):
        return Decision("job-deleting", before=before, requeue_after_s=1.0)

    if cond.is_terminal(status):
        if job is not None and not job_finished(job) and not job_ending(job):
            before += (DeleteJobs((jname,), "the run was stopped by the operator"),)
        return Decision("terminal", before=before, slot_freed=bool(before))

    if job is None:
        return _without_job(o, spec, status, jname, nows, before)
    pods = [p for p in o.pods if _owned_by(p, job)]
    obs = observe(job, pods, o.now, o.timeouts, failed_create=o.failed_create)
    if obs.reason == "PodCreateFailed" and o.failed_create is None:
        return Decision("asking", before=before, need=FetchFailedCreate(jname))
    d = _follow(o, spec, status, job, obs, nows)
    return replace(d, before=before + d.before)


def _owned_by(pod: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    uid = _meta(job).get("uid")
    return any(ref.get("uid") == uid for ref in _meta(pod).get("ownerReferences") or []) or \
        (_meta(pod).get("labels") or {}).get("job-name") == _meta(job).get("name")


def _terminal(status: ExperimentStatus, step: cond.Step, nows: str, gen: int, **update: Any) -> ExperimentStatus:
    new = cond.apply_step(status, step, nows, gen)
    return new.model_copy(update={"completion_time": nows, **update})


def _status_rejected(o: Observed, status: ExperimentStatus, nows: str) -> Decision:
    """Every status write is refused (422): decide with a minimal status that names the refusal."""
    msg = f"the API server rejected the experiment's status: {o.status_rejected}"
    base = ExperimentStatus(observed_generation=o.generation, job_name=status.job_name, start_time=status.start_time,
                            conditions=list(status.conditions))
    new = _terminal(base, cond.failed("InfraFailed", msg, "StatusRejected"), nows, o.generation)
    jname = job_name(o.name, o.generation)
    running = [j for j in o.jobs if _meta(j).get("name") == jname and not job_finished(j) and not job_ending(j)]
    after = (DeleteJobs((jname,), "its status cannot be written"),) if running else ()
    return Decision("status-rejected", new, (("Warning", "InfraFailed", msg),), after=after, slot_freed=True)


def _without_job(o: Observed, spec: ExperimentSpec, status: ExperimentStatus, jname: str, nows: str,
                 before: tuple[Action, ...]) -> Decision:
    gen = o.generation
    if status.job_name == jname and status.phase in ("Pending", "Running", "Analyzing", "Queued"):
        # Status says we created this Job and the store has none: ask the API server, not the cache.
        if not o.job_gone:
            return Decision("asking", before=before, need=ConfirmJobGone(jname))
        new = _terminal(status, cond.failed("InfraFailed", f"Job {jname} was deleted before it finished",
                                            "JobDeleted"), nows, gen)
        return Decision("job-vanished", new, (("Warning", "InfraFailed", new.message or ""),), before=before,
                        slot_freed=True, observed_duration=True)
    if o.creation is not None:
        return _creation_failed(o, status, jname, nows, before)
    if o.admission is None:
        return Decision("asking", before=before, need=AskAdmission())
    if not o.admission.synced:
        return Decision("waiting-for-sync", before=before, requeue_after_s=0.5)
    if not o.admission.admitted:
        new = cond.apply_step(status, cond.queued(o.admission.active, o.admission.limit), nows, gen)
        if status.phase == "Queued" and status.observed_generation == gen:
            # The message carries the live slot count; rewrite it only when entering the queue.
            new = new.model_copy(update={"message": status.message, "conditions": status.conditions})
        events: tuple[Event, ...] = (("Normal", "Queued", new.message or ""),) if status.phase != "Queued" else ()
        return Decision("queued", new, events, before=before)
    manifest = build_job(o.name, o.namespace, o.uid, gen, spec, spec.image or o.bench_image, o.bench)
    return Decision("creating", before=before, need=CreateJob(manifest))


def _creation_failed(o: Observed, status: ExperimentStatus, jname: str, nows: str,
                     before: tuple[Action, ...]) -> Decision:
    """The API server refused the Job for good (400/422 → InvalidSpec, 403 → InfraFailed) or a foreign
    Job holds its name: decide instead of retrying forever."""
    c = o.creation
    assert c is not None
    if c.foreign:
        step = cond.failed("InfraFailed", f"a Job named {jname} exists and is not owned by this experiment",
                           "JobConflict")
    elif c.code == 403:
        step = cond.failed("InfraFailed", f"the API server refused the Job {jname}: {c.message}", "JobRejected",
                           scheduled=("False", "JobRejected", "not scheduled: the API server refused the Job"))
    else:
        step = cond.failed("InvalidSpec", f"the API server rejected the Job {jname} as invalid: {c.message}", "NotRun",
                           "the run was not started: the API server rejected the Job",
                           scheduled=("False", "InvalidSpec", "not scheduled: the Job is invalid"))
    new = _terminal(status, step, nows, o.generation)
    reason = step.decided[1] if step.decided else "InfraFailed"
    return Decision("job-rejected" if not c.foreign else "job-conflict", new, (("Warning", reason, new.message or ""),),
                    before=before, slot_freed=True)


def _elapsed_s(since: str | None, now: dt.datetime) -> float | None:
    t = cond.parse_time(since)
    return None if t is None else (now - t).total_seconds()


def _follow(o: Observed, spec: ExperimentSpec, status: ExperimentStatus, job: Mapping[str, Any], obs: Observation,
            nows: str) -> Decision:
    gen = o.generation
    jname = str(_meta(job).get("name"))
    base = status.model_copy(update={"job_name": jname, "start_time": status.start_time or nows})
    recheck = obs.recheck_after_s + 0.2 if obs.recheck_after_s is not None else None
    if obs.state == "suspended":
        limit = spec.scheduling.admission_timeout_seconds
        waited = _elapsed_s(str(_meta(job).get("creationTimestamp") or "") or None, o.now) or 0.0
        if waited >= limit:
            msg = (f"Kueue did not admit Job {jname} within {limit}s (spec.scheduling.admissionTimeoutSeconds)"
                   + (f" in LocalQueue {spec.scheduling.queue_name}" if spec.scheduling.queue_name else ""))
            new = _terminal(base, cond.failed("InfraFailed", msg, "NotAdmitted",
                                              scheduled=("False", "NotAdmitted", msg)), nows, gen)
            return Decision("not-admitted", new, (("Warning", "InfraFailed", msg),),
                            after=(DeleteJobs((jname,), "Kueue never admitted it"),), slot_freed=True,
                            observed_duration=True)
        step = cond.suspended(jname, spec.scheduling.queue_name)
        return Decision("suspended", cond.apply_step(base, step, nows, gen), requeue_after_s=limit - waited + 0.2)
    if obs.state == "pending":
        return Decision("pending", cond.apply_step(base, cond.job_pending(jname, obs.message), nows, gen),
                        requeue_after_s=recheck)
    if obs.state == "unschedulable":
        return Decision("unschedulable", cond.apply_step(base, cond.unschedulable_waiting(jname, obs.message), nows, gen),
                        requeue_after_s=recheck)
    if obs.state in ("scheduled", "running"):
        step = cond.running(jname, obs.node, started=obs.state == "running",
                            detail="" if obs.reason in ("Running", "PodScheduled") else obs.message)
        events: tuple[Event, ...] = (("Normal", "Running", step.message),) if status.phase != "Running" else ()
        after: tuple[Action, ...] = ()
        if obs.state == "running" and obs.pod is not None and o.progress_interval_s > 0:
            # Read the log every progress_interval_s of running (not at once: a short run needs no progress).
            since = o.progress_read_at or cond.parse_time((obs.pod.get("status") or {}).get("startTime")) or o.now
            wait = o.progress_interval_s - (o.now - since).total_seconds()
            if wait <= 0:
                after = (ReadProgress(str(_meta(obs.pod).get("name")), str(_meta(obs.pod).get("uid"))),)
                wait = o.progress_interval_s
            recheck = min(recheck or wait, wait)
        return Decision(obs.state, cond.apply_step(base, step, nows, gen), events, after=after, requeue_after_s=recheck)
    # The run ended (succeeded or failed): read what it left, then decide.
    if o.results is None:
        completed_reason = obs.reason if obs.state == "failed" else "JobSucceeded"
        pod = str(_meta(obs.pod).get("name")) if obs.pod is not None else None
        if status.phase != "Analyzing":
            new = cond.apply_step(base, cond.analyzing(jname, completed_reason, obs.message), nows, gen)
            return Decision("analyzing", new, need=ReadResults(pod))
        return Decision("analyzing", need=ReadResults(pod))
    return finish(o, spec, base, job, obs, nows)


# Judgement: the ONE call into spx.analysis ----------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    """The kernel section, verdict and reasons of a usable result (plus the vLLM sections)."""

    kernel: KernelStatus
    verdict: Any
    reasons: list[str]
    serving: ServingStatus | None
    accuracy: AccuracyStatus | None


def judge(spec: ExperimentSpec, meas: Any, serving: ServingStatus | None, accuracy: AccuracyStatus | None) -> Judgement:
    """Result → status kernel section + verdict (to be :func:`spx.analysis.judge` once it lands: one line).

    A section the run should have produced and did not is undecided, never a silent pass.

    Raises:
        ValueError: the analysis cannot use the points (e.g. a repeated token count).
    """
    ev = evaluate(meas.points, spec.gate, meas.gather_source, spec.parallelism.tensor_parallel_size,
                  gemm_backend=meas.gemm_backend, timer=meas.timer,
                  device=meas.environment.device if meas.environment else None)
    verdict, reasons = ev.verdict, list(ev.reasons)
    if spec.serving is not None:
        if serving is None and spec.serving.points:
            serving = ServingStatus(reasons=["the serving A/B left no result"])
        if accuracy is None and spec.accuracy is not None:
            accuracy = AccuracyStatus(reasons=["GSM8K: the run left no result"], max_drop_points=spec.accuracy.max_drop_points)
        verdict, reasons = combine_verdict(verdict, reasons, serving, accuracy)
    return Judgement(ev.kernel, verdict, list(reasons), serving, accuracy)


def _collected(o: Observed, obs: Observation) -> tuple[Collected, str | None, str | None]:
    """Parse the pod's outputs; a log that is gone falls back to the log read while the pod ran."""
    r = o.results or Results()
    message = r.message if r.message is not None else (termination_message(obs.pod) if obs.pod else None)
    log = r.log
    progress = r.progress_log if r.progress_log is not None else o.progress_log
    if log is None and progress is not None:
        log = progress
    return collect(message, log), message, log


def finish(o: Observed, spec: ExperimentSpec, status: ExperimentStatus, job: Mapping[str, Any], obs: Observation,
           nows: str) -> Decision:
    """The terminal decision of a run whose Job ended and whose outputs were read."""
    gen = o.generation
    collected, message, log = _collected(o, obs)
    pod_name = str(_meta(obs.pod).get("name")) if obs.pod is not None else None
    completed_reason = obs.reason if obs.state == "failed" else "JobSucceeded"
    try:
        meas = measurement(collected, points_from_result)
    except (ValueError, TypeError, ArithmeticError) as err:  # the analysis' own conversion failed: say why
        collected.problems.append(f"could not convert the result's points: {err}")
        meas = None
    serving, accuracy = (vllm_statuses(collected, summarize_serving, summarize_accuracy) if spec.serving is not None
                         else (None, None))
    if spec.serving is not None and obs.state == "succeeded":
        if serving is None and spec.serving.points:
            collected.problems.append("the serving A/B left no result (no serving line in the log, none in the summary)")
        if accuracy is None and spec.accuracy is not None:
            collected.problems.append("GSM8K left no result (no accuracy line in the log, none in the summary)")

    judgement: Judgement | None = None
    if obs.state == "succeeded" and meas is not None and meas.complete and meas.points:
        try:
            judgement = judge(spec, meas, serving, accuracy)
        except (ValueError, TypeError, ArithmeticError) as err:  # a result the analysis cannot use
            collected.problems.append(f"the analysis could not use the result: {err}")

    configmap = build_result_configmap(
        o.name, o.namespace, o.uid, gen,
        result=collected.result.to_wire() if collected.result is not None else None,
        termination_message=message, log=log, problems=collected.problems, pod_name=pod_name,
        serving_result=collected.serving_result.to_wire() if collected.serving_result is not None else None,
        accuracy_result=collected.accuracy_result.to_wire() if collected.accuracy_result is not None else None,
    )
    environment: Environment | None = meas.environment if meas is not None else None
    if environment is not None and environment.node is None and obs.node:
        environment = environment.model_copy(update={"node": obs.node})
    update: dict[str, Any] = {"completion_time": nows, "result_config_map": result_configmap_name(o.name, gen),
                              "environment": environment, "serving": serving, "accuracy": accuracy}
    after: tuple[Action, ...] = (DeleteJobs((str(_meta(job).get("name")),), f"gave up: {obs.reason}"),) if obs.abort else ()

    if judgement is not None:
        new = cond.with_kernel(status, judgement.kernel, judgement.verdict, judgement.reasons)
        new = cond.apply_step(new, cond.decided(judgement.verdict, judgement.reasons, "JobSucceeded", obs.message,
                                                cond.ran_on(obs.node)), nows, gen)
        update.update(serving=judgement.serving, accuracy=judgement.accuracy)
        event: Event = ("Normal" if judgement.verdict == "Pass" else "Warning", f"Verdict{judgement.verdict}",
                        new.message or "")
        return Decision(f"verdict-{judgement.verdict}", new.model_copy(update=update), (event,),
                        before=(StoreResult(configmap),), after=after, slot_freed=True, observed_duration=True)

    reason, completed_reason, msg = _failure(obs, collected, meas, serving, accuracy, completed_reason, pod_name)
    kernel = None
    if meas is not None and meas.points:
        kernel = KernelStatus(points=meas.points, gather_source=meas.gather_source,  # type: ignore[arg-type]
                              gemm_backend=meas.gemm_backend, timer=meas.timer)
    elif collected.partial_points:  # the points the bench printed before it died: kept
        by_tokens = {p.tokens: p for p in collected.partial_points}
        kernel = KernelStatus(points=[point_from_result(by_tokens[t]) for t in sorted(by_tokens)],
                              gather_source=collected.partial_points[-1].gather_source)
    new = cond.with_kernel(status, kernel, None, [])
    new = cond.apply_step(new, cond.failed(reason, msg, completed_reason, obs.message,  # type: ignore[arg-type]
                                           scheduled=cond.ran_on(obs.node)), nows, gen)
    return Decision(reason, new.model_copy(update=update), (("Warning", reason, msg),),
                    before=(StoreResult(configmap),), after=after, slot_freed=True, observed_duration=True)


def _failure(obs: Observation, collected: Collected, meas: Any, serving: ServingStatus | None,
             accuracy: AccuracyStatus | None, completed_reason: str, pod_name: str | None) -> tuple[str, str, str]:
    """(Decided reason, Completed reason, message) of a run that reached no verdict."""
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
    msg = obs.message + (kept if obs.reason in ("NodeLost", "Evicted") else "")
    if meas is not None and meas.error:
        msg += f"; the bench reported: {meas.error}"
    if meas is None and collected.problems and obs.outcome == "BenchmarkFailed":
        msg += f"; result: {problems}"
    vllm_note = (serving.failures[0] if serving is not None and serving.failures
                 else accuracy.reasons[0] if accuracy is not None and accuracy.gate_passed is None
                 and accuracy.reasons else None)
    if vllm_note:  # e.g. the vLLM benches could not start
        msg += f"; {vllm_note}"
    return reason, completed_reason, msg
