"""What a bench Job's own status says — its conditions and pod counters — read apart from its pods
(which may be gone, or not there yet). Pure.

The conditions are the Job controller's (``pkg/controller/job/job_controller.go``): the final
``Complete``/``Failed``; ``SuccessCriteriaMet``/``FailureTarget`` (Kubernetes >= 1.31) while it
terminates the pods before setting the final one; ``Suspended`` (Kueue).
"""

from __future__ import annotations

from spx.controller.decide import objects as obj


def job_finished(job: obj.Body) -> bool:
    """The Job has its final ``Complete`` or ``Failed`` condition (the Job controller is done with it)."""
    for c in obj.status(job).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return True
    return False


def job_ending(job: obj.Body) -> bool:
    """``FailureTarget``/``SuccessCriteriaMet`` is set: the Job controller is terminating its pods
    (their grace period) and will set the final condition — do not delete it meanwhile."""
    for c in obj.status(job).get("conditions") or []:
        if c.get("type") in ("FailureTarget", "SuccessCriteriaMet") and c.get("status") == "True":
            return True
    return False


def job_condition_message(job: obj.Body) -> str | None:
    """The message of the Job's latest condition that has one (e.g. a pod-creation problem)."""
    with_msg = [c for c in obj.conditions(job) if c.get("message") and c.get("type") != "Suspended"]
    if not with_msg:
        return None
    latest = max(with_msg, key=lambda c: str(c.get("lastTransitionTime") or ""))
    return f"{latest.get('reason') or latest.get('type')}: {latest.get('message')}"


def job_had_pods(job: obj.Body) -> bool:
    """The Job's own counters say it created a pod (``active``/``failed``/``succeeded``/``terminating``,
    ``uncountedTerminatedPods``) — what is left when the pods themselves are gone."""
    st = obj.status(job)
    uncounted = st.get("uncountedTerminatedPods") or {}
    return any(int(st.get(k) or 0) > 0 for k in ("active", "failed", "succeeded", "terminating")) or \
        bool(uncounted.get("failed") or uncounted.get("succeeded"))


def suspended_since(job: obj.Body) -> str | None:
    """When the Job was last suspended: its ``Suspended=True`` condition's ``lastTransitionTime`` (the
    Job controller sets it on creation suspended and again when Kueue preempts — re-suspends — a running
    Job); None before the Job controller wrote it."""
    cond = obj.true_condition(job, "Suspended")
    return str(cond.get("lastTransitionTime") or "") or None if cond is not None else None
