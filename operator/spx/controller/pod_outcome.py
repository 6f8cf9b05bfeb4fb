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

from spx.controller import objects as obj
from spx.controller.conditions import parse_time
from spx.controller.manifests import CONTAINER_NAME

State = Literal["suspended", "pending", "unschedulable", "scheduled", "running", "transition", "succeeded", "failed"]
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
    check_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Memory:
    """What the experiment's status remembers of a run whose pods may be gone: ``seen_scheduled`` (its
    ``Scheduled`` condition was True: a pod was bound), ``seen_started`` (the bench wrote output while it
    ran), ``unschedulable`` (the scheduler's last message while the pod could not be placed)."""

    seen_scheduled: bool = False
    seen_started: bool = False
    unschedulable: str | None = None


#: Seconds past a pod's ``deletionTimestamp`` (its deletion time plus its grace period) the operator
#: waits for the kubelet to report it terminated before deciding with what it has.
TERMINATING_SLACK_S = 30.0


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _cond(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == type_), None)


def _true(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    c = _cond(obj, type_)
    return c if c is not None and c.get("status") == "True" else None


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
                       memory: Memory, lost: Mapping[str, Any] | None) -> Observation:
    """``DeadlineExceeded``: say what kept the bench from finishing, first cause first.

    ``mine``: every pod of the Job the operator saw, the deleted ones included (the Job controller
    deletes the pods of a Job past its deadline before it sets ``Failed``). The first cause: a node
    lost under a pod (``NodeLost``); no pod ever bound (``NeverScheduled``, with the scheduler's
    message, from the pod or remembered in the status); bound but the container never started
    (``NeverStarted``); else the bench ran too long (``DeadlineExceeded``).
    """
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    bound = [p for p in mine if (p.get("spec") or {}).get("nodeName")]
    if lost is None:
        lost = next((p for p in reversed(bound) if is_node_lost(p)), None)
    if lost is not None:
        lnode = (lost.get("spec") or {}).get("nodeName")
        return Observation("failed", "NodeLost",
                           f"node {lnode} of pod {obj.name(lost)} was lost while the bench ran; "
                           f"the Job then hit activeDeadlineSeconds={deadline}", outcome="InfraFailed", pod=lost,
                           node=lnode, disruptions=disruptions)
    if not bound and not memory.seen_scheduled:
        last = mine[-1] if mine else None
        sched = _cond(last, "PodScheduled") if last is not None else None
        existed = last is not None or _job_had_pods(job)
        why = ((sched or {}).get("message") or memory.unschedulable
               or ("no node was assigned" if existed else "no pod was created"))
        return Observation("failed", "NeverScheduled",
                           f"the pod of Job {jname} was never scheduled before activeDeadlineSeconds={deadline} "
                           f"(spec.timeoutSeconds) passed: {why}", outcome="InfraFailed", pod=last, disruptions=disruptions)
    last_bound = bound[-1] if bound else None
    cs = (container_status(last_bound) or {}) if last_bound is not None else {}
    if (last_bound is not None and not memory.seen_started and not (cs.get("state") or {}).get("running")
            and not terminated_state(last_bound) and not cs.get("lastState")):
        waiting = ((cs.get("state") or {}).get("waiting") or {})
        return Observation("failed", "NeverStarted",
                           f"the bench container of Job {jname} never started before activeDeadlineSeconds={deadline}: "
                           f"{waiting.get('reason') or 'waiting'} {waiting.get('message') or ''}".rstrip(),
                           outcome="InfraFailed", pod=last_bound, node=node, disruptions=disruptions)
    return Observation("failed", "DeadlineExceeded",
                       f"Job {jname} ran past activeDeadlineSeconds={deadline} (spec.timeoutSeconds) and was stopped",
                       outcome="InfraFailed", pod=pod or last_bound, node=node or (
                           (last_bound.get("spec") or {}).get("nodeName") if last_bound is not None else None),
                       disruptions=disruptions)


def _job_had_pods(job: Mapping[str, Any]) -> bool:
    """The Job's own counters say it created a pod (``active``/``failed``/``succeeded``/``terminating``,
    ``uncountedTerminatedPods``) — what is left when the pods themselves are gone."""
    st = job.get("status") or {}
    uncounted = st.get("uncountedTerminatedPods") or {}
    return any(int(st.get(k) or 0) > 0 for k in ("active", "failed", "succeeded", "terminating")) or \
        bool(uncounted.get("failed") or uncounted.get("succeeded"))


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
        since = (susp or {}).get("lastTransitionTime") or obj.created(job)
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


