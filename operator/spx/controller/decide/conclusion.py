"""The controller's decision step: pure, side-effect free, table-tested.

``conclude(Observed) -> Plan``: from what the reactor observed about one experiment (its spec,
stored status, its Jobs and their pods, the answers to earlier questions, the time) to the new
status, the events to post and the actions to take — the shape of kopf's
``_core/intents/causes.py`` (detect a cause, purely) against ``_core/reactor/processing.py`` (carry
it out). :mod:`spx.controller.reactor` carries a :class:`Plan` out; when a decision needs
something only the API server can tell (:data:`Need`: is that Job really gone, is there a slot,
what did the pod write), the reactor finds out and calls :func:`conclude` again with the answer.

Nothing here awaits, reads a clock or touches the network.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from spx.api import policy as pol
from spx.api.loading import SpecError
from spx.api.spec import ExperimentSpec
from spx.api.status import ExperimentStatus
from spx.controller.decide import conditions as cond
from spx.controller.decide import objects as objs
from spx.controller.decide.decision import (
    Action,
    AskAdmission,
    CheckNodes,
    ConfirmJobGone,
    CreateJob,
    DeleteJobs,
    Event,
    FetchFailedCreate,
    Observed,
    Plan,
    ReadProgress,
    ReadResults,
)
from spx.controller.decide.finish import finish, job_vanished
from spx.controller.decide.job_status import job_ending, job_finished, suspended_since
from spx.controller.decide.objects import deleting as _deleting
from spx.controller.decide.objects import meta as _meta
from spx.controller.decide.objects import pods_of_job
from spx.controller.decide.observation import Memory, Observation
from spx.controller.decide.pod_outcome import observe
from spx.controller.manifests.job import build_job
from spx.controller.manifests.naming import job_name

__all__ = ["conclude"]

# The decision ------------------------------------------------------------------------------------------


def conclude(o: Observed) -> Plan:
    """The next step for one experiment (see the module docstring)."""
    if o.deleting:
        # Garbage collection removes the children once the experiment is gone; write nothing. A run still
        # going is stopped now: another finalizer may hold the experiment (and so its Job) for long, and
        # nothing the run produces would be recorded.
        running = tuple(str(_meta(j).get("name")) for j in o.jobs
                        if not _deleting(j) and not job_finished(j) and not job_ending(j))
        halt: tuple[Action, ...] = (DeleteJobs(running, "the experiment is being deleted"),) if running else ()
        return Plan("deleting", before=halt, slot_freed=bool(halt))
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
            return Plan("invalid", before=(stop,) if stop else ())
        new = cond.apply_transition(cond.new_run(o.status, gen, nows), cond.invalid_spec(o.spec.problems), nows, gen)
        new = new.model_copy(update={"completion_time": nows})
        return Plan("invalid", new, (("Warning", "InvalidSpec", new.message or ""),),
                        before=(stop,) if stop else (), slot_freed=True)
    spec = o.spec

    stale = tuple(str(_meta(j).get("name")) for j in live if _meta(j).get("name") != jname)
    before: tuple[Action, ...] = (DeleteJobs(stale, f"superseded by generation {gen}"),) if stale else ()
    job = next((j for j in o.jobs if _meta(j).get("name") == jname), None)
    if job is not None and _deleting(job):
        return Plan("job-deleting", before=before, requeue_after_s=1.0)

    if cond.is_terminal(status):
        if job is not None and not job_finished(job) and not job_ending(job):
            before += (DeleteJobs((jname,), "the run was stopped by the operator"),)
        return Plan("terminal", before=before, slot_freed=bool(before))

    if job is None:
        return _without_job(o, spec, status, jname, nows, before)
    pods = pods_of_job(job, o.pods)
    obs = observe(job, pods, o.now, o.timeouts, failed_create=o.failed_create, gone=pods_of_job(job, o.gone_pods),
                  memory=_memory(o, status), nodes=o.nodes)
    if obs.reason == "PodCreateFailed" and o.failed_create is None:
        return Plan("asking", before=before, need=FetchFailedCreate(jname))
    if obs.check_nodes and o.nodes is None:
        return Plan("asking", before=before, need=CheckNodes(obs.check_nodes))
    d = _follow(o, spec, status, job, obs, nows)
    return replace(d, before=before + d.before)


def _memory(o: Observed, status: ExperimentStatus) -> Memory:
    """What this generation's status (and the log received while the pod ran) remember of the run."""
    scheduled = cond.get_condition(status.conditions, "Scheduled") if status.observed_generation == o.generation else None
    unschedulable = None
    if scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
        unschedulable = (scheduled.message or "").split(" is unschedulable: ", 1)[-1] or None
    return Memory(seen_scheduled=scheduled is not None and scheduled.status == "True",
                  seen_started=bool(o.progress_log), unschedulable=unschedulable)


