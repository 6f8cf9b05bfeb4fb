"""kopf handlers: one-liners. They configure kopf, log in, and hand watch events to the reactor.

Registered on import (``kopf run -m spx.controller`` or ``spx operator``). The settings object
(:class:`~spx.controller.settings.OperatorSettings`) and the reactor live in kopf's ``memo``
(``memo.settings``, ``memo.reactor``): ``spx operator`` passes settings in; under plain ``kopf run``
the startup handler loads them from the environment.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import aiohttp
import kopf

from spx import __version__
from spx.api.spec import GROUP, PLURAL, VERSION
from spx.controller import leader, metrics
from spx.controller.decide import crd_check
from spx.controller.kube import ApiError, KubeClient, resource_path
from spx.controller.manifests.naming import LABEL_MANAGED_BY, MANAGED_BY, MANAGED_SELECTOR
from spx.controller.reactor import Reactor
from spx.controller.settings import OperatorSettings, load_settings

logger = logging.getLogger("spx.controller")

MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}
#: Connections of the API client beyond one per reconcile worker (Events, re-lists, the Lease).
EXTRA_CONNECTIONS = 8


class NoEssenceDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """The diff-base storage for an operator without change-detection handlers.

    kopf computes every watched object's "essence" (a deep copy of the whole body) on each event to
    diff it against the last-handled state — only useful for ``on.create/update/resume`` handlers,
    of which spx has none (its reactor compares observed state itself). Building an empty essence
    saves that copy for every Job/pod/experiment event (about a third of the operator's CPU at 500
    experiments). Add change-detection handlers and this must go.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return {}


class CrdMismatch(kopf.PermanentError):
    """The installed CRD is not the one this operator was built for (:mod:`spx.controller.decide.crd_check`):
    the operator does not start. ``spx operator`` exits with :data:`~spx.controller.decide.crd_check.EXIT_CODE`
    and this message (it names the command that fixes it)."""


#: ``GET`` path of the operator's own CRD (RBAC: ``get`` on this one name, charts/spx-operator/templates/rbac.yaml).
CRD_PATH = resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions", None, crd_check.CRD_NAME)


async def check_installed_crd(client: KubeClient, operator_version: str = __version__) -> crd_check.CrdCheck:
    """Read the installed CRD (None on 404) and judge it with :func:`~spx.controller.decide.crd_check.check_crd`.

    Raises:
        CrdMismatch: the CRD cannot be read for lack of rights (401/403): the check cannot be made.
        kopf.TemporaryError: the API server did not answer or answered 5xx (kopf retries the start-up).
    """
    try:
        installed = await client.get(CRD_PATH)
    except ApiError as err:
        if err.code in (401, 403):
            raise CrdMismatch(
                f"cannot read CRD {crd_check.CRD_NAME} to check its schema version ({err}): grant the operator "
                f"`get` on customresourcedefinitions/{crd_check.CRD_NAME} (the chart's RBAC does), or set "
                "SPX_CRD_CHECK=false to skip the check") from None
        if not err.not_found:
            raise kopf.TemporaryError(f"cannot read CRD {crd_check.CRD_NAME}: {err}", delay=5) from None
        installed = None
    except (aiohttp.ClientError, TimeoutError) as err:
        raise kopf.TemporaryError(f"cannot read CRD {crd_check.CRD_NAME}: {err!r}", delay=5) from None
    return crd_check.check_crd(installed, operator_version)


def _settings(memo: kopf.Memo) -> OperatorSettings:
    if not isinstance(memo.get("settings"), OperatorSettings):
        memo["settings"] = load_settings()
    return memo["settings"]  # type: ignore[no-any-return]


def _reactor(memo: kopf.Memo) -> Reactor:
    reactor = memo.get("reactor")
    if reactor is None:
        raise kopf.TemporaryError("the operator is still starting", delay=1)
    return reactor  # type: ignore[no-any-return]