def _on_lost_node(pod: Mapping[str, Any], nodes: Mapping[str, bool | None] | None) -> bool:
    """The pod's node is gone or unreachable: :func:`is_node_lost`, or its ``Ready`` condition is not True
    (``nodes``: readiness by node name, as the reactor read it; None where unknown)."""
    if is_node_lost(pod):
        return True
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return bool(node) and nodes is not None and nodes.get(node) is False


def _overdue(pod: Mapping[str, Any], now: dt.datetime) -> float | None:
    """Seconds until a pod being deleted is past its grace period plus :data:`TERMINATING_SLACK_S`
    (<= 0: overdue; None: not being deleted). ``deletionTimestamp`` is the deletion time plus the grace
    period the kubelet was given."""
    t = parse_time(obj.meta(pod).get("deletionTimestamp"))
    return None if t is None else TERMINATING_SLACK_S - (now - t).total_seconds()


def _disrupted_since(pod: Mapping[str, Any]) -> str | None:
    """When the pod was disrupted: its ``DisruptionTarget`` transition, else its deletion or end."""
    target = _true(pod, "DisruptionTarget") or {}
    term = terminated_state(pod) or {}
    return (target.get("lastTransitionTime") or obj.meta(pod).get("deletionTimestamp") or term.get("finishedAt")
            or obj.created(pod) or None)


