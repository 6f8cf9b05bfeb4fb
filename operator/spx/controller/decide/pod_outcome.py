"""Classify the state of a bench Job and its pods: still going, succeeded, or failed — and whose fault.

Pure: takes the Job and pod manifests as the API server returns them, the current time and the
operator's timeouts (:class:`~spx.controller.decide.observation.Timeouts`). The decision step
(:mod:`spx.controller.decide.conclusion`) acts on the :class:`~spx.controller.decide.observation.Observation`.
:func:`observe` orders the readings: the Job's own status (:mod:`spx.controller.decide.job_status`), pods
being deleted or taken away (:mod:`spx.controller.decide.pod_disruption`), the pod getting to run
(:mod:`spx.controller.decide.pod_startup`), how its container ended (:mod:`spx.controller.decide.pod_exit`).

How each failure class is told apart:

- **Benchmark failure** (``BenchmarkFailed``): the bench container ran and exited non-zero on its
  own — exit code 1 (the bench failed), 2 (invalid input), a signal such as SIGSEGV, or
  ``OOMKilled`` (the bench's memory) — and the pod carries no ``DisruptionTarget`` condition.
- **Infrastructure failure** (``InfraFailed``): the pod never ran or was taken away —
  deleted while the bench ran (``PodDeleted``: the container ended after the pod's deletion was asked for);
  ``Unschedulable`` for longer than ``schedule_timeout_s``; image pull errors (``ErrImagePull`` /
  ``ImagePullBackOff`` past ``image_pull_timeout_s``, ``InvalidImageName`` at once); container
  creation errors past the same timeout; pod disruptions (``DisruptionTarget`` condition or a
  kubelet ``Evicted`` pod) beyond ``max_disruptions`` retries; the Job's ``activeDeadlineSeconds``
  (``DeadlineExceeded``); a failed Job whose pod is gone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from spx.controller.decide import objects as obj
from spx.controller.decide.conditions import parse_time
from spx.controller.decide.job_status import job_had_pods
from spx.controller.decide.observation import Memory, Observation, Outcome, Timeouts
from spx.controller.decide.pod_disruption import (
    TERMINATING_SLACK_S,
    awaiting_replacement,
    grace_left_s,
    is_disrupted,
    is_node_lost,
    on_lost_node,
)
from spx.controller.decide.pod_exit import container_status, describe_exit, terminated_state
from spx.controller.decide.pod_startup import (
    IMAGE_PULL_FATAL,
    IMAGE_PULL_RETRYING,
    no_pod_yet,
    pending_pod,
    waiting_message,
)
from spx.vocabulary import CompletedReason


def deleted_while_running(pod: obj.Body, term: obj.Body) -> bool:
    """The pod's deletion was asked for (:func:`~spx.controller.decide.objects.deletion_asked`) before its
    container ended (``finishedAt``) — not a pod removed after it had failed on its own. Without
    ``finishedAt``: a signal exit (> 128) of a pod being deleted."""
    asked = obj.deletion_asked(pod)
    if asked is None:
        return False
    finished = parse_time(term.get("finishedAt"))
    if finished is None:
        return int(term.get("exitCode", -1)) > 128
    return finished >= asked


def classify_failed_pod(pod: obj.Body) -> tuple[Outcome, CompletedReason, str, int | None]:
    """(outcome, reason, message, exit code) of a pod in phase Failed."""
    status = obj.status(pod)
    name = obj.meta(pod).get("name", "?")
    if is_node_lost(pod):
        node = obj.node_name(pod) or "?"
        return "InfraFailed", "NodeLost", f"node {node} of pod {name} was lost while the bench ran", None
    if is_disrupted(pod):
        cond = obj.true_condition(pod, "DisruptionTarget") or {}
        why = cond.get("message") or status.get("message") or cond.get("reason") or status.get("reason") or "disrupted"
        return "InfraFailed", "Evicted", f"pod {name} was disrupted: {why}", None
    term = terminated_state(pod)
    if term is not None:
        code = int(term.get("exitCode", -1))
        if code != 0 and term.get("reason") != "OOMKilled" and deleted_while_running(pod, term):
            # Deleted (``kubectl delete pod``, a controller; an eviction would carry DisruptionTarget):
            # the SIGTERM that ended the bench came from outside (``spx run`` then exits 1, a bench
            # without a handler 143), not from a crash of its own.
            return "InfraFailed", "PodDeleted", f"pod {name} was deleted while the bench ran: {describe_exit(term)}", code
        reason: CompletedReason = "OOMKilled" if term.get("reason") == "OOMKilled" else ("InvalidInput" if code in (2, 3) else "BenchmarkCrashed")  # 3: spx.api.exit_codes.EXIT_USAGE; 2: older images
        return "BenchmarkFailed", reason, f"pod {name}: {describe_exit(term)}", code
    cs = container_status(pod) or {}
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in IMAGE_PULL_FATAL | IMAGE_PULL_RETRYING:
        return "InfraFailed", "ImagePullFailed", f"pod {name}: {waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": "), None
    why = status.get("message") or status.get("reason") or "the pod failed before its container ran"
    return "InfraFailed", "PodFailed", f"pod {name}: {why}", None


def _deadline_exceeded(job: obj.Body, jname: str, mine: Sequence[obj.Body],
                       pod: obj.Body | None, node: str | None, disruptions: int,
                       memory: Memory, lost: obj.Body | None) -> Observation:
    """``DeadlineExceeded``: say what kept the bench from finishing, first cause first.

    ``mine``: every pod of the Job the operator saw, the deleted ones included (the Job controller
    deletes the pods of a Job past its deadline before it sets ``Failed``). The first cause: a node
    lost under a pod (``NodeLost``); no pod ever bound (``NeverScheduled``, with the scheduler's
    message, from the pod or remembered in the status); bound but the container never started
    (``NeverStarted``); else the bench ran too long (``DeadlineExceeded``).
    """
    deadline = obj.spec(job).get("activeDeadlineSeconds")
    bound = [p for p in mine if obj.node_name(p)]
    if lost is None:
        lost = next((p for p in reversed(bound) if is_node_lost(p)), None)
    if lost is not None:
        lnode = obj.node_name(lost)
        return Observation("failed", "NodeLost",
                           f"node {lnode} of pod {obj.name(lost)} was lost while the bench ran; "
                           f"the Job then hit activeDeadlineSeconds={deadline}", outcome="InfraFailed", pod=lost,
                           node=lnode, disruptions=disruptions)
    if not bound and not memory.seen_scheduled:
        last = mine[-1] if mine else None
        sched = obj.condition(last, "PodScheduled") if last is not None else None
        existed = last is not None or job_had_pods(job)
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
                           obj.node_name(last_bound) if last_bound is not None else None),
                       disruptions=disruptions)


def observe(
    job: obj.Body,
    pods: Sequence[obj.Body],
    now: dt.datetime,
    timeouts: Timeouts = Timeouts(),
    failed_create: str | None = None,
    seen_scheduled: bool = False,
    *,
    gone: Sequence[obj.Body] = (),
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

    In order: pods still ending (:func:`_pods_ending`), a Job that ended (:func:`_job_ended`), a Job
    still going (:func:`_job_going`).
    """
    memory = memory or Memory(seen_scheduled=seen_scheduled)
    live = obj.pods_of_job(job, pods)
    live_uids = {obj.uid(p) for p in live}
    departed = [p for p in obj.pods_of_job(job, gone) if obj.uid(p) not in live_uids]
    mine = sorted([*live, *departed], key=lambda p: (obj.created(p), obj.name(p)))
    disruptions = sum(1 for p in mine if is_disrupted(p))
    jname = obj.name(job) or "?"
    complete = obj.true_condition(job, "Complete")
    failed = obj.true_condition(job, "Failed")
    lost: obj.Body | None = None
    if not (complete or failed):
        waiting = _pods_ending(job, jname, live, now, nodes, disruptions)
        if isinstance(waiting, Observation):
            return waiting
        ending, lost = waiting
        if ending is not None:
            complete, failed = (ending, None) if ending.get("type") == "SuccessCriteriaMet" else (None, ending)
    if complete or failed:
        return _job_ended(job, jname, mine, complete, failed, lost, memory, disruptions)
    return _job_going(job, jname, live, mine, now, timeouts, failed_create, disruptions)


