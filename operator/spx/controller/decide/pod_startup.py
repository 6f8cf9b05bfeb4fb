"""Getting the bench pod running: the Job creating it, the scheduler placing it, the kubelet pulling
the image and creating the container — each problem waited out up to its limit
(:class:`~spx.controller.decide.observation.Timeouts`), then ``InfraFailed``. Pure.

- no pod (ResourceQuota, LimitRange, Pod Security admission, a webhook): ``PodCreateFailed`` past
  ``image_pull_timeout_s`` from the Job's start (:func:`no_pod_yet`);
- ``Unschedulable`` past ``schedule_timeout_s`` (:func:`pending_pod`);
- image pull errors past ``image_pull_timeout_s`` (:data:`IMAGE_PULL_FATAL` at once), container
  creation errors past the same limit.
"""

from __future__ import annotations

import datetime as dt

from spx.controller.decide import objects as obj
from spx.controller.decide.conditions import seconds_since
from spx.controller.decide.job_status import job_condition_message
from spx.controller.decide.observation import Observation, Timeouts
from spx.controller.decide.pod_exit import container_status
from spx.vocabulary import CompletedReason

#: Image errors no retry fixes: ``InfraFailed`` at once.
IMAGE_PULL_FATAL = frozenset({"InvalidImageName", "ErrImageNeverPull"})
#: Image errors the kubelet retries (with back-off): waited out up to ``image_pull_timeout_s``.
IMAGE_PULL_RETRYING = frozenset({"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable", "SignatureValidationFailed"})
#: Container creation errors, waited out up to ``image_pull_timeout_s``.
CONTAINER_CREATE_ERRORS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreCreateHookError", "PostStartHookError"})


def waiting_message(job_name: str) -> str:
    """The message while a Job's pod is not bound yet (one text, so status is not rewritten for nothing)."""
    return f"Job {job_name} created, waiting for its pod to be scheduled"


def no_pod_yet(job: obj.Body, jname: str, now: dt.datetime, timeouts: Timeouts,
               failed_create: str | None, disruptions: int) -> Observation:
    """An unsuspended Job without any pod: waiting, or ``PodCreateFailed`` once that lasted too long.

    The Job controller could not create the pod (ResourceQuota, LimitRange, Pod Security admission,
    an admission webhook …): it retries forever and posts ``FailedCreate`` events. Past
    ``image_pull_timeout_s`` (the limit on pod start-up problems) the run is ``InfraFailed``.
    """
    status = obj.status(job)
    since = status.get("startTime")
    if not since:
        # The Job controller sets startTime on its first sync of an unsuspended Job. Before that, a
        # Job that was suspended (Kueue) counts from its resumption, not from its creation.
        susp = obj.condition(job, "Suspended")
        if susp is not None and susp.get("status") == "True":
            return Observation("pending", "Pending", waiting_message(jname), disruptions=disruptions,
                               recheck_after_s=max(0.5, timeouts.image_pull_timeout_s))
        since = (susp or {}).get("lastTransitionTime") or obj.created(job)
    elapsed = seconds_since(since, now)
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


def pending_pod(current: obj.Body, jname: str, now: dt.datetime, timeouts: Timeouts,
                disruptions: int) -> Observation:
    """The Job's current pod is in phase ``Pending``: not placed (``unschedulable`` within
    ``schedule_timeout_s``, then ``Unschedulable`` InfraFailed), bound with an image or container
    creation problem (``scheduled`` within ``image_pull_timeout_s`` counted from binding, then
    ``ImagePullFailed``/``ContainerCreateFailed``), bound (``scheduled``), or not yet looked at by the
    scheduler (``pending``). Every ``failed`` here has ``abort``: Kubernetes would keep trying."""
    pname = obj.meta(current).get("name", "?")
    node = obj.node_name(current)
    scheduled_cond = obj.condition(current, "PodScheduled")
    if scheduled_cond is not None and scheduled_cond.get("status") == "False" and scheduled_cond.get("reason") == "Unschedulable":
        elapsed = seconds_since(scheduled_cond.get("lastTransitionTime"), now) or 0.0
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
    elapsed = seconds_since(since, now) or 0.0
    if wreason in IMAGE_PULL_FATAL:
        return Observation("failed", "ImagePullFailed", f"pod {pname}: {wreason}: {waiting.get('message', '')}".rstrip(": "),
                           outcome="InfraFailed", pod=current, node=node, abort=True, disruptions=disruptions)
    if wreason in IMAGE_PULL_RETRYING | CONTAINER_CREATE_ERRORS:
        kind: CompletedReason = "ImagePullFailed" if wreason in IMAGE_PULL_RETRYING else "ContainerCreateFailed"
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