def login_info(settings: OperatorSettings, kopf_settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo | None:
    """``SPX_KUBE_SERVER`` (development, tests), else the service account, else the kubeconfig."""
    if settings.kube_server:
        return kopf.ConnectionInfo(server=settings.kube_server, token=settings.kube_token,
                                   insecure=settings.kube_insecure, default_namespace=settings.kube_namespace)
    kopf_settings = kopf_settings or kopf.OperatorSettings()
    return kopf.login_with_service_account(settings=kopf_settings) or kopf.login_with_kubeconfig(settings=kopf_settings)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """kopf settings, the CRD check, the reactor's workers and the metrics endpoint.

    Raises:
        CrdMismatch: the installed CRD is missing or of another schema version (``SPX_CRD_CHECK``).
    """
    cfg = _settings(memo)
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
    # kopf's own k8s events only for problems; the reactor posts the experiment's events.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "spx-operator"
    settings.posting.event_name_prefix = "spx-operator-"
    settings.execution.max_workers = 4
    if not cfg.log_every_event:  # kopf logs "Handler … succeeded." per watch event at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)

    # one connection per reconcile worker, plus Events, re-lists and the Lease renewal
    client = KubeClient(cfg.request_timeout_s, relogin=lambda: _relogin(memo, settings),
                        max_connections=cfg.workers + EXTRA_CONNECTIONS)
    # kopf logs in only after the start-up handlers: log in here for the CRD check.
    info = memo.get("login_info") or _login_now(cfg, settings)
    if info is not None:
        client.set_credentials(info)
    if cfg.crd_check and info is not None:  # (no credentials: kopf's own login fails right after this)
        try:
            result = await check_installed_crd(client)
        except BaseException:
            await client.close()
            raise
        if not result.ok:
            await client.close()
            logger.error("spx operator refuses to start: %s", result.message)
            raise CrdMismatch(result.message)
        logger.info("%s", result.message)
    elif not cfg.crd_check:
        logger.warning("SPX_CRD_CHECK=false: the installed CRD %s is not checked against this operator's schema",
                       crd_check.CRD_NAME)
    metrics.set_series_retention(cfg.series_retention_s)
    memo["client"] = client
    memo["reactor"] = reactor = Reactor(settings=cfg, client=client, leader=_leader(cfg, client))
    await reactor.start()
    if cfg.metrics_port:
        memo["metrics_server"] = metrics.serve(cfg.metrics_port, cfg.metrics_bind_address)
    logger.info("spx operator started: max %s concurrent experiments, bench image %s, metrics on %s",
                cfg.max_concurrent or "unlimited", cfg.bench_image,
                f"{cfg.metrics_bind_address}:{cfg.metrics_port}" if cfg.metrics_port else "off")


def _leader(cfg: OperatorSettings, client: KubeClient) -> leader.LeaderElector | None:
    """The Lease election of ``SPX_LEADER_ELECTION`` (None: this replica always reconciles)."""
    if not cfg.leader_election:
        return None
    namespace = cfg.leader_election_namespace or cfg.kube_namespace or _own_namespace()
    identity = cfg.leader_election_identity or f"{socket.gethostname()}-{os.getpid()}"
    lease = cfg.leader_lease_seconds
    timing = leader.Timing(lease_s=lease, renew_deadline_s=lease * 2 / 3, retry_s=lease * 2 / 15)
    logger.info("leader election on Lease %s/%s as %s", namespace, cfg.leader_election_lease, identity)
    return leader.LeaderElector(client, namespace, cfg.leader_election_lease, identity, timing)


def _own_namespace() -> str:
    """The pod's namespace (its service-account mount), else ``default``."""
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _login_now(cfg: OperatorSettings, settings: kopf.OperatorSettings) -> kopf.ConnectionInfo | None:
    try:
        return login_info(cfg, settings)
    except Exception as err:  # kopf's login handler reports it (LoginError) once start-up is done
        logger.debug("no credentials at start-up: %s", err)
        return None


async def _relogin(memo: kopf.Memo, settings: kopf.OperatorSettings) -> kopf.ConnectionInfo | None:
    return login_info(_settings(memo), settings)


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("reactor") is not None:
        await memo["reactor"].stop()
    server = memo.get("metrics_server")
    if server is not None:
        (server[0] if isinstance(server, tuple) else server).shutdown()


@kopf.on.login()
async def login(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo | None:
    """``SPX_KUBE_SERVER`` (development, tests), else the service account, else the kubeconfig."""
    info = memo["login_info"] = login_info(_settings(memo), settings)
    if info is not None and memo.get("client") is not None:
        memo["client"].set_credentials(info)
    return info


@kopf.on.probe(id="reconcile")
def probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """Liveness details (``/healthz`` of ``--liveness``): queue depth and last reconcile."""
    rec: Reactor | None = memo.get("reactor")
    if rec is None:
        return {"started": False}
    if dead := rec.dead_tasks():  # a reconcile worker died: fail the liveness probe so the pod is restarted
        raise RuntimeError(f"reactor tasks stopped: {', '.join(dead)}")
    return {"queued": len(rec.queue), "experiments": len(rec.store.experiments), "synced": rec.synced,
            "secondsSinceLastReconcile": round(time.time() - rec.last_reconcile, 1) if rec.last_reconcile else None}


# Watch events → the reactor's store and queue. (No kopf index handlers: they would double kopf's
# per-event cost; the reactor lists from the API server itself.)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def experiment_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    _reactor(memo).on_experiment(event["type"], dict(event["object"]))


@kopf.on.event("batch", "v1", "jobs", labels=MANAGED)
async def job_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    _reactor(memo).on_job(event["type"], dict(event["object"]))


@kopf.on.event("v1", "pods", labels=MANAGED)
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    _reactor(memo).on_pod(event["type"], dict(event["object"]))
