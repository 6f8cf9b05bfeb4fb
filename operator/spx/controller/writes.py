"""The operator's API writes: status, Jobs, the result ConfigMap, Events. Thin; no decisions.

- **Status** is written as a JSON merge patch of ``/status`` that carries the
  ``metadata.resourceVersion`` it was computed from: a newer object makes the API server answer
  409 ``Conflict`` (:class:`Conflict`; the reactor re-reads and decides again after a backoff with
  full jitter, :class:`Backoff`), a status the server refuses makes it answer 422 ``Invalid``
  (:class:`Rejected`: terminal, its message goes into the decision — never retried as if it were a
  conflict).
- **Children** (the result ConfigMap) are written only after the owning experiment was re-read from
  the API server (not the cache) and is still there, with the same uid and no deletionTimestamp.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spx.api.spec import API_VERSION, KIND, PLURAL
from spx.api.status import ExperimentStatus
from spx.controller.decide.decision import JobCreation
from spx.controller.decide.objects import meta as _meta
from spx.controller.kube import ApiError, KubeClient, resource_path

logger = logging.getLogger("spx.controller.writes")



class Conflict(Exception):
    """409: the object changed since it was read (optimistic concurrency)."""


class ForeignConfigMap(ApiError):
    """The result ConfigMap's name is taken by a ConfigMap the experiment does not own (never overwritten)."""