def _pods_ending(job: obj.Body, jname: str, live: Sequence[obj.Body], now: dt.datetime,
                 nodes: Mapping[str, bool | None] | None, disruptions: int,
                 ) -> Observation | tuple[obj.RawCondition | None, obj.Body | None]:
    """Pods of a Job with no final condition yet that are ending: an :class:`Observation` to wait on them,
    else (the ``SuccessCriteriaMet``/``FailureTarget`` condition the Job ended with or None, the live pod
    on a lost node or None).

    The Job controller decided (Kubernetes >= 1.31 sets FailureTarget / SuccessCriteriaMet first) or is
    deleting every live pod (its deadline, an eviction). Wait for them — bounded: not past their grace
    period (plus a slack), not at all on a lost node."""
    ending = obj.true_condition(job, "SuccessCriteriaMet") or obj.true_condition(job, "FailureTarget")
    alive = [p for p in live if obj.pod_phase(p) not in obj.POD_ENDED_PHASES]
    deleting_alive = [p for p in alive if obj.deleting(p)]
    if not ending and not (deleting_alive and len(deleting_alive) == len(alive)):
        return None, None
    unknown = tuple(sorted({str(obj.node_name(p)) for p in alive
                            if obj.node_name(p) and not is_node_lost(p)}))
    lost = next((p for p in reversed(alive) if on_lost_node(p, nodes)), None)
    waited = [p for p in alive if not on_lost_node(p, nodes) and (grace_left_s(p, now) is None or (grace_left_s(p, now) or 0.0) > 0)]
    if waited and nodes is None and unknown:
        return Observation("transition", "Terminating", f"Job {jname}: reading the readiness of node(s) "
                           f"{', '.join(unknown)}", disruptions=disruptions, check_nodes=unknown)
    if waited:
        pod = waited[-1]
        left = grace_left_s(pod, now)
        what = (f"Job {jname} is ending ({ending.get('type')}: {ending.get('reason') or 'no reason'})" if ending
                else f"pod {obj.name(pod)} is being deleted")
        return Observation("transition", "Terminating",
                           f"{what}; waiting for pod {obj.name(pod)} to terminate", pod=pod,
                           node=obj.node_name(pod), disruptions=disruptions,
                           recheck_after_s=max(0.5, left) if left is not None else TERMINATING_SLACK_S)
    if ending:
        return ending, lost
    # Every pod being deleted is past its bound or on a lost node, and the Job has not ended.
    pod = lost or deleting_alive[-1]
    node = obj.node_name(pod)
    if lost is not None:
        return Observation("failed", "NodeLost", f"node {node} of pod {obj.name(pod)} was lost while the bench ran",
                           outcome="InfraFailed", pod=pod, node=node, abort=True, disruptions=disruptions)
    return Observation("transition", "Terminating", f"pod {obj.name(pod)} is past its grace period and still "
                       f"terminating; waiting for the Job controller", pod=pod, node=node,
                       disruptions=disruptions, recheck_after_s=TERMINATING_SLACK_S)


