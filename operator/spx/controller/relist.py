"""The reactor's own lists from the API server: the truth its store is corrected against. Thin.

kopf's watches feed the store; a watch that restarts through a re-list (``410 Gone``, a reconnect)
reports no deletions, so a Job deleted during the gap would stay in a watch-fed cache forever.
:func:`relist` lists experiments, then Jobs, then pods, makes the store agree
(:meth:`~spx.controller.decide.store.Store.reconcile_list`) and says which experiments lost a Job or pod.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from spx.api.spec import API_VERSION, KIND, PLURAL
from spx.controller.decide.objects import meta
from spx.controller.decide.store import Key, Store
from spx.controller.kube import KubeClient, resource_path
from spx.controller.manifests.naming import MANAGED_SELECTOR

logger = logging.getLogger("spx.controller")


async def list_kind(client: KubeClient, api_version: str, plural: str, selector: str | None,
                    namespace: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """(items, the list's resourceVersion) of ``plural`` in ``namespace`` (None: the whole cluster)."""
    params = {"labelSelector": selector} if selector else None
    doc = await client.get(resource_path(api_version, plural, namespace), params=params)
    kind = {"jobs": "Job", "pods": "Pod"}.get(plural, KIND)
    items = doc.get("items") or []
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items, (doc.get("metadata") or {}).get("resourceVersion")


def scopes(watch_namespaces: Sequence[str] | None) -> list[str | None]:
    """Where to list: each watched namespace (``SPX_WATCH_NAMESPACES`` without glob patterns), else
    the whole cluster (None)."""
    names = watch_namespaces
    if names and not any(ch in n for n in names for ch in "*?[!"):
        return list(names)
    return [None]


def _table(store: Store, kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {"experiment": store.experiments, "job": store.jobs, "pod": store.pods}[kind]


def _owner_key(store: Store, kind: str, obj: Mapping[str, Any]) -> Key | None:
    if kind == "experiment":
        return Store._key(obj)
    return store.experiment_of_job(obj) if kind == "job" else store.experiment_of_pod(obj)


async def relist(client: KubeClient, store: Store, where: Sequence[str | None]) -> set[Key]:
    """List from the API server, correct the store; the experiments whose objects vanished.

    Raises:
        ApiError: a list failed (403 with cluster scope: the caller lists namespace by namespace).
    """
    affected: set[Key] = set()
    for kind, api, plural, selector in (("experiment", API_VERSION, PLURAL, None),
                                        ("job", "batch/v1", "jobs", MANAGED_SELECTOR),
                                        ("pod", "v1", "pods", MANAGED_SELECTOR)):
        for ns in where:
            items, rv = await list_kind(client, api, plural, selector, ns)
            before = {k: _owner_key(store, kind, o) for k, o in _table(store, kind).items()}
            for gone in store.reconcile_list(kind, items, rv, namespaces=None if ns is None else [ns]):
                logger.info("%s %s/%s is gone from the API server; dropped from the store", kind,
                            meta(gone).get("namespace"), meta(gone).get("name"))
                owner = before.get(Store._key(gone))
                if owner is not None:
                    affected.add(owner)
    return affected
