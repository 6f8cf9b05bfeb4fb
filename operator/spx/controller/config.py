"""Operator configuration: environment variables (``SPX_*``), so ``spx operator`` and
``kopf run -m spx.controller`` (and the Helm chart's Deployment) are configured the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from spx.controller.pod_outcome import Timeouts

DEFAULT_BENCH_IMAGE = "ghcr.io/spx-dev/spx-bench:0.1.0"


@dataclass(frozen=True)
class OperatorConfig:
    """Settings of one operator process (env var in brackets)."""

    #: Image of the bench pod when ``spec.image`` is unset [SPX_BENCH_IMAGE].
    bench_image: str = DEFAULT_BENCH_IMAGE
    #: Experiments with an unfinished Job at once; more wait in phase Queued; 0 = no limit
    #: [SPX_MAX_CONCURRENT_EXPERIMENTS].
    max_concurrent: int = 4
    #: Seconds a pod may stay Unschedulable before the run is InfraFailed [SPX_SCHEDULE_TIMEOUT_SECONDS].
    schedule_timeout_s: float = Timeouts.schedule_timeout_s
    #: Seconds of image-pull / container-creation errors before InfraFailed [SPX_IMAGE_PULL_TIMEOUT_SECONDS].
    image_pull_timeout_s: float = Timeouts.image_pull_timeout_s
    #: Pod disruptions (evictions) retried before InfraFailed [SPX_MAX_DISRUPTIONS].
    max_disruptions: int = Timeouts.max_disruptions
    #: Port of the Prometheus endpoint ``/metrics``; 0 disables it [SPX_METRICS_PORT].
    metrics_port: int = 8080
    #: Concurrent reconciles (different experiments; one experiment is never reconciled twice at once)
    #: [SPX_RECONCILE_WORKERS].
    workers: int = 16
    #: Every experiment is reconciled at least this often, in seconds (safety net) [SPX_RESYNC_SECONDS].
    resync_s: float = 600.0
    #: Service account of the bench pod (it gets no token either way) [SPX_BENCH_SERVICE_ACCOUNT].
    bench_service_account: str | None = None
    #: Size limit of the bench pod's /dev/shm; empty = none [SPX_BENCH_SHM_SIZE].
    bench_shm_size: str | None = "64Gi"
    #: ``imagePullPolicy`` of the bench container [SPX_BENCH_IMAGE_PULL_POLICY].
    bench_image_pull_policy: str = "IfNotPresent"
    #: Command that runs the bench in the image, space-separated [SPX_BENCH_COMMAND].
    bench_command: tuple[str, ...] = ("spx", "run")
    #: Bytes of pod log read when collecting the result [SPX_LOG_LIMIT_BYTES].
    log_limit_bytes: int = 16 * 1024 * 1024
    #: API server for development/tests, bypassing in-cluster/kubeconfig login [SPX_KUBE_SERVER].
    kube_server: str | None = None
    #: Server-side timeout of one watch request, seconds [SPX_WATCH_SERVER_TIMEOUT].
    watch_server_timeout_s: float = 300.0
    #: Client-side timeout of one watch request, seconds [SPX_WATCH_CLIENT_TIMEOUT].
    watch_client_timeout_s: float = 330.0
    #: Reconnect a watch silent (no event, no bookmark) for this long, seconds [SPX_WATCH_INACTIVITY_TIMEOUT].
    watch_inactivity_timeout_s: float = 70.0
    #: Timeout of one API request, seconds [SPX_REQUEST_TIMEOUT].
    request_timeout_s: float = 60.0
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def timeouts(self) -> Timeouts:
        """The limits :func:`spx.controller.pod_outcome.observe` classifies a run against."""
        return Timeouts(
            schedule_timeout_s=self.schedule_timeout_s,
            image_pull_timeout_s=self.image_pull_timeout_s,
            max_disruptions=self.max_disruptions,
        )


_ENV = {
    "bench_image": "SPX_BENCH_IMAGE",
    "max_concurrent": "SPX_MAX_CONCURRENT_EXPERIMENTS",
    "schedule_timeout_s": "SPX_SCHEDULE_TIMEOUT_SECONDS",
    "image_pull_timeout_s": "SPX_IMAGE_PULL_TIMEOUT_SECONDS",
    "max_disruptions": "SPX_MAX_DISRUPTIONS",
    "metrics_port": "SPX_METRICS_PORT",
    "workers": "SPX_RECONCILE_WORKERS",
    "resync_s": "SPX_RESYNC_SECONDS",
    "bench_service_account": "SPX_BENCH_SERVICE_ACCOUNT",
    "bench_shm_size": "SPX_BENCH_SHM_SIZE",
    "bench_image_pull_policy": "SPX_BENCH_IMAGE_PULL_POLICY",
    "bench_command": "SPX_BENCH_COMMAND",
    "log_limit_bytes": "SPX_LOG_LIMIT_BYTES",
    "kube_server": "SPX_KUBE_SERVER",
    "watch_server_timeout_s": "SPX_WATCH_SERVER_TIMEOUT",
    "watch_client_timeout_s": "SPX_WATCH_CLIENT_TIMEOUT",
    "watch_inactivity_timeout_s": "SPX_WATCH_INACTIVITY_TIMEOUT",
    "request_timeout_s": "SPX_REQUEST_TIMEOUT",
}
ENV_VARS = dict(_ENV)


def from_env(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Build the configuration from ``SPX_*`` variables; unset or empty ones keep the default.

    Raises:
        ValueError: a variable that does not parse, naming it.
    """
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    types = {f.name: f.type for f in fields(OperatorConfig)}
    for name, var in _ENV.items():
        raw = env.get(var)
        if raw is None:
            continue
        raw = raw.strip()
        kind = str(types[name])
        try:
            if name == "bench_command":
                if raw:
                    values[name] = tuple(raw.split())
            elif kind.startswith("str | None"):
                values[name] = raw or None
            elif not raw:
                continue
            elif kind == "int":
                values[name] = int(raw)
            elif kind == "float":
                values[name] = float(raw)
            else:
                values[name] = raw
        except ValueError:
            raise ValueError(f"{var}={raw!r} is not a valid {kind}") from None
    extra = {k.removeprefix("SPX_BENCH_ENV_"): v for k, v in env.items() if k.startswith("SPX_BENCH_ENV_")}
    if extra:
        values["extra_env"] = extra
    cfg = OperatorConfig(**values)  # type: ignore[arg-type]
    if cfg.max_concurrent < 0:
        raise ValueError("SPX_MAX_CONCURRENT_EXPERIMENTS must be >= 0 (0 = no limit)")
    if cfg.workers < 1:
        raise ValueError("SPX_RECONCILE_WORKERS must be >= 1")
    return cfg