def _terminal(status: ExperimentStatus, transition: cond.Transition, nows: str, gen: int, **update: Any) -> ExperimentStatus:
    new = cond.apply_transition(status, transition, nows, gen)
    return new.model_copy(update={"completion_time": nows, **update})


def _status_rejected(o: Observed, status: ExperimentStatus, nows: str) -> Plan:
    """Every status write is refused (422): decide with a minimal status that names the refusal."""
    msg = f"the API server rejected the experiment's status: {o.status_rejected}"
    base = ExperimentStatus(observed_generation=o.generation, job_name=status.job_name, start_time=status.start_time,
                            conditions=list(status.conditions))
    new = _terminal(base, cond.failed("InfraFailed", msg, "StatusRejected"), nows, o.generation)
    jname = job_name(o.name, o.generation)
    running = [j for j in o.jobs if _meta(j).get("name") == jname and not job_finished(j) and not job_ending(j)]
    after = (DeleteJobs((jname,), "its status cannot be written"),) if running else ()
    return Plan("status-rejected", new, (("Warning", "InfraFailed", msg),), after=after, slot_freed=True)


def _without_job(o: Observed, spec: ExperimentSpec, status: ExperimentStatus, jname: str, nows: str,
                 before: tuple[Action, ...]) -> Plan:
    gen = o.generation
    if status.job_name == jname and status.phase not in cond.TERMINAL_PHASES:
        # Status says we created this Job and the store has none: ask the API server, not the cache.
        if not o.job_gone:
            return Plan("asking", before=before, need=ConfirmJobGone(jname))
        d = job_vanished(o, status, jname, nows)
        return replace(d, before=before + d.before)
    if violations := pol.check_policy(spec.to_wire(), o.policy):
        return _refused_by_policy(o, status, violations, nows, before)
    if o.creation is not None:
        return _creation_failed(o, status, jname, nows, before)
    if o.admission is None:
        return Plan("asking", before=before, need=AskAdmission())
    if not o.admission.synced:
        return Plan("waiting-for-sync", before=before, requeue_after_s=0.5)
    if not o.admission.admitted:
        new = cond.apply_transition(status, cond.queued(o.admission.active, o.admission.limit), nows, gen)
        if status.phase == "Queued" and status.observed_generation == gen:
            # The message carries the live slot count; rewrite it only when entering the queue.
            new = new.model_copy(update={"message": status.message, "conditions": status.conditions})
        events: tuple[Event, ...] = (("Normal", "Queued", new.message or ""),) if status.phase != "Queued" else ()
        return Plan("queued", new, events, before=before)
    manifest = build_job(o.name, o.namespace, o.uid, gen, spec, spec.image or o.bench_image, o.bench)
    return Plan("creating", before=before, need=CreateJob(manifest))


def _refused_by_policy(o: Observed, status: ExperimentStatus, violations: list[pol.Violation], nows: str,
                       before: tuple[Action, ...]) -> Plan:
    """The operator's policy (``SPX_POLICY``) refuses what the spec asks for: ``InvalidSpec`` naming each
    rule, event reason ``PolicyViolation``, no Job. Checked only before this generation's Job exists
    (a policy tightened later does not stop runs already started)."""
    message = pol.describe_violations(violations)
    transition = cond.failed("InvalidSpec", message, "NotRun", "the run was not started: the operator's policy refused the spec",
                       scheduled=("False", pol.REASON, "not scheduled: the operator's policy refused the spec"))
    new = _terminal(status, transition, nows, o.generation)
    return Plan("policy-violation", new, (("Warning", pol.REASON, message),), before=before, slot_freed=bool(before))


def _creation_failed(o: Observed, status: ExperimentStatus, jname: str, nows: str,
                     before: tuple[Action, ...]) -> Plan:
    """The API server refused the Job for good (400/422 → InvalidSpec, 403 → InfraFailed) or a foreign
    Job holds its name: decide instead of retrying forever."""
    c = o.creation
    assert c is not None
    if c.foreign:
        transition = cond.failed("InfraFailed", f"a Job named {jname} exists and is not owned by this experiment",
                           "JobConflict")
    elif c.reason:  # refused before any Job exists: Kueue or its LocalQueue missing
        transition = cond.failed("InfraFailed", c.message, c.reason,
                           scheduled=("False", c.reason, f"not scheduled: {c.message}"))
    elif c.code == 403:
        transition = cond.failed("InfraFailed", f"the API server refused the Job {jname}: {c.message}", "JobRejected",
                           scheduled=("False", "JobRejected", "not scheduled: the API server refused the Job"))
    else:
        transition = cond.failed("InvalidSpec", f"the API server rejected the Job {jname} as invalid: {c.message}", "NotRun",
                           "the run was not started: the API server rejected the Job",
                           scheduled=("False", "InvalidSpec", "not scheduled: the Job is invalid"))
    new = _terminal(status, transition, nows, o.generation)
    reason = transition.decided[1] if transition.decided else "InfraFailed"
    return Plan("job-rejected" if not c.foreign else "job-conflict", new, (("Warning", reason, new.message or ""),),
                    before=before, slot_freed=True)


