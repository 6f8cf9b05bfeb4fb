"""The reactor's store: an in-memory mirror of experiments, their Jobs and those Jobs' pods.

Filled by kopf's watch events and by the reactor's own lists from the API server. The lists are
the truth: :meth:`Store.reconcile_list` drops what the API server no longer has (a Job deleted while
a watch was interrupted — kopf's re-list after a 410 Gone reports no deletions — stays in a
watch-fed cache forever), so a periodic re-list corrects the store against the API server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from spx.api.spec import KIND
from spx.controller.decide.objects import keep_deletion_asked, meta, owner_uid

__all__ = ["GONE_PER_JOB", "Key", "Store"]

Key = tuple[str, str]  # (namespace, experiment name)
#: Deleted pods remembered per Job (a Job past its disruption budget has at most max_disruptions + 2).
GONE_PER_JOB = 32


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _rv(obj: Mapping[str, Any]) -> int | None:
    return _int(meta(obj).get("resourceVersion"))


#: ``spec`` fields dropped from stored Jobs and pods: the bulk of those objects (the pod template,
#: the containers with their env and command, the volumes) and never read by the operator, which
#: reads a Job's ``activeDeadlineSeconds`` and ``suspend`` and a pod's ``nodeName``.
DROPPED_SPEC: dict[str, frozenset[str]] = {
    "Job": frozenset({"template"}),
    "Pod": frozenset({"containers", "initContainers", "ephemeralContainers", "volumes"}),
}


def slim(obj: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """``obj`` without ``metadata.managedFields`` (server-side apply's bookkeeping: often a third of a
    pod's size, never read by the operator) and, for a Job or pod (``kind``), without the ``spec``
    fields of :data:`DROPPED_SPEC`. A shallow copy: the watch event's own dicts are untouched."""
    m = obj.get("metadata")
    spec = obj.get("spec")
    drop = DROPPED_SPEC.get(kind or "", frozenset())
    slim_meta = isinstance(m, dict) and "managedFields" in m
    slim_spec = isinstance(spec, dict) and not drop.isdisjoint(spec)
    if not slim_meta and not slim_spec:
        return obj
    out = dict(obj)
    if slim_meta:
        out["metadata"] = {k: v for k, v in m.items() if k != "managedFields"}  # type: ignore[union-attr]
    if slim_spec:
        out["spec"] = {k: v for k, v in spec.items() if k not in drop}  # type: ignore[union-attr]
    return out


class Store:
    """In-memory mirror of experiments, their Jobs and those Jobs' pods (from kopf's watches)."""

    def __init__(self) -> None:
        self.experiments: dict[Key, dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._jobs_by_owner: dict[str, set[tuple[str, str]]] = {}
        self._pods_by_owner: dict[str, set[tuple[str, str]]] = {}
        self.uid_to_key: dict[str, Key] = {}
        self.job_by_uid: dict[str, tuple[str, str]] = {}
        #: Job uid → pod uid → the last state of that Job's pods deleted from the API server.
        self.gone: dict[str, dict[str, dict[str, Any]]] = {}

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        m = meta(obj)
        return str(m.get("namespace") or ""), str(m.get("name") or "")

    @staticmethod
    def _is_newer(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
        if old is None:
            return True
        a, b = _rv(old), _rv(new)
        return a is None or b is None or b >= a

    def _put(self, table: dict[tuple[str, str], dict[str, Any]], index: dict[str, set[tuple[str, str]]],
             owner_kind: str, obj: dict[str, Any], deleted: bool) -> bool:
        key = self._key(obj)
        old = table.get(key)
        if deleted:
            if old is not None and meta(old).get("uid") not in (None, meta(obj).get("uid")):
                return False  # a newer incarnation replaced it already
            table.pop(key, None)
            owner = owner_uid(old or obj, owner_kind)
            if owner and owner in index:
                index[owner].discard(key)
                if not index[owner]:
                    del index[owner]
            return True
        if not self._is_newer(old, obj) and meta(old or {}).get("uid") == meta(obj).get("uid"):
            return False
        table[key] = obj
        owner = owner_uid(obj, owner_kind)
        if owner:
            index.setdefault(owner, set()).add(key)
        return True

    def put_experiment(self, obj: dict[str, Any], deleted: bool = False) -> bool:
        obj = slim(obj)
        key = self._key(obj)
        old = self.experiments.get(key)
        if deleted:
            if old is not None and meta(old).get("uid") != meta(obj).get("uid"):
                return False
            self.experiments.pop(key, None)
            self.uid_to_key.pop(str(meta(obj).get("uid")), None)
            return True
        if old is not None and meta(old).get("uid") == meta(obj).get("uid") and not self._is_newer(old, obj):
            return False
        if old is not None and meta(old).get("uid") != meta(obj).get("uid"):
            self.uid_to_key.pop(str(meta(old).get("uid")), None)
        self.experiments[key] = obj
        self.uid_to_key[str(meta(obj).get("uid"))] = key
        return True

    def put_job(self, obj: dict[str, Any], deleted: bool = False) -> bool:
        obj = slim(obj, "Job")
        changed = self._put(self.jobs, self._jobs_by_owner, KIND, obj, deleted)
        uid = str(meta(obj).get("uid"))
        if changed and deleted:
            self.job_by_uid.pop(uid, None)
            self.gone.pop(uid, None)
        elif changed:
            self.job_by_uid[uid] = self._key(obj)
        return changed

    def put_pod(self, obj: dict[str, Any], deleted: bool = False) -> bool:
        """Put (or remove) a pod. A removed pod's last state is kept in :attr:`gone` (by Job, at most
        :data:`GONE_PER_JOB` each) while its Job is in the store: evictions, the pods the Job controller
        deleted at the deadline and their termination messages outlive the pod objects."""
        obj = slim(obj, "Pod")
        old = self.pods.get(self._key(obj))
        obj = keep_deletion_asked(old, obj)  # (the kubelet's final delete moves deletionTimestamp)
        changed = self._put(self.pods, self._pods_by_owner, "Job", obj, deleted)
        if changed and deleted:
            last = obj if obj.get("status") else (old or obj)
            job_uid = owner_uid(last, "Job")
            if job_uid and job_uid in self.job_by_uid:
                kept = self.gone.setdefault(job_uid, {})
                kept[str(meta(last).get("uid"))] = last
                while len(kept) > GONE_PER_JOB:
                    kept.pop(next(iter(kept)))
        return changed

    def gone_pods_of(self, job_uid: str) -> list[dict[str, Any]]:
        """The last state of the pods of Job ``job_uid`` deleted from the API server (oldest first)."""
        return list(self.gone.get(job_uid, {}).values())

    def jobs_of(self, experiment_uid: str) -> list[dict[str, Any]]:
        return [self.jobs[k] for k in sorted(self._jobs_by_owner.get(experiment_uid, ())) if k in self.jobs]

    def pods_of(self, job_uid: str) -> list[dict[str, Any]]:
        return [self.pods[k] for k in sorted(self._pods_by_owner.get(job_uid, ())) if k in self.pods]

    def experiment_of_job(self, job: Mapping[str, Any]) -> Key | None:
        owner = owner_uid(job, KIND)
        return self.uid_to_key.get(owner) if owner else None

    def experiment_of_pod(self, pod: Mapping[str, Any]) -> Key | None:
        owner = owner_uid(pod, "Job")
        job_key = self.job_by_uid.get(owner) if owner else None
        job = self.jobs.get(job_key) if job_key else None
        return self.experiment_of_job(job) if job is not None else None

    def reconcile_list(self, kind: str, items: Iterable[dict[str, Any]], list_rv: str | None,
                       namespaces: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Make the store agree with a fresh list of ``kind`` (``experiment``, ``job`` or ``pod``).

        Objects in ``items`` are put (when newer); stored objects absent from the list are removed
        when they are not newer than the list itself (``list_rv``) — they were deleted while the
        watch was not looking. ``namespaces`` limits the removal to the namespaces listed (None: all).
        Returns the removed objects.
        """
        put = {"experiment": self.put_experiment, "job": self.put_job, "pod": self.put_pod}[kind]
        table = {"experiment": self.experiments, "job": self.jobs, "pod": self.pods}[kind]
        seen: set[tuple[str, str]] = set()
        for obj in items:
            seen.add(self._key(obj))
            put(obj)
        limit = _int(list_rv)
        scope = None if namespaces is None else set(namespaces)
        removed = []
        for key, obj in list(table.items()):
            if key in seen or (scope is not None and key[0] not in scope):
                continue
            rv = _rv(obj)
            if limit is not None and rv is not None and rv > limit:
                continue  # newer than the list: a watch event the list did not see yet
            put(obj, deleted=True)
            removed.append(obj)
        return removed
