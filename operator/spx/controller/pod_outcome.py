"""Classify the state of a bench Job and its pods: still going, succeeded, or failed — and whose fault.

Pure: takes the Job and pod manifests as the API server returns them, the current time and the
operator's timeouts. The decision step (:mod:`spx.controller.conclusion`) acts on the :class:`Observation`.

How each failure class is told apart:

- **Benchmark failure** (``BenchmarkFailed``): the bench container ran and exited non-zero on its
  own — exit code 1 (the bench failed), 2 (invalid input), a signal such as SIGSEGV, or
  ``OOMKilled`` (the bench's memory) — and the pod carries no ``DisruptionTarget`` condition.
- **Infrastructure failure** (``InfraFailed``): the pod never ran or was taken away —
  ``Unschedulable`` for longer than ``schedule_timeout_s``; image pull errors (``ErrImagePull`` /
  ``ImagePullBackOff`` past ``image_pull_timeout_s``, ``InvalidImageName`` at once); container
  creation errors past the same timeout; pod disruptions (``DisruptionTarget`` condition or a
  kubelet ``Evicted`` pod) beyond ``max_disruptions`` retries; the Job's ``activeDeadlineSeconds``
  (``DeadlineExceeded``); a failed Job whose pod is gone.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from spx.controller.conditions import parse_time
from spx.controller.manifests import CONTAINER_NAME

State = Literal["suspended", "pending", "unschedulable", "scheduled", "running", "succeeded", "failed"]
Outcome = Literal["BenchmarkFailed", "InfraFailed"]

IMAGE_PULL_FATAL = frozenset({"InvalidImageName", "ErrImageNeverPull"})
IMAGE_PULL_RETRYING = frozenset({"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable", "SignatureValidationFailed"})
CONTAINER_CREATE_ERRORS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreCreateHookError", "PostStartHookError"})
#: ``status.reason`` values of pods the node (not the bench) failed.
NODE_POD_REASONS = frozenset({"Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated", "NodeLost", "UnexpectedAdmissionError", "NodeAffinity", "OutOfcpu", "OutOfmemory", "OutOfpods"})


@dataclass(frozen=True)
class Timeouts:
    """Limits on a run's pod problems (the defaults of :class:`~spx.controller.settings.OperatorSettings`).

    ``schedule_timeout_s``: seconds a pod may stay Unschedulable; ``image_pull_timeout_s``: seconds of
    image-pull / container-creation errors; ``max_disruptions``: evictions retried before InfraFailed.
    """

    schedule_timeout_s: float = 900.0
    image_pull_timeout_s: float = 300.0
    max_disruptions: int = 3


@dataclass(frozen=True)
class Observation:
    """Where a run stands.

    ``state``: ``suspended`` (Kueue), ``pending`` (no pod bound yet), ``unschedulable`` (still within
    the timeout), ``scheduled`` (bound, container not running), ``running``, ``succeeded`` (Job
    Complete), ``failed``. For ``failed``, ``outcome`` says whose fault and ``reason`` is the
    ``Completed`` condition's reason. ``pod`` is the pod to read results from (the last one that
    ran), ``abort`` whether the operator must delete the Job itself (it gave up on a Job that
    Kubernetes would keep trying), ``recheck_after_s`` when a timeout could fire next.
    """

    state: State
    reason: str
    message: str
    outcome: Outcome | None = None
    pod: Mapping[str, Any] | None = None
    node: str | None = None
    abort: bool = False
    recheck_after_s: float | None = None
    disruptions: int = 0
    exit_code: int | None = None


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _cond(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == type_), None)


def _true(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    c = _cond(obj, type_)
    return c if c is not None and c.get("status") == "True" else None


def _created(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def container_status(pod: Mapping[str, Any], name: str = CONTAINER_NAME) -> Mapping[str, Any] | None:
    """The status of container ``name`` (else the first container's); None before the kubelet reports any."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == name), statuses[0] if statuses else None)


def terminated_state(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The bench container's ``terminated`` state (current, else the last one); None if it never ended."""
    cs = container_status(pod)
    if cs is None:
        return None
    return (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")


def termination_message(pod: Mapping[str, Any]) -> str | None:
    """The bench container's termination message (``/dev/termination-log``); None if it never ended."""
    term = terminated_state(pod)
    return term.get("message") if term else None


#: ``DisruptionTarget`` reasons of a pod whose node went away (taint manager, pod GC of orphans).
NODE_LOST_DISRUPTIONS = frozenset({"DeletionByTaintManager", "DeletionByPodGC"})


def is_node_lost(pod: Mapping[str, Any]) -> bool:
    """The pod's node went away under it: phase ``Unknown``, reason ``NodeLost``, or a
    ``DisruptionTarget`` set by the taint manager / pod GC (``k8s.io/kubernetes/pkg/controller/podgc``)."""
    if _phase(pod) == "Unknown" or (pod.get("status") or {}).get("reason") == "NodeLost":
        return True
    target = _true(pod, "DisruptionTarget")
    return target is not None and target.get("reason") in NODE_LOST_DISRUPTIONS


def _deadline_exceeded(job: Mapping[str, Any], jname: str, mine: Sequence[Mapping[str, Any]],
                       pod: Mapping[str, Any] | None, node: str | None, disruptions: int,
                       seen_scheduled: bool = False) -> Observation:
    """``DeadlineExceeded``: the bench was slow only if its pod ran; else say what kept it from running.

    ``seen_scheduled``: the operator saw this run's pod bound to a node earlier (the Job controller
    deletes the pods of a Job past its deadline, so the pods listed now may not show it).
    """
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    bound = [p for p in mine if (p.get("spec") or {}).get("nodeName")]
    if not bound and not seen_scheduled:
        last = mine[-1] if mine else None
        sched = _cond(last, "PodScheduled") if last is not None else None
        why = (sched or {}).get("message") or ("no pod was created" if last is None else "no node was assigned")
        return Observation("failed", "NeverScheduled",
                           f"the pod of Job {jname} was never scheduled before activeDeadlineSeconds={deadline} "
                           f"(spec.timeoutSeconds) passed: {why}", outcome="InfraFailed", pod=last, disruptions=disruptions)
    lost = next((p for p in reversed(bound) if is_node_lost(p)), None)
    if lost is not None:
        lnode = (lost.get("spec") or {}).get("nodeName")
        return Observation("failed", "NodeLost",
                           f"node {lnode} of pod {(lost.get('metadata') or {}).get('name')} was lost while the bench ran; "
                           f"the Job then hit activeDeadlineSeconds={deadline}", outcome="InfraFailed", pod=lost,
                           node=lnode, disruptions=disruptions)
    cs = (container_status(bound[-1]) or {}) if bound else {}
    if bound and not (cs.get("state") or {}).get("running") and not terminated_state(bound[-1]) and not cs.get("lastState"):
        waiting = ((cs.get("state") or {}).get("waiting") or {})
        return Observation("failed", "NeverStarted",
                           f"the bench container of Job {jname} never started before activeDeadlineSeconds={deadline}: "
                           f"{waiting.get('reason') or 'waiting'} {waiting.get('message') or ''}".rstrip(),
                           outcome="InfraFailed", pod=bound[-1], node=node, disruptions=disruptions)
    return Observation("failed", "DeadlineExceeded",
                       f"Job {jname} ran past activeDeadlineSeconds={deadline} (spec.timeoutSeconds) and was stopped",
                       outcome="InfraFailed", pod=pod, node=node, disruptions=disruptions)


def is_disrupted(pod: Mapping[str, Any]) -> bool:
    """The pod was taken away by the cluster (eviction, preemption, drain, node pressure)."""
    if _true(pod, "DisruptionTarget"):
        return True
    return _phase(pod) == "Failed" and (pod.get("status") or {}).get("reason") in NODE_POD_REASONS


def _signal_name(code: int) -> str | None:
    if code > 128:
        try:
            return signal.Signals(code - 128).name
        except ValueError:
            return None
    return None


def describe_exit(term: Mapping[str, Any]) -> str:
    """One line on how the container ended: exit code, the signal of codes > 128, the kubelet's reason."""
    code = int(term.get("exitCode", -1))
    reason = term.get("reason") or ""
    sig = _signal_name(code)
    meaning = {1: "the benchmark failed", 2: "the benchmark rejected its input"}.get(code, "")
    parts = [f"exit code {code}"]
    if sig:
        parts.append(sig)
    if reason and reason not in ("Error", "Completed"):
        parts.append(reason)
    text = f"container {CONTAINER_NAME} ended with " + ", ".join(parts)
    return f"{text} ({meaning})" if meaning else text


def classify_failed_pod(pod: Mapping[str, Any]) -> tuple[Outcome, str, str, int | None]:
    """(outcome, reason, message, exit code) of a pod in phase Failed."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "?")
    if is_node_lost(pod):
        node = (pod.get("spec") or {}).get("nodeName") or "?"
        return "InfraFailed", "NodeLost", f"node {node} of pod {name} was lost while the bench ran", None
    if is_disrupted(pod):
        cond = _true(pod, "DisruptionTarget") or {}
        why = cond.get("message") or status.get("message") or cond.get("reason") or status.get("reason") or "disrupted"
        return "InfraFailed", "Evicted", f"pod {name} was disrupted: {why}", None
    term = terminated_state(pod)
    if term is not None:
        code = int(term.get("exitCode", -1))
        reason = "OOMKilled" if term.get("reason") == "OOMKilled" else ("InvalidInput" if code in (2, 3) else "BenchmarkCrashed")  # 3: spx.api.exit_codes.EXIT_USAGE; 2: older images
        return "BenchmarkFailed", reason, f"pod {name}: {describe_exit(term)}", code
    cs = container_status(pod) or {}
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in IMAGE_PULL_FATAL | IMAGE_PULL_RETRYING:
        return "InfraFailed", "ImagePullFailed", f"pod {name}: {waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": "), None
    why = status.get("message") or status.get("reason") or "the pod failed before its container ran"
    return "InfraFailed", "PodFailed", f"pod {name}: {why}", None


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


def _job_owned_pods(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    uid = (job.get("metadata") or {}).get("uid")
    name = (job.get("metadata") or {}).get("name")
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        labels = meta.get("labels") or {}
        if any(o.get("uid") == uid for o in owners) or labels.get("job-name") == name or labels.get("batch.kubernetes.io/job-name") == name:
            out.append(pod)
    return sorted(out, key=_created)


def waiting_message(job_name: str) -> str:
    """The message while a Job's pod is not bound yet (one text, so status is not rewritten for nothing)."""
    return f"Job {job_name} created, waiting for its pod to be scheduled"


def _elapsed(since: str | None, now: dt.datetime) -> float | None:
    t = parse_time(since)
    return None if t is None else (now - t).total_seconds()


def job_condition_message(job: Mapping[str, Any]) -> str | None:
    """The message of the Job's latest condition that has one (e.g. a pod-creation problem)."""
    with_msg = [c for c in _conditions(job) if c.get("message") and c.get("type") != "Suspended"]
    if not with_msg:
        return None
    latest = max(with_msg, key=lambda c: str(c.get("lastTransitionTime") or ""))
    return f"{latest.get('reason') or latest.get('type')}: {latest.get('message')}"


def _no_pod_yet(job: Mapping[str, Any], jname: str, now: dt.datetime, timeouts: Timeouts,
                failed_create: str | None, disruptions: int) -> Observation:
    """An unsuspended Job without any pod: waiting, or ``PodCreateFailed`` once that lasted too long.

    The Job controller could not create the pod (ResourceQuota, LimitRange, Pod Security admission,
    an admission webhook …): it retries forever and posts ``FailedCreate`` events. Past
    ``image_pull_timeout_s`` (the limit on pod start-up problems) the run is ``InfraFailed``.
    """
    status = job.get("status") or {}
    since = status.get("startTime")
    if not since:
        # The Job controller sets startTime on its first sync of an unsuspended Job. Before that, a
        # Job that was suspended (Kueue) counts from its resumption, not from its creation.
        susp = _cond(job, "Suspended")
        if susp is not None and susp.get("status") == "True":
            return Observation("pending", "Pending", waiting_message(jname), disruptions=disruptions,
                               recheck_after_s=max(0.5, timeouts.image_pull_timeout_s))
        since = (susp or {}).get("lastTransitionTime") or _created(job)
    elapsed = _elapsed(since, now)
    limit = timeouts.image_pull_timeout_s
    if elapsed is None:
        return Observation("pending", "Pending", waiting_message(jname), disruptions=disruptions)
    if elapsed >= limit:
        detail = failed_create or job_condition_message(job) or "no FailedCreate event or Job condition says why"
        return Observation("failed", "PodCreateFailed",
                           f"PodCreateFailed: Job {jname} created no pod in {elapsed:.0f}s (limit {limit:.0f}s): {detail}",
                           outcome="InfraFailed", abort=True, disruptions=disruptions)
    return Observation("pending", "Pending", waiting_message(jname), disruptions=disruptions,
                       recheck_after_s=max(0.5, limit - elapsed))


def observe(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: dt.datetime,
    timeouts: Timeouts = Timeouts(),
    failed_create: str | None = None,
    seen_scheduled: bool = False,
) -> Observation:
    """Classify a Job and its pods (any pods may be passed; those of the Job are picked out).

    ``failed_create``: the message of the Job's latest ``FailedCreate`` event, if the caller has it
    (it goes into the ``PodCreateFailed`` message). ``seen_scheduled``: the operator already saw this
    run's pod bound to a node (its ``Scheduled`` condition is True).
    """
    mine = _job_owned_pods(job, pods)
    disruptions = sum(1 for p in mine if is_disrupted(p))
    last = mine[-1] if mine else None
    jname = (job.get("metadata") or {}).get("name", "?")
    spec = job.get("spec") or {}

    complete = _true(job, "Complete")
    failed = _true(job, "Failed")
    ending = _true(job, "SuccessCriteriaMet") or _true(job, "FailureTarget")
    if ending and not (complete or failed):
        # The Job controller decided (Kubernetes ≥ 1.31 sets these first) and is terminating its pods:
        # decide once the pod has ended, and do not delete the Job during its grace period.
        alive = [p for p in mine if _phase(p) not in ("Succeeded", "Failed")]
        if alive:
            ending_pod = alive[-1]
            pname = (ending_pod.get("metadata") or {}).get("name", "?")
            return Observation("running", "Terminating",
                               f"Job {jname} is ending ({ending.get('type')}: {ending.get('reason') or 'no reason'}); "
                               f"waiting for pod {pname} to terminate", pod=ending_pod,
                               node=(ending_pod.get("spec") or {}).get("nodeName"), disruptions=disruptions)
        if ending.get("type") == "SuccessCriteriaMet":
            complete = ending
        else:
            failed = ending
    if complete:
        pod = next((p for p in reversed(mine) if _phase(p) == "Succeeded"), last)
        node = (pod or {}).get("spec", {}).get("nodeName") if pod else None
        return Observation("succeeded", "JobSucceeded", f"Job {jname} completed", pod=pod, node=node,
                           disruptions=disruptions, exit_code=0)
    if failed:
        reason = failed.get("reason") or ""
        ran = [p for p in mine if _phase(p) == "Failed" and not is_disrupted(p)]
        pod = ran[-1] if ran else last
        node = (pod or {}).get("spec", {}).get("nodeName") if pod else None
        if reason == "DeadlineExceeded":
            return _deadline_exceeded(job, jname, mine, pod, node, disruptions, seen_scheduled)
        if pod is None:
            return Observation("failed", "JobFailed",
                               f"Job {jname} failed ({reason or 'no reason'}: {failed.get('message', '')}) and its pod is gone",
                               outcome="InfraFailed", disruptions=disruptions)
        outcome, why, msg, code = classify_failed_pod(pod)
        return Observation("failed", why, msg, outcome=outcome, pod=pod, node=node, disruptions=disruptions, exit_code=code)

    if disruptions > timeouts.max_disruptions:
        pod = last
        return Observation("failed", "Evicted",
                           f"the bench pod was disrupted {disruptions} times (retry budget {timeouts.max_disruptions}); "
                           "giving up on this node pool",
                           outcome="InfraFailed", pod=pod, abort=True, disruptions=disruptions)
    if spec.get("suspend"):
        return Observation("suspended", "Suspended", f"Job {jname} is suspended", disruptions=disruptions)

    current = next((p for p in reversed(mine) if _phase(p) not in ("Failed", "Succeeded")
                    and not (p.get("metadata") or {}).get("deletionTimestamp")), None)
    if current is None:
        if last is not None and is_disrupted(last):
            return Observation("pending", "Pending", f"Job {jname}: pod disrupted, waiting for its replacement",
                               disruptions=disruptions)
        if last is not None and _phase(last) in ("Failed", "Succeeded"):
            # The pod ended; the Job controller has not set the Job's condition yet.
            node = (last.get("spec") or {}).get("nodeName")
            return Observation("running", "Running", f"pod {(last.get('metadata') or {}).get('name')} ended; "
                               "waiting for the Job's final condition", pod=last, node=node, disruptions=disruptions)
        if last is None:
            return _no_pod_yet(job, jname, now, timeouts, failed_create, disruptions)
        return Observation("pending", "Pending", waiting_message(jname), disruptions=disruptions)

    pname = (current.get("metadata") or {}).get("name", "?")
    node = (current.get("spec") or {}).get("nodeName")
    scheduled_cond = _cond(current, "PodScheduled")
    if _phase(current) == "Pending":
        if scheduled_cond is not None and scheduled_cond.get("status") == "False" and scheduled_cond.get("reason") == "Unschedulable":
            elapsed = _elapsed(scheduled_cond.get("lastTransitionTime"), now) or 0.0
            detail = scheduled_cond.get("message") or "no node fits"
            if elapsed >= timeouts.schedule_timeout_s:
                return Observation("failed", "Unschedulable",
                                   f"pod {pname} stayed unschedulable for {elapsed:.0f}s "
                                   f"(limit {timeouts.schedule_timeout_s:.0f}s): {detail}",
                                   outcome="InfraFailed", pod=current, abort=True, disruptions=disruptions)
            return Observation("unschedulable", "Unschedulable", detail,
                               recheck_after_s=max(0.5, timeouts.schedule_timeout_s - elapsed), disruptions=disruptions)
        cs = container_status(current) or {}
        waiting = (cs.get("state") or {}).get("waiting") or {}
        wreason = waiting.get("reason")
        since = (scheduled_cond or {}).get("lastTransitionTime") or _created(current)
        elapsed = _elapsed(since, now) or 0.0
        if wreason in IMAGE_PULL_FATAL:
            return Observation("failed", "ImagePullFailed", f"pod {pname}: {wreason}: {waiting.get('message', '')}".rstrip(": "),
                               outcome="InfraFailed", pod=current, node=node, abort=True, disruptions=disruptions)
        if wreason in IMAGE_PULL_RETRYING | CONTAINER_CREATE_ERRORS:
            kind = "ImagePullFailed" if wreason in IMAGE_PULL_RETRYING else "ContainerCreateFailed"
            if elapsed >= timeouts.image_pull_timeout_s:
                return Observation("failed", kind,
                                   f"pod {pname}: {wreason} for {elapsed:.0f}s (limit {timeouts.image_pull_timeout_s:.0f}s): "
                                   f"{waiting.get('message', '')}".rstrip(": "),
                                   outcome="InfraFailed", pod=current, node=node, abort=True, disruptions=disruptions)
            return Observation("scheduled", wreason, f"pod {pname}: {wreason}: {waiting.get('message', '')}".rstrip(": "),
                               node=node, recheck_after_s=max(0.5, timeouts.image_pull_timeout_s - elapsed),
                               disruptions=disruptions)
        if node or (scheduled_cond is not None and scheduled_cond.get("status") == "True"):
            return Observation("scheduled", "PodScheduled", f"pod {pname} is bound to {node or 'a node'}", node=node,
                               disruptions=disruptions)
        return Observation("pending", "Pending", waiting_message(jname), disruptions=disruptions)
    return Observation("running", "Running", f"pod {pname} is running", pod=current, node=node, disruptions=disruptions)