def _elapsed_s(since: str | None, now: dt.datetime) -> float | None:
    t = cond.parse_time(since)
    return None if t is None else (now - t).total_seconds()


def _follow(o: Observed, spec: ExperimentSpec, status: ExperimentStatus, job: Mapping[str, Any], obs: Observation,
            nows: str) -> Plan:
    gen = o.generation
    jname = str(_meta(job).get("name"))
    base = status.model_copy(update={"job_name": jname, "start_time": status.start_time or nows})
    recheck = obs.recheck_after_s + 0.2 if obs.recheck_after_s is not None else None
    if obs.state == "suspended":
        limit = spec.scheduling.admission_timeout_seconds
        # counted from the last suspension: a Job Kueue preempts (re-suspends) waits for re-admission anew
        suspended_at = suspended_since(job) or str(_meta(job).get("creationTimestamp") or "") or None
        waited = _elapsed_s(suspended_at, o.now) or 0.0
        if waited >= limit:
            msg = (f"Kueue did not admit Job {jname} within {limit}s of its suspension "
                   f"(spec.scheduling.admissionTimeoutSeconds) in LocalQueue {spec.scheduling.queue_name}"
                   if spec.scheduling.queue_name else  # suspended by someone else: no Kueue queue was named
                   f"Job {jname} was suspended (not through Kueue: spec.scheduling.queueName is unset) and stayed "
                   f"so for {limit}s (spec.scheduling.admissionTimeoutSeconds)")
            new = _terminal(base, cond.failed("InfraFailed", msg, "NotAdmitted",
                                              scheduled=("False", "NotAdmitted", msg)), nows, gen)
            return Plan("not-admitted", new, (("Warning", "InfraFailed", msg),),
                            after=(DeleteJobs((jname,), "Kueue never admitted it"),), slot_freed=True,
                            observed_duration=True)
        transition = cond.suspended(jname, spec.scheduling.queue_name)
        return Plan("suspended", cond.apply_transition(base, transition, nows, gen), requeue_after_s=limit - waited + 0.2)
    if obs.state == "transition":  # pods ending or being replaced: the phase stays as it is
        if status.phase == "Running" and obs.pod is not None and obs.node:
            transition = cond.running(jname, obs.node, started=True, detail=obs.message)
            return Plan("transition", cond.apply_transition(base, transition, nows, gen), requeue_after_s=recheck)
        return Plan("transition", requeue_after_s=recheck)
    if obs.state == "pending":
        return Plan("pending", cond.apply_transition(base, cond.job_pending(jname, obs.message), nows, gen),
                        requeue_after_s=recheck)
    if obs.state == "unschedulable":
        return Plan("unschedulable", cond.apply_transition(base, cond.unschedulable_waiting(jname, obs.message), nows, gen),
                        requeue_after_s=recheck)
    if obs.state in ("scheduled", "running"):
        transition = cond.running(jname, obs.node, started=obs.state == "running",
                            detail="" if obs.reason in ("Running", "PodScheduled") else obs.message)
        events: tuple[Event, ...] = (("Normal", "Running", transition.message),) if status.phase != "Running" else ()
        after: tuple[Action, ...] = ()
        if obs.state == "running" and obs.pod is not None and o.progress_interval_s > 0:
            # Read the log every progress_interval_s of running (not at once: a short run needs no progress).
            since = o.progress_read_at or cond.parse_time(objs.status(obs.pod).get("startTime")) or o.now
            wait = o.progress_interval_s - (o.now - since).total_seconds()
            if wait <= 0:
                after = (ReadProgress(str(_meta(obs.pod).get("name")), str(_meta(obs.pod).get("uid"))),)
                wait = o.progress_interval_s
            recheck = min(recheck or wait, wait)
        return Plan(obs.state, cond.apply_transition(base, transition, nows, gen), events, after=after, requeue_after_s=recheck)
    # The run ended (succeeded or failed): read what it left, then decide.
    if o.results is None:
        completed_reason = obs.completed_reason
        pod = str(_meta(obs.pod).get("name")) if obs.pod is not None else None
        if status.phase != "Analyzing":
            new = cond.apply_transition(base, cond.analyzing(jname, completed_reason, obs.message), nows, gen)
            return Plan("analyzing", new, need=ReadResults(pod))
        return Plan("analyzing", need=ReadResults(pod))
    return finish(o, spec, base, job, obs, nows)
