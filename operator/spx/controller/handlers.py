"""kopf handlers: thin. They configure kopf, log in, mirror watched objects into the reconciler's
store and queue the owning experiment; :mod:`spx.controller.reconciler` does the rest.

Registered on import (``kopf run -m spx.controller`` or ``spx operator``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import kopf

from spx import metrics
from spx.api.spec import GROUP, PLURAL, VERSION
from spx.controller.config import OperatorConfig, from_env
from spx.controller.kube import KubeClient
from spx.controller.reconciler import Reconciler
from spx.runner.kubernetes import LABEL_MANAGED_BY, MANAGED_BY, MANAGED_SELECTOR

logger = logging.getLogger("spx.controller")

MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}


class NoEssenceDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """The diff-base storage for an operator without change-detection handlers.

    kopf computes every watched object's "essence" (a deep copy of the whole body) on each event to
    diff it against the last-handled state — only useful for ``on.create/update/resume`` handlers,
    of which spx has none (its reconciler compares observed state itself). Building an empty essence
    saves that copy for every Job/pod/experiment event (about a third of the operator's CPU at 500
    experiments). Add change-detection handlers and this must go.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return {}


class Runtime:
    """Process-wide state of the operator (one per process)."""

    config: OperatorConfig | None = None
    client: KubeClient | None = None
    reconciler: Reconciler | None = None
    metrics_server: Any = None
    login_info: kopf.ConnectionInfo | None = None


RUNTIME = Runtime()


def _reconciler() -> Reconciler:
    if RUNTIME.reconciler is None:
        raise kopf.TemporaryError("the operator is still starting", delay=1)
    return RUNTIME.reconciler


async def _login_fallback(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo | None:
    cfg = RUNTIME.config or from_env()
    if cfg.kube_server:
        return kopf.ConnectionInfo(
            server=cfg.kube_server,
            token=os.environ.get("SPX_KUBE_TOKEN") or None,
            insecure=os.environ.get("SPX_KUBE_INSECURE", "") in ("1", "true"),
            default_namespace=os.environ.get("SPX_KUBE_NAMESPACE") or None,
        )
    settings = settings or kopf.OperatorSettings()
    return kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """kopf settings, the reconciler's workers and the metrics endpoint."""
    cfg = from_env()
    RUNTIME.config = cfg

    # Our own prefix for anything kopf would persist (finalizer, progress, last-handled config).
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = NoEssenceDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    # Watches: bounded requests, reconnect when silent (kopf #847/#1120), server-side filtering.
    # whole seconds: the API server refuses timeoutSeconds=300.0 (400 "strconv.ParseInt: parsing \"300.0\"")
    settings.watching.server_timeout = int(cfg.watch_server_timeout_s)
    settings.watching.client_timeout = cfg.watch_client_timeout_s
    settings.watching.connect_timeout = 30
    settings.watching.inactivity_timeout = cfg.watch_inactivity_timeout_s
    settings.watching.label_selectors["batch", "v1", "jobs"] = MANAGED_SELECTOR
    settings.watching.label_selectors["v1", "pods"] = MANAGED_SELECTOR
    settings.networking.request_timeout = cfg.request_timeout_s
    # The CRD is installed before the operator (Helm chart): no runtime CRD/namespace scanning.
    settings.scanning.disabled = True
    # kopf's own k8s events only for problems; the reconciler posts the experiment's events.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "spx-operator"
    settings.posting.event_name_prefix = "spx-operator-"
    settings.execution.max_workers = 4
    # kopf logs "Handler … succeeded." per watch event at INFO; keep the object log to what matters.
    if not os.environ.get("SPX_LOG_EVERY_EVENT"):
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if not os.environ.get("KOPF_RUN_PEERING"):
        settings.peering.standalone = True

    RUNTIME.client = KubeClient(cfg.request_timeout_s, relogin=lambda: _login_fallback(settings))
    if RUNTIME.login_info is not None:
        RUNTIME.client.set_credentials(RUNTIME.login_info)
    RUNTIME.reconciler = Reconciler(config=cfg, client=RUNTIME.client)
    await RUNTIME.reconciler.start()
    if cfg.metrics_port:
        from prometheus_client import start_http_server

        RUNTIME.metrics_server = start_http_server(cfg.metrics_port, registry=metrics.REGISTRY)
    logger.info("spx operator started: max %s concurrent experiments, bench image %s, metrics on :%s",
                cfg.max_concurrent or "unlimited", cfg.bench_image, cfg.metrics_port or "off")


@kopf.on.cleanup()
async def shutdown(**_: Any) -> None:
    if RUNTIME.reconciler is not None:
        await RUNTIME.reconciler.stop()
    if RUNTIME.metrics_server is not None:
        server = RUNTIME.metrics_server[0] if isinstance(RUNTIME.metrics_server, tuple) else RUNTIME.metrics_server
        server.shutdown()


@kopf.on.login()
async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo | None:
    """``SPX_KUBE_SERVER`` (development, tests), else the service account, else the kubeconfig."""
    info = await _login_fallback(settings)
    RUNTIME.login_info = info
    if info is not None and RUNTIME.client is not None:
        RUNTIME.client.set_credentials(info)
    return info


@kopf.on.probe(id="reconcile")
def probe(**_: Any) -> dict[str, Any]:
    """Liveness details (``/healthz`` of ``--liveness``): queue depth and last reconcile."""
    rec = RUNTIME.reconciler
    if rec is None:
        return {"started": False}
    dead = rec.dead_tasks()
    if dead:  # a reconcile worker died: fail the liveness probe so the pod is restarted
        raise RuntimeError(f"reconciler tasks stopped: {', '.join(dead)}")
    return {
        "queued": len(rec.queue),
        "experiments": len(rec.store.experiments),
        "secondsSinceLastReconcile": round(time.time() - rec.last_reconcile, 1) if rec.last_reconcile else None,
    }


# Watch events → the reconciler's store and queue. (No kopf index handlers: they would double kopf's
# per-event cost; after a restart the reconciler lists a Job's pods itself the first time it sees
# the Job, so an experiment is never judged on a half-filled store.)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def experiment_event(event: kopf.RawEvent, **_: Any) -> None:
    _reconciler().on_experiment(event["type"], dict(event["object"]))


@kopf.on.event("batch", "v1", "jobs", labels=MANAGED)
async def job_event(event: kopf.RawEvent, **_: Any) -> None:
    _reconciler().on_job(event["type"], dict(event["object"]))


@kopf.on.event("v1", "pods", labels=MANAGED)
async def pod_event(event: kopf.RawEvent, **_: Any) -> None:
    _reconciler().on_pod(event["type"], dict(event["object"]))


def configured() -> OperatorConfig:
    """The configuration this process runs with (tests/CLI)."""
    return RUNTIME.config or from_env()
