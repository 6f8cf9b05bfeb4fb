"""The reactor's own reads from the API server (beyond kopf's watches): pods, events, logs. Thin."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spx.controller.decide import admission
from spx.controller.decide.objects import meta
from spx.controller.decide.store import Store
from spx.controller.kube import ApiError, KubeClient, resource_path
from spx.controller.manifests.naming import CONTAINER_NAME, LABEL_EXPERIMENT_UID

logger = logging.getLogger("spx.controller.reads")


@dataclass
class Reads:
    """Reads over one :class:`~spx.controller.kube.KubeClient` into one :class:`~spx.controller.decide.store.Store`."""

    client: KubeClient
    store: Store
    log_limit_bytes: int
    #: Jobs (uids) whose pods were listed once.
    listed: set[str] = field(default_factory=set)

    async def pods(self, namespace: str, experiment_uid: str, job_uid: str) -> None:
        """List an experiment's pods into the store (the pod watch may not have delivered them yet)."""
        items = (await self.client.get(resource_path("v1", "pods", namespace),
                                       params={"labelSelector": f"{LABEL_EXPERIMENT_UID}={experiment_uid}"})).get("items") or []
        for pod in items:
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
            self.store.put_pod(pod)
        self.listed.add(job_uid)

    async def failed_create(self, namespace: str, job: Mapping[str, Any]) -> str:
        """The message of the Job's latest ``FailedCreate`` event ("" if none or unreadable)."""
        uid = meta(job).get("uid")
        try:
            items = (await self.client.get(resource_path("v1", "events", namespace), params={
                "fieldSelector": f"involvedObject.uid={uid},reason=FailedCreate"})).get("items") or []
        except (TimeoutError, ApiError, OSError) as err:
            logger.info("could not list the events of Job %s/%s: %s", namespace, meta(job).get("name"), err)
            return ""
        items = [e for e in items if e.get("reason") == "FailedCreate" and (e.get("involvedObject") or {}).get("uid") == uid]
        if not items:
            return ""
        latest = max(items, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
                                              or meta(e).get("creationTimestamp") or ""))
        return f"FailedCreate: {latest.get('message') or latest.get('note') or ''}".rstrip(": ")

    async def node_ready(self, name: str) -> bool | None:
        """Is node ``name`` Ready (its ``Ready`` condition True)? False when it is not or the Node is gone
        (404); None when it cannot be read (no RBAC to get nodes, the API server away)."""
        try:
            node = await self.client.get(resource_path("v1", "nodes", None, name))
        except ApiError as err:
            if err.not_found:
                return False
            logger.info("could not read node %s: %s", name, err)
            return None
        except (TimeoutError, OSError) as err:
            logger.info("could not read node %s: %s", name, err)
            return None
        ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        return ready is not None and ready.get("status") == "True"

    async def log(self, namespace: str, pod: str) -> str | None:
        """The bench container's log (first ``log_limit_bytes``, plus the last lines where the result is);
        None when it cannot be read (the pod or its node is gone)."""
        limit = self.log_limit_bytes
        try:
            text: str = await self.client.pod_log(namespace, pod, CONTAINER_NAME, limit)
        except (ApiError, TimeoutError, OSError) as err:
            logger.info("could not read the log of pod %s/%s: %s", namespace, pod, err)
            return None
        if len(text.encode()) >= limit:  # the result line is the last one: fetch the tail too
            try:
                tail: str = await self.client.request(
                    "GET", resource_path("v1", "pods", namespace, pod, "log"),
                    params={"container": CONTAINER_NAME, "tailLines": "20"}, text=True)
                text = text + "\n" + tail
            except (ApiError, TimeoutError, OSError):
                pass
        return text

    async def queue_refusal(self, namespace: str, queue: str) -> tuple[str, str] | None:
        """Why a Job cannot wait for Kueue LocalQueue ``queue`` (:func:`~spx.controller.decide.admission.queue_refusal`):
        asks discovery whether ``kueue.x-k8s.io`` is served, then gets the LocalQueue. An answer the
        operator may not read (403) or a failed request counts as "cannot tell": no refusal."""
        try:
            group = await self.client.get(f"/apis/{admission.KUEUE_GROUP}")
            versions = [str(v.get("version")) for v in group.get("versions") or []]
        except ApiError as err:
            if not err.not_found:
                logger.info("could not ask whether Kueue is installed: %s", err)
                return None
            versions = []
        if not versions:
            return admission.queue_refusal(namespace, queue, versions, None)
        preferred = str((group.get("preferredVersion") or {}).get("version") or versions[0])
        try:
            await self.client.get(resource_path(f"{admission.KUEUE_GROUP}/{preferred}", admission.LOCAL_QUEUES,
                                                namespace, queue))
            exists: bool | None = True
        except ApiError as err:
            exists = False if err.not_found else None
            if exists is None:
                logger.info("could not read LocalQueue %s/%s: %s", namespace, queue, err)
        except (TimeoutError, OSError) as err:
            logger.info("could not read LocalQueue %s/%s: %s", namespace, queue, err)
            exists = None
        return admission.queue_refusal(namespace, queue, versions, exists)