def _job_ended(job: obj.Body, jname: str, mine: Sequence[obj.Body],
               complete: obj.Body | None, failed: obj.Body | None,
               lost: obj.Body | None, memory: Memory, disruptions: int) -> Observation:
    """A Job with a final condition (``complete``, else ``failed``): succeeded, or why it failed."""
    last = mine[-1] if mine else None
    if complete:
        done = next((p for p in reversed(mine) if obj.pod_phase(p) == "Succeeded"), last)
        node = (done or {}).get("spec", {}).get("nodeName") if done else None
        return Observation("succeeded", "JobSucceeded", f"Job {jname} completed", pod=done, node=node,
                           disruptions=disruptions, exit_code=0)
    failed = failed or {}
    reason = failed.get("reason") or ""
    ran = [p for p in mine if obj.pod_phase(p) == "Failed" and not is_disrupted(p)]
    ended = ran[-1] if ran else (lost or last)
    node = (ended or {}).get("spec", {}).get("nodeName") if ended else None
    if reason == "DeadlineExceeded":
        return _deadline_exceeded(job, jname, mine, ended, node, disruptions, memory, lost)
    if lost is not None:
        lnode = obj.node_name(lost)
        return Observation("failed", "NodeLost", f"node {lnode} of pod {obj.name(lost)} was lost while the bench ran",
                           outcome="InfraFailed", pod=lost, node=lnode, disruptions=disruptions)
    if ended is None:
        return Observation("failed", "JobFailed",
                           f"Job {jname} failed ({reason or 'no reason'}: {failed.get('message', '')}) and its pod is gone",
                           outcome="InfraFailed", disruptions=disruptions)
    outcome, why, msg, code = classify_failed_pod(ended)
    return Observation("failed", why, msg, outcome=outcome, pod=ended, node=node, disruptions=disruptions, exit_code=code)


def _job_going(job: obj.Body, jname: str, live: Sequence[obj.Body],
               mine: Sequence[obj.Body], now: dt.datetime, timeouts: Timeouts,
               failed_create: str | None, disruptions: int) -> Observation:
    """A Job with no final condition and no pod ending: past its disruption budget, suspended, waiting
    for a (replacement) pod, or running."""
    last = mine[-1] if mine else None
    if disruptions > timeouts.max_disruptions:
        return Observation("failed", "Evicted",
                           f"the bench pod was disrupted {disruptions} times (retry budget {timeouts.max_disruptions}); "
                           "giving up on this node pool",
                           outcome="InfraFailed", pod=last, abort=True, disruptions=disruptions)
    if obj.spec(job).get("suspend"):
        return Observation("suspended", "Suspended", f"Job {jname} is suspended", disruptions=disruptions)

    current = next((p for p in reversed(live) if obj.pod_phase(p) not in obj.POD_ENDED_PHASES and not obj.deleting(p)), None)
    if current is None:
        if last is not None and is_disrupted(last):
            return awaiting_replacement(job, jname, last, now, timeouts, failed_create, disruptions)
        if last is not None and obj.pod_phase(last) in obj.POD_ENDED_PHASES:
            # The pod ended; the Job controller has not set the Job's condition yet.
            node = obj.node_name(last)
            return Observation("running", "Running", f"pod {obj.name(last)} ended; "
                               "waiting for the Job's final condition", pod=last, node=node, disruptions=disruptions)
        if last is None:
            return no_pod_yet(job, jname, now, timeouts, failed_create, disruptions)
        return Observation("pending", "Pending", waiting_message(jname), disruptions=disruptions)

    if obj.pod_phase(current) == "Pending":
        return pending_pod(current, jname, now, timeouts, disruptions)
    pname = obj.meta(current).get("name", "?")
    node = obj.node_name(current)
    return Observation("running", "Running", f"pod {pname} is running", pod=current, node=node, disruptions=disruptions)