class Rejected(Exception):
    """422: the API server refuses this status (schema, CEL); ``message`` is its answer."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class Gone(Exception):
    """404: the experiment no longer exists."""


def merge_patch_for(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: changed keys, ``None`` for
    removed ones, recursing into objects (lists are replaced whole)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    patch: dict[str, Any] = {}
    for k in old.keys() - new.keys():
        patch[k] = None
    for k, v in new.items():
        if k not in old:
            patch[k] = v
        elif old[k] != v:
            patch[k] = merge_patch_for(old[k], v) if isinstance(v, Mapping) and isinstance(old[k], Mapping) else v
    return patch


@dataclass
class Backoff:
    """Per-key exponential backoff with full jitter: the n-th retry waits U(0, min(cap, base·2ⁿ)) s.

    Source: M. Brooker, "Exponential Backoff And Jitter" (AWS Architecture Blog, 2015) — full jitter
    spreads retries of many writers apart, so a 409 storm does not turn into a retry storm.
    """

    base_s: float = 0.2
    cap_s: float = 10.0
    rng: Callable[[], float] = random.random
    _attempts: dict[Any, int] = field(default_factory=dict)

    def next_delay(self, key: Any) -> float:
        """The delay before the next retry of ``key`` (and count the attempt)."""
        n = self._attempts.get(key, 0)
        self._attempts[key] = n + 1
        return float(self.rng() * min(self.cap_s, self.base_s * float(2 ** min(n, 30))))

    def reset(self, key: Any) -> None:
        self._attempts.pop(key, None)

    def attempts(self, key: Any) -> int:
        return self._attempts.get(key, 0)


@dataclass
class Writes:
    """The API writes of the reactor, over one :class:`~spx.controller.kube.KubeClient`."""

    client: KubeClient
    clock: Callable[[], str]
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    async def status(self, exp: Mapping[str, Any], status: ExperimentStatus) -> dict[str, Any]:
        """Write ``.status`` (a merge patch from the stored one, guarded by ``resourceVersion``).

        Raises:
            Conflict: 409, the experiment changed. Rejected: 422, with the server's message.
            Gone: 404. ApiError: anything else.
        """
        meta = _meta(exp)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": merge_patch_for(exp.get("status") or {}, status.to_wire())}
        path = resource_path(API_VERSION, PLURAL, namespace, name, "status")
        try:
            return await self.client.merge_patch(path, body)
        except ApiError as err:
            if err.not_found:
                raise Gone(err.message) from None
            if err.code == 409:
                raise Conflict(err.message) from None
            if err.code == 422:
                raise Rejected(err.message or err.reason) from None
            raise

    async def experiment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The experiment as the API server has it now (None: 404)."""
        try:
            return await self.client.get(resource_path(API_VERSION, PLURAL, namespace, name))  # type: ignore[no-any-return]
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def owner_alive(self, namespace: str, name: str, uid: str) -> bool:
        """The experiment ``uid`` exists on the API server and is not being deleted."""
        fresh = await self.experiment(namespace, name)
        return fresh is not None and _meta(fresh).get("uid") == uid and not _meta(fresh).get("deletionTimestamp")

    async def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Job ``name`` from the API server (None: 404)."""
        try:
            return await self.client.get(resource_path("batch/v1", "jobs", namespace, name))  # type: ignore[no-any-return]
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def create_job(self, manifest: Mapping[str, Any], owner_uid: str) -> tuple[dict[str, Any] | None, JobCreation | None]:
        """Create the Job: ``(job, None)`` when created or already ours (adopted), ``(None, answer)`` when
        refused for good (400/403/422) or a foreign Job holds the name.

        Raises:
            ApiError: other failures (retried by the reactor). LookupError: a Job of that name from a
            previous incarnation is being removed (retry shortly).
        """
        namespace = str(manifest["metadata"]["namespace"])
        name = str(manifest["metadata"]["name"])
        try:
            return await self.client.create(resource_path("batch/v1", "jobs", namespace), manifest), None
        except ApiError as err:
            if err.code in (400, 403, 422):
                return None, JobCreation(code=err.code, message=err.message or err.reason or f"HTTP {err.code}")
            if not err.exists:
                raise
        job = await self.job(namespace, name)
        if job is None:
            raise LookupError(f"Job {name} existed a moment ago and is gone")
        owners = [r.get("uid") for r in _meta(job).get("ownerReferences") or [] if r.get("kind") == KIND]
        if owner_uid in owners:
            logger.info("Job %s/%s already exists and is ours; adopting it", namespace, name)
            return job, None
        if _meta(job).get("deletionTimestamp"):
            raise LookupError(f"Job {name} of a previous incarnation is being removed")
        return None, JobCreation(foreign=True)

    async def delete_job(self, namespace: str, name: str) -> None:
        """Delete a Job with background propagation (404 is fine)."""
        try:
            await self.client.delete(resource_path("batch/v1", "jobs", namespace, name), propagation="Background")
        except ApiError as err:
            if not err.not_found:
                raise

    async def configmap(self, manifest: Mapping[str, Any]) -> None:
        """Create the result ConfigMap, or refresh one an earlier attempt of the same run wrote. One of that
        name the experiment does not own is never overwritten: :class:`ForeignConfigMap` (a refusal)."""
        namespace = str(manifest["metadata"]["namespace"])
        name = str(manifest["metadata"]["name"])
        try:
            await self.client.create(resource_path("v1", "configmaps", namespace), manifest)
        except ApiError as err:
            if not err.exists:
                raise
            owners = {r.get("uid") for r in manifest["metadata"].get("ownerReferences") or []}
            try:
                existing = await self.client.get(resource_path("v1", "configmaps", namespace, name))
            except ApiError as gone:
                if gone.not_found:  # deleted meanwhile: the next attempt creates it
                    raise err from None
                raise
            if not owners & {r.get("uid") for r in _meta(existing).get("ownerReferences") or []}:
                raise ForeignConfigMap(409, "AlreadyExists", f"a ConfigMap named {name} exists and is not owned by "
                                                             "this experiment (left as it is)") from None
            patch = {"data": manifest.get("data"), "binaryData": manifest.get("binaryData")}
            await self.client.merge_patch(resource_path("v1", "configmaps", namespace, name), patch)

    def event_soon(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post an Event in the background: the reconcile does not wait for it."""
        task = asyncio.get_running_loop().create_task(self.event(obj, type_, reason, message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (bounded) for the Events still being posted."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout)

    async def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about the experiment; failures are logged, never raised."""
        meta = _meta(obj)
        namespace = str(meta.get("namespace") or "default")
        stamp = self.clock()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": API_VERSION, "kind": KIND, "name": meta.get("name"), "namespace": namespace,
                "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "spx-operator"},
            "reportingComponent": "spx-operator",
            "reportingInstance": "spx-operator",
            "action": reason,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.client.create(resource_path("v1", "events", namespace), body)
        except (TimeoutError, ApiError, OSError) as err:
            logger.warning("could not post event %s for %s/%s: %s", reason, namespace, meta.get("name"), err)
