"""Admission under the operator's concurrency limit (``SPX_MAX_CONCURRENT_EXPERIMENTS``): pure.

An experiment holds a slot from the moment it is admitted (a reservation, until its Job exists)
while its Job of the current generation is unfinished. The queued ones are admitted first come, first
served, by creation time then name, *one at a time*: only the head of the queue is admitted, and only while no
other admitted experiment is still creating its Job (``admitting``), so Jobs are created in the order the
experiments were applied even when several slots free at once and several workers reconcile in parallel (they
used to be admitted together and their Jobs created in whichever order the workers ran: 02, 01, 00; issue 37). Nothing is admitted before the reactor has listed both the experiments *and* the
Jobs from the API server (``synced``): an operator restarted with experiments queued would
otherwise count no running Jobs and exceed the limit.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from spx.controller.decide import objects as objs
from spx.controller.decide.job_status import job_finished
from spx.controller.decide.objects import deleting, generation, meta
from spx.controller.decide.store import Store
from spx.controller.manifests.naming import KUEUE_QUEUE_LABEL, LABEL_GENERATION
from spx.vocabulary import InfraReason

Key = tuple[str, str]  # (namespace, experiment name)

#: Kueue's API group and the LocalQueue resource a queued Job names (``kueue.x-k8s.io/queue-name``).
KUEUE_GROUP: Final = "kueue.x-k8s.io"
LOCAL_QUEUES: Final = "localqueues"
#: ``reason`` of the Decided condition when the Job cannot be queued: Kueue's CRDs are not installed,
#: or the LocalQueue does not exist in the experiment's namespace.
REASON_NO_KUEUE: Final[InfraReason] = "KueueNotInstalled"
REASON_NO_QUEUE: Final[InfraReason] = "LocalQueueNotFound"


def queue_refusal(namespace: str, queue: str, served_versions: Sequence[str] | None,
                  queue_exists: bool | None) -> tuple[InfraReason, str] | None:
    """Why a Job for Kueue LocalQueue ``queue`` cannot wait for admission, as ``(reason, message)``;
    None when it can (or when the operator could not tell: ``queue_exists`` None, e.g. no RBAC to read).

    ``served_versions``: the versions the API server serves for ``kueue.x-k8s.io`` (None or empty:
    the group is not served, i.e. Kueue's CRDs are not installed). Without this check a suspended
    Job would wait ``admissionTimeoutSeconds`` (6 h by default) for an admission that never comes.
    """
    if not served_versions:
        return REASON_NO_KUEUE, (
            f"spec.scheduling.queueName is {queue!r} but this cluster does not serve Kueue's API ({KUEUE_GROUP}): "
            "install Kueue, or remove spec.scheduling.queueName to use the operator's own queue"
        )
    if queue_exists is False:
        return REASON_NO_QUEUE, (
            f"Kueue LocalQueue {queue!r} does not exist in namespace {namespace!r}: create it (kind LocalQueue, "
            f"{KUEUE_GROUP}) or set spec.scheduling.queueName to one of the namespace's LocalQueues "
            f"(kubectl get localqueues -n {namespace})"
        )
    return None


@dataclass(frozen=True)
class Verdict:
    """``admitted``, with ``active`` experiments holding a slot; ``synced`` False: wait for the lists."""

    admitted: bool
    active: int
    synced: bool = True


def admit(key: Key, limit: int, active: Collection[Key], waiting: Sequence[Key], synced: bool,
          admitting: Collection[Key] = ()) -> Verdict:
    """May ``key`` start a run?

    Args:
        key: the experiment asking.
        limit: the concurrency limit; 0 = none.
        active: the experiments holding a slot (unfinished Job of their generation, or reserved).
        waiting: the experiments not yet admitted (:func:`waiting`), oldest first.
        synced: the reactor has listed experiments and Jobs since it started.
        admitting: the experiments admitted whose Job is not created yet (the reactor's reservations): while
            another is, ``key`` waits, so the Jobs are created in queue order.
    """
    if not synced:
        return Verdict(False, len(active), synced=False)
    if limit <= 0 or key in active:
        return Verdict(True, len(active))
    if len(active) >= limit or any(k != key for k in admitting):
        return Verdict(False, len(active))
    queue = [k for k in waiting if k not in active]
    return Verdict(not queue or queue[0] == key, len(active))


def kueue_managed(experiment: Mapping[str, Any] | None) -> bool:
    """Whether an experiment (the object) names a Kueue LocalQueue (``spec.scheduling.queueName``): Kueue
    is its queue then, and the operator's own concurrency limit steps aside — it neither waits for a slot
    nor holds one, so the two queues never stack (a run Kueue admitted never waits again for the operator's)."""
    scheduling = objs.spec(experiment).get("scheduling") or {}
    return bool(scheduling.get("queueName"))


def suspended(job: Mapping[str, Any]) -> bool:
    """Whether a Job waits suspended (``spec.suspend: true``): Kueue has not admitted it yet."""
    return bool(objs.spec(job).get("suspend"))


def active(store: Store, reserved: Iterable[Key] = ()) -> set[Key]:
    """Experiments holding a slot: an unfinished, unsuspended Job of their current generation, or a
    reservation. A Job of a Kueue queue (``spec.scheduling.queueName``, :func:`kueue_managed`) holds none,
    suspended or admitted: Kueue's quota governs it, and the operator's limit counts only its own runs."""
    out = set(reserved)
    for job in store.jobs.values():
        if job_finished(job) or deleting(job) or suspended(job) or KUEUE_QUEUE_LABEL in (meta(job).get("labels") or {}):
            continue
        key = store.experiment_of_job(job)
        exp = store.experiments.get(key) if key is not None else None
        if key is not None and (meta(job).get("labels") or {}).get(LABEL_GENERATION) == str(generation(exp or {})):
            out.add(key)
    return out


def waiting(store: Store) -> list[Key]:
    """Experiments not yet admitted (new, Pending or Queued, no Job), oldest first (FIFO admission).

    New ones count too: with several workers, the second of two experiments created together may be
    reconciled first and must not take the slot of the first. Ties of ``creationTimestamp`` (whole
    seconds on a real API server) fall back to the name.
    """
    rows = []
    for key, exp in store.experiments.items():
        st = objs.status(exp)
        if kueue_managed(exp):  # Kueue's queue, not the operator's
            continue
        if (st.get("phase") or "Pending") in ("Pending", "Queued") and not st.get("jobName") and not deleting(exp):
            rows.append((str(meta(exp).get("creationTimestamp") or ""), key))
    return [k for _, k in sorted(rows)]
