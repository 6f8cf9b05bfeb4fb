"""Metadata, ownership and status conditions of Kubernetes objects as the API server returns them
(plain dicts). Pure.

The one place the controller reads ``metadata`` and ``status.conditions`` and decides "this pod
belongs to this Job" — the decision step (:mod:`spx.controller.decide.conclusion`, :mod:`spx.controller.decide.pod_outcome`
and the pod readings under it), the store and the reactor all use it, as kopf keeps its accessors
in one module (``kopf/_cogs/structs/bodies.py``).

Typed as kopf types them (``kopf/_cogs/structs/bodies.py``: ``RawBody``, ``RawMeta``): :data:`Body` is an
object as the API server returns it, read only through the accessors here (:func:`meta` → :class:`RawMeta`,
:func:`spec`, :func:`status`, :func:`node_name`, :func:`conditions` → :class:`RawCondition`), never by
``obj.get("metadata")`` in the modules that decide.

Ownership of a pod by a Job follows the Job controller (``pkg/controller/job/job_controller.go``):
the controller owner reference (the Job's uid), else the ``batch.kubernetes.io/job-name`` label
(Kubernetes >= 1.27) or its older spelling ``job-name``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, cast

#: Labels the Job controller puts on its pods, newest first (``batch.kubernetes.io/job-name`` since 1.27).
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
#: Kubernetes pod phases in which the pod's containers have ended (the pod API; not spx's own phases).
POD_ENDED_PHASES = ("Succeeded", "Failed")


#: A Kubernetes object as the API server returns it (JSON decoded; kopf's ``RawBody``).
Body = Mapping[str, Any]


class RawOwnerReference(TypedDict, total=False):
    """One of ``metadata.ownerReferences`` (``meta/v1 OwnerReference``)."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class RawMeta(TypedDict, total=False):
    """``metadata`` (``meta/v1 ObjectMeta``; kopf's ``RawMeta``): the fields the controller reads."""

    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    ownerReferences: list[RawOwnerReference]


class RawCondition(TypedDict, total=False):
    """One of ``status.conditions`` of a Job, pod or experiment (``meta/v1 Condition`` and its older kin)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    lastProbeTime: str
    observedGeneration: int


def meta(obj: Body) -> RawMeta:
    """``metadata`` (empty when absent)."""
    return cast(RawMeta, obj.get("metadata") or {})


def spec(obj: Body | None) -> Mapping[str, Any]:
    """``spec`` (empty when absent, or when ``obj`` is None)."""
    return cast(Mapping[str, Any], (obj or {}).get("spec") or {})


def status(obj: Body | None) -> Mapping[str, Any]:
    """``status`` (empty when absent, or when ``obj`` is None)."""
    return cast(Mapping[str, Any], (obj or {}).get("status") or {})


def node_name(pod: Body | None) -> str | None:
    """The node a pod is bound to (``spec.nodeName``); None before it is bound."""
    return str(spec(pod).get("nodeName") or "") or None


def name(obj: Body) -> str:
    """``metadata.name`` ("" when absent)."""
    return str(meta(obj).get("name") or "")


def namespace(obj: Body) -> str:
    """``metadata.namespace`` ("" when absent: cluster-scoped)."""
    return str(meta(obj).get("namespace") or "")


def uid(obj: Body) -> str:
    """``metadata.uid`` ("" when absent)."""
    return str(meta(obj).get("uid") or "")


def labels(obj: Body) -> Mapping[str, str]:
    """``metadata.labels`` (empty when absent)."""
    return meta(obj).get("labels") or {}


def created(obj: Body) -> str:
    """``metadata.creationTimestamp`` as RFC 3339 text ("" when absent); sorts in time order."""
    return str(meta(obj).get("creationTimestamp") or "")


def generation(obj: Body) -> int:
    """``metadata.generation`` (1 when the API server has not set it yet)."""
    return int(meta(obj).get("generation") or 1)


def deleting(obj: Body) -> bool:
    """``metadata.deletionTimestamp`` is set: the object is being deleted (finalizers, grace period)."""
    return bool(meta(obj).get("deletionTimestamp"))


def owner_uid(obj: Body, kind: str) -> str | None:
    """The uid of the controller owner of kind ``kind`` (None: not owned by one)."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller", True):
            return str(ref.get("uid"))
    return None


def owned_by(obj: Body, owner: Body) -> bool:
    """``obj`` names ``owner``'s uid among its owner references."""
    u = uid(owner)
    return bool(u) and any(ref.get("uid") == u for ref in meta(obj).get("ownerReferences") or [])


def pod_of_job(pod: Body, job: Body) -> bool:
    """The pod belongs to the Job: its owner reference, else a Job-name label (see the module docstring)."""
    if owned_by(pod, job):
        return True
    if any(ref.get("kind") == "Job" for ref in meta(pod).get("ownerReferences") or []):
        return False  # owned by another Job (a previous incarnation of the same name)
    jname, lbl = name(job), labels(pod)
    return bool(jname) and any(lbl.get(k) == jname for k in JOB_NAME_LABELS)


def pods_of_job(job: Body, pods: Iterable[Body]) -> list[Body]:
    """The pods of ``job`` among ``pods``, oldest first (by ``creationTimestamp``, then name)."""
    return sorted((p for p in pods if pod_of_job(p, job)), key=lambda p: (created(p), name(p)))


def conditions(obj: Body) -> list[RawCondition]:
    """``status.conditions`` (empty when absent)."""
    return list(status(obj).get("conditions") or [])


def condition(obj: Body, type_: str) -> RawCondition | None:
    """The first condition of type ``type_`` (None when absent)."""
    return next((c for c in conditions(obj) if c.get("type") == type_), None)


def true_condition(obj: Body, type_: str) -> RawCondition | None:
    """The condition of type ``type_`` when its ``status`` is ``"True"``, else None."""
    c = condition(obj, type_)
    return c if c is not None and c.get("status") == "True" else None


def pod_phase(pod: Body) -> str:
    """The pod's ``status.phase`` (``Pending`` before the API server has set one)."""
    return str(status(pod).get("phase") or "Pending")


#: Where the store keeps, on a pod, when its deletion was first asked for (RFC 3339). The kubelet's
#: final delete (grace 0) moves ``deletionTimestamp`` to the pod's end, so a pod's last state alone cannot
#: tell a pod deleted while it ran from one removed after it had ended.
DELETION_ASKED = "spxDeletionAskedAt"


def _time(value: Any) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None
    return t if t is None or t.tzinfo else t.replace(tzinfo=dt.UTC)


def deletion_asked(pod: Body) -> dt.datetime | None:
    """When the pod's deletion was first asked for: as the store remembered it (:data:`DELETION_ASKED`),
    else ``deletionTimestamp`` less ``deletionGracePeriodSeconds``; None when it is not being deleted."""
    remembered = _time(pod.get(DELETION_ASKED))
    if remembered is not None:
        return remembered
    m = meta(pod)
    at = _time(m.get("deletionTimestamp"))
    grace = m.get("deletionGracePeriodSeconds")
    return None if at is None else at - dt.timedelta(seconds=grace if isinstance(grace, int) else 0)


def keep_deletion_asked(old: Body | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new`` (a newer state of the pod ``old``), remembering the earlier of their deletion requests
    under :data:`DELETION_ASKED` (a shallow copy when it adds it)."""
    if old is None or meta(old).get("uid") != meta(new).get("uid"):
        return new
    before, now = deletion_asked(old), deletion_asked(new)
    if before is None or (now is not None and now <= before):
        return new
    return {**new, DELETION_ASKED: before.strftime("%Y-%m-%dT%H:%M:%SZ")}