def observe(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: dt.datetime,
    timeouts: Timeouts = Timeouts(),
    failed_create: str | None = None,
    seen_scheduled: bool = False,
    *,
    gone: Sequence[Mapping[str, Any]] = (),
    memory: Memory | None = None,
    nodes: Mapping[str, bool | None] | None = None,
) -> Observation:
    """Classify a Job and its pods (any pods may be passed; those of the Job are picked out).

    ``pods``: the pods on the API server now; ``gone``: the last state of pods deleted since (the
    operator's memory of them: an evicted pod, the pods the Job controller deleted at the deadline).
    Both count for disruptions, for "was it ever bound" and for the pod to read results from.
    ``failed_create``: the message of the Job's latest ``FailedCreate`` event, if the caller has it
    (it goes into the ``PodCreateFailed`` message). ``memory``: what the status remembers
    (``seen_scheduled``: the pod was bound; ``unschedulable``: the scheduler's last message).
    ``nodes``: readiness of the nodes of pods being deleted (None: not read; then
    :attr:`Observation.check_nodes` names the nodes to read).
    """
    memory = memory or Memory(seen_scheduled=seen_scheduled)
    live = obj.pods_of_job(job, pods)
    live_uids = {obj.uid(p) for p in live}
    departed = [p for p in obj.pods_of_job(job, gone) if obj.uid(p) not in live_uids]
    mine = sorted([*live, *departed], key=lambda p: (obj.created(p), obj.name(p)))
    disruptions = sum(1 for p in mine if is_disrupted(p))
    last = mine[-1] if mine else None
    jname = obj.name(job) or "?"
    spec = job.get("spec") or {}

    complete = _true(job, "Complete")
    failed = _true(job, "Failed")
    ending = _true(job, "SuccessCriteriaMet") or _true(job, "FailureTarget")
    lost: Mapping[str, Any] | None = None
    alive = [p for p in live if _phase(p) not in obj.POD_ENDED_PHASES]
    deleting_alive = [p for p in alive if obj.deleting(p)]
    if (ending and not (complete or failed)) or (deleting_alive and not (complete or failed)
                                                  and len(deleting_alive) == len(alive)):
        # Pods are ending: the Job controller decided (Kubernetes >= 1.31 sets FailureTarget /
        # SuccessCriteriaMet first) or is deleting them (its deadline, an eviction). Wait for them —
        # bounded: not past their grace period (plus a slack), not at all on a lost node.
        unknown = tuple(sorted({str((p.get("spec") or {}).get("nodeName")) for p in alive
                                if (p.get("spec") or {}).get("nodeName") and not is_node_lost(p)}))
        lost = next((p for p in reversed(alive) if _on_lost_node(p, nodes)), None)
        waited = [p for p in alive if not _on_lost_node(p, nodes) and (_overdue(p, now) is None or (_overdue(p, now) or 0.0) > 0)]
        if waited and nodes is None and unknown:
            return Observation("transition", "Terminating", f"Job {jname}: reading the readiness of node(s) "
                               f"{', '.join(unknown)}", disruptions=disruptions, check_nodes=unknown)
        if waited:
            pod = waited[-1]
            left = _overdue(pod, now)
            what = (f"Job {jname} is ending ({ending.get('type')}: {ending.get('reason') or 'no reason'})" if ending
                    else f"pod {obj.name(pod)} is being deleted")
            return Observation("transition", "Terminating",
                               f"{what}; waiting for pod {obj.name(pod)} to terminate", pod=pod,
                               node=(pod.get("spec") or {}).get("nodeName"), disruptions=disruptions,
                               recheck_after_s=max(0.5, left) if left is not None else TERMINATING_SLACK_S)
        if ending and not (complete or failed):
            if ending.get("type") == "SuccessCriteriaMet":
                complete = ending
            else:
                failed = ending
        elif not (complete or failed):
            # Every pod being deleted is past its bound or on a lost node, and the Job has not ended.
            pod = lost or deleting_alive[-1]
            node = (pod.get("spec") or {}).get("nodeName")
            if lost is not None:
                return Observation("failed", "NodeLost", f"node {node} of pod {obj.name(pod)} was lost while the bench ran",
                                   outcome="InfraFailed", pod=pod, node=node, abort=True, disruptions=disruptions)
            return Observation("transition", "Terminating", f"pod {obj.name(pod)} is past its grace period and still "
                               f"terminating; waiting for the Job controller", pod=pod, node=node,
                               disruptions=disruptions, recheck_after_s=TERMINATING_SLACK_S)
    if complete:
        done = next((p for p in reversed(mine) if _phase(p) == "Succeeded"), last)
        node = (done or {}).get("spec", {}).get("nodeName") if done else None
        return Observation("succeeded", "JobSucceeded", f"Job {jname} completed", pod=done, node=node,
                           disruptions=disruptions, exit_code=0)
    if failed:
        reason = failed.get("reason") or ""
        ran = [p for p in mine if _phase(p) == "Failed" and not is_disrupted(p)]
        ended = ran[-1] if ran else (lost or last)
        node = (ended or {}).get("spec", {}).get("nodeName") if ended else None
        if reason == "DeadlineExceeded":
            return _deadline_exceeded(job, jname, mine, ended, node, disruptions, memory, lost)
        if lost is not None:
            lnode = (lost.get("spec") or {}).get("nodeName")
            return Observation("failed", "NodeLost", f"node {lnode} of pod {obj.name(lost)} was lost while the bench ran",
                               outcome="InfraFailed", pod=lost, node=lnode, disruptions=disruptions)
        if ended is None:
            return Observation("failed", "JobFailed",
                               f"Job {jname} failed ({reason or 'no reason'}: {failed.get('message', '')}) and its pod is gone",
                               outcome="InfraFailed", disruptions=disruptions)
        outcome, why, msg, code = classify_failed_pod(ended)
        return Observation("failed", why, msg, outcome=outcome, pod=ended, node=node, disruptions=disruptions, exit_code=code)

    if disruptions > timeouts.max_disruptions:
        return Observation("failed", "Evicted",
                           f"the bench pod was disrupted {disruptions} times (retry budget {timeouts.max_disruptions}); "
                           "giving up on this node pool",
                           outcome="InfraFailed", pod=last, abort=True, disruptions=disruptions)
    if spec.get("suspend"):
        return Observation("suspended", "Suspended", f"Job {jname} is suspended", disruptions=disruptions)

    current = next((p for p in reversed(live) if _phase(p) not in obj.POD_ENDED_PHASES and not obj.deleting(p)), None)
    if current is None:
        if last is not None and is_disrupted(last):
            # Waiting for the Job controller's replacement (it backs off ~10 s): counted from the
            # disruption, not from the Job's start.
            elapsed = _elapsed(_disrupted_since(last), now) or 0.0
            limit = timeouts.image_pull_timeout_s
            if elapsed >= limit:
                detail = failed_create or job_condition_message(job) or "no FailedCreate event or Job condition says why"
                return Observation("failed", "PodCreateFailed",
                                   f"PodCreateFailed: Job {jname} created no pod in {elapsed:.0f}s after pod "
                                   f"{obj.name(last)} was disrupted (limit {limit:.0f}s): {detail}",
                                   outcome="InfraFailed", abort=True, disruptions=disruptions)
            return Observation("transition", "Replacing", f"Job {jname}: pod {obj.name(last)} disrupted "
                               f"({disruptions} of {timeouts.max_disruptions} allowed), waiting for its replacement",
                               disruptions=disruptions, recheck_after_s=max(0.5, limit - elapsed))
        if last is not None and _phase(last) in obj.POD_ENDED_PHASES:
            # The pod ended; the Job controller has not set the Job's condition yet.
            node = (last.get("spec") or {}).get("nodeName")
            return Observation("running", "Running", f"pod {obj.name(last)} ended; "
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
        since = (scheduled_cond or {}).get("lastTransitionTime") or obj.created(current)
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
