"""Bench pods the cluster took away: disruptions (eviction, preemption, drain, node pressure), pods
whose node was lost, the bound on waiting for a pod being deleted, and the wait for the Job
controller's replacement of a disrupted pod. Pure.

The Job's ``podFailurePolicy`` ignores ``DisruptionTarget`` pods (:func:`spx.controller.manifests.job.build_job_spec`),
so the Job controller replaces a disrupted pod; the operator counts disruptions against
``max_disruptions`` and bounds the wait for the replacement (:func:`awaiting_replacement`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from spx.controller.decide import objects as obj
from spx.controller.decide.conditions import parse_time, seconds_since
from spx.controller.decide.job_status import job_condition_message
from spx.controller.decide.observation import Observation, Timeouts
from spx.controller.decide.pod_exit import terminated_state

#: ``status.reason`` values of pods the node (not the bench) failed.
NODE_POD_REASONS = frozenset({"Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated", "NodeLost", "UnexpectedAdmissionError", "NodeAffinity", "OutOfcpu", "OutOfmemory", "OutOfpods"})
#: ``DisruptionTarget`` reasons of a pod whose node went away (taint manager, pod GC of orphans).
NODE_LOST_DISRUPTIONS = frozenset({"DeletionByTaintManager", "DeletionByPodGC"})

#: The Job controller's pod back-off: it creates the replacement of the n-th failed pod (disrupted ones
#: included) after 10 s · 2^(n-1), at most 10 min (``DefaultJobPodFailureBackOff`` and
#: ``MaxJobPodFailureBackOff`` in kubernetes ``pkg/controller/job/job_controller.go``; the Job docs
#: quote "10s, 20s, 40s ... capped at six minutes").
JOB_POD_BACKOFF_S = 10.0
JOB_POD_BACKOFF_MAX_S = 600.0
#: Seconds over the back-off for the Job controller's sync and the pod's creation on a loaded cluster.
REPLACEMENT_SLACK_S = 20.0

#: Seconds past a pod's ``deletionTimestamp`` (its deletion time plus its grace period) the operator
#: waits for the kubelet to report it terminated before deciding with what it has.
TERMINATING_SLACK_S = 30.0


def is_node_lost(pod: obj.Body) -> bool:
    """The pod's node went away under it: phase ``Unknown``, reason ``NodeLost``, or a
    ``DisruptionTarget`` set by the taint manager / pod GC (``k8s.io/kubernetes/pkg/controller/podgc``)."""
    if obj.pod_phase(pod) == "Unknown" or obj.status(pod).get("reason") == "NodeLost":
        return True
    target = obj.true_condition(pod, "DisruptionTarget")
    return target is not None and target.get("reason") in NODE_LOST_DISRUPTIONS


def is_disrupted(pod: obj.Body) -> bool:
    """The pod was taken away by the cluster (eviction, preemption, drain, node pressure)."""
    if obj.true_condition(pod, "DisruptionTarget"):
        return True
    return obj.pod_phase(pod) == "Failed" and obj.status(pod).get("reason") in NODE_POD_REASONS


def on_lost_node(pod: obj.Body, nodes: Mapping[str, bool | None] | None) -> bool:
    """The pod's node is gone or unreachable: :func:`is_node_lost`, or its ``Ready`` condition is not True
    (``nodes``: readiness by node name, as the reactor read it; None where unknown)."""
    if is_node_lost(pod):
        return True
    node = str(obj.node_name(pod) or "")
    return bool(node) and nodes is not None and nodes.get(node) is False


def grace_left_s(pod: obj.Body, now: dt.datetime) -> float | None:
    """Seconds until a pod being deleted is past its grace period plus :data:`TERMINATING_SLACK_S`
    (<= 0: overdue; None: not being deleted). ``deletionTimestamp`` is the deletion time plus the grace
    period the kubelet was given."""
    t = parse_time(obj.meta(pod).get("deletionTimestamp"))
    return None if t is None else TERMINATING_SLACK_S - (now - t).total_seconds()


def disrupted_since(pod: obj.Body) -> str | None:
    """When the pod was disrupted: its ``DisruptionTarget`` transition, else its deletion or end."""
    target = obj.true_condition(pod, "DisruptionTarget") or {}
    term = terminated_state(pod) or {}
    return (target.get("lastTransitionTime") or obj.meta(pod).get("deletionTimestamp") or term.get("finishedAt")
            or obj.created(pod) or None)


def replacement_wait_s(timeouts: Timeouts, disruptions: int) -> float:
    """Seconds to wait, from the disruption, for the Job controller's replacement of the ``disruptions``-th
    disrupted pod: ``timeouts.replacement_timeout_s``, but never less than the Job controller's back-off
    before that replacement (:data:`JOB_POD_BACKOFF_S` doubling per disruption, at most
    :data:`JOB_POD_BACKOFF_MAX_S`) plus :data:`REPLACEMENT_SLACK_S`. The image-pull limit plays no part:
    it bounds a pod that exists, this bounds the wait for one to be created."""
    backoff = min(JOB_POD_BACKOFF_MAX_S, JOB_POD_BACKOFF_S * 2.0 ** max(0, disruptions - 1))
    return max(timeouts.replacement_timeout_s, backoff + REPLACEMENT_SLACK_S)


def awaiting_replacement(job: obj.Body, jname: str, last: obj.Body, now: dt.datetime,
                         timeouts: Timeouts, failed_create: str | None, disruptions: int) -> Observation:
    """The Job's last pod was disrupted and no other runs: waiting for the Job controller's replacement
    (it backs off 10 s and more, :func:`replacement_wait_s`) — ``Replacing``, or ``PodCreateFailed``
    (InfraFailed, abort) once that wait passed, counted from the disruption (:func:`disrupted_since`),
    not from the Job's start. ``failed_create``: the Job's latest ``FailedCreate`` event message, if known."""
    elapsed = seconds_since(disrupted_since(last), now) or 0.0
    limit = replacement_wait_s(timeouts, disruptions)
    if elapsed >= limit:
        detail = failed_create or job_condition_message(job) or "no FailedCreate event or Job condition says why"
        return Observation("failed", "PodCreateFailed",
                           f"PodCreateFailed: Job {jname} created no pod in {elapsed:.0f}s after pod "
                           f"{obj.name(last)} was disrupted (limit {limit:.0f}s, SPX_REPLACEMENT_TIMEOUT_SECONDS): {detail}",
                           outcome="InfraFailed", abort=True, disruptions=disruptions)
    return Observation("transition", "Replacing", f"Job {jname}: pod {obj.name(last)} disrupted "
                       f"({disruptions} of {timeouts.max_disruptions} allowed), waiting for its replacement",
                       disruptions=disruptions, recheck_after_s=max(0.5, limit - elapsed))
