"""The operator's settings: every ``SPX_*`` variable of the operator, parsed by its type, in one object.

:class:`OperatorSettings` is a pydantic-settings ``BaseSettings``: ``spx operator``, ``kopf run -m
spx.controller`` and the Helm chart's Deployment configure the operator the same way (environment
variables; ``spx operator``'s options override them). The startup handler puts the object into
kopf's ``memo`` (``memo.settings``) and every handler and the reactor get it from there; nothing
reads ``os.environ`` ad hoc, nothing writes it.

Empty values keep the default, except the optional strings (``SPX_BENCH_SHM_SIZE``,
``SPX_BENCH_SERVICE_ACCOUNT``, ``SPX_KUBE_*``), where empty means unset. ``SPX_BENCH_ENV_<NAME>=v``
adds ``NAME=v`` to the bench container's environment. The bench's own variables
(``SPX_SHARD_FUSED_WQA_WKV_*``, ``SPX_FAULT_INJECT_*``, ``SPX_ARM``) belong to the bench pod, not here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from spx import __version__
from spx.api.k8s_patterns import QUANTITY
from spx.api.policy import ENV_VAR as POLICY_ENV_VAR
from spx.api.policy import Policy, check_bench_image, policy_from_env
from spx.api.resources import GPU_DEFAULTS
from spx.controller.decide.observation import Timeouts
from spx.controller.manifests.job import DEFAULT_BENCH_COMMAND
from spx.controller.manifests.model_cache import ModelCache
from spx.controller.manifests.placement import PlacementDefaults
from spx.controller.workqueue import HOLD_S

#: The bench image of this release (scripts/release.sh stamps one version everywhere: spx.__version__).
DEFAULT_BENCH_IMAGE = f"ghcr.io/spx-dev/spx-bench:{__version__}"
BENCH_ENV_PREFIX = "SPX_BENCH_ENV_"


class _BenchEnvSource(PydanticBaseSettingsSource):
    """``SPX_BENCH_ENV_<NAME>=value`` variables → ``extra_env`` (``{NAME: value}``)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        extra = {k.removeprefix(BENCH_ENV_PREFIX): v for k, v in os.environ.items()
                 if k.startswith(BENCH_ENV_PREFIX) and len(k) > len(BENCH_ENV_PREFIX)}
        return {"extra_env": extra} if extra else {}


def _env(name: str, description: str, **kw: Any) -> Any:
    return Field(validation_alias=name, description=f"{description} [{name}]", **kw)


class OperatorSettings(BaseSettings):
    """Settings of one operator process (the environment variable of each in its description)."""

    model_config = SettingsConfigDict(populate_by_name=True, frozen=True, extra="ignore", case_sensitive=True)

    bench_image: str = _env("SPX_BENCH_IMAGE", "image of the bench pod when spec.image is unset",
                            default=DEFAULT_BENCH_IMAGE, min_length=1)
    max_concurrent: int = _env("SPX_MAX_CONCURRENT_EXPERIMENTS",
                               "experiments with an unfinished Job at once, the rest wait Queued; 0 = no limit",
                               default=4, ge=0)
    schedule_timeout_s: float = _env("SPX_SCHEDULE_TIMEOUT_SECONDS",
                                     "seconds a pod may stay Unschedulable before the run is InfraFailed",
                                     default=Timeouts.schedule_timeout_s, gt=0)
    image_pull_timeout_s: float = _env("SPX_IMAGE_PULL_TIMEOUT_SECONDS",
                                       "seconds of image-pull / container-creation errors before InfraFailed",
                                       default=Timeouts.image_pull_timeout_s, gt=0)
    replacement_timeout_s: float = _env(
        "SPX_REPLACEMENT_TIMEOUT_SECONDS",
        "seconds the Job controller may take to replace a disrupted (evicted) pod before PodCreateFailed, counted "
        "from the disruption; never less than the Job controller's pod back-off plus a slack, whatever "
        "SPX_IMAGE_PULL_TIMEOUT_SECONDS is", default=Timeouts.replacement_timeout_s, gt=0)
    max_disruptions: int = _env("SPX_MAX_DISRUPTIONS", "pod disruptions (evictions) retried before InfraFailed",
                                default=Timeouts.max_disruptions, ge=0)
    metrics_port: int = _env("SPX_METRICS_PORT", "port of the Prometheus endpoint /metrics; 0 disables it",
                             default=8080, ge=0, le=65535)
    metrics_bind_address: str = _env("SPX_METRICS_BIND_ADDRESS",
                                     "address the Prometheus endpoint binds (chart: metrics.bindAddress)",
                                     default="0.0.0.0", min_length=1)
    policy: Annotated[Policy, NoDecode] = _env(
        POLICY_ENV_VAR,
        "what an experiment may ask for (image registries/digests, priority classes, tolerations, node-selector "
        "keys), JSON in camelCase (spx.api.policy; chart: values `policy`); empty = allow everything",
        default_factory=Policy)
    bench_placement: Annotated[PlacementDefaults, NoDecode] = _env(
        "SPX_BENCH_PLACEMENT",
        "the cluster's default placement of bench pods where an experiment sets none: JSON in camelCase "
        "{nodeSelector, tolerations, affinity, gpuNodeAffinity} (spx.controller.manifests.placement.PlacementDefaults; "
        "chart: values `benchPlacement`)", default_factory=PlacementDefaults)
    crd_check: bool = _env("SPX_CRD_CHECK",
                           "refuse to start unless the installed CRD carries this operator's schema version "
                           "(spx.controller.decide.crd_check); false only for development API servers without the CRD",
                           default=True)
    workers: int = _env("SPX_RECONCILE_WORKERS", "concurrent reconciles (never the same experiment twice at once)",
                        default=64, ge=1)
    admission_hold_s: float = _env("SPX_ADMISSION_HOLD_SECONDS",
                                   "while new experiments are getting their Jobs (a burst of applies), follow-up work "
                                   "(status writes, log reads) waits at most this long; 0 = never held "
                                   "(spx.controller.workqueue)",
                                   default=HOLD_S, ge=0)
    resync_s: float = _env("SPX_RESYNC_SECONDS",
                           "seconds between re-lists of experiments, Jobs and pods from the API server "
                           "(the store is corrected against them, then every experiment is reconciled)",
                           default=600.0, gt=0)
    bench_service_account: str | None = _env("SPX_BENCH_SERVICE_ACCOUNT",
                                             "service account of the bench pod (it gets no token either way)",
                                             default=None)
    bench_shm_size: str | None = _env("SPX_BENCH_SHM_SIZE", "size limit of the bench pod's /dev/shm; empty = none",
                                      default="64Gi")
    bench_memory: str = _env("SPX_BENCH_MEMORY",
                             "memory request = limit of a GPU bench pod whose experiment sets no resources.memory "
                             "(/dev/shm counts against it; chart: bench.memory)",
                             default=GPU_DEFAULTS["memory"], pattern=QUANTITY)
    bench_model_cache: Annotated[ModelCache, NoDecode] = _env(
        "SPX_BENCH_MODEL_CACHE",
        "where a serving bench pod's model cache (HF_HOME) lives: JSON {type: emptyDir|persistentVolumeClaim|hostPath, "
        "sizeLimit, claimName, path} (spx.controller.manifests.model_cache; chart: bench.modelCache)",
        default_factory=ModelCache)
    bench_image_pull_policy: str = _env("SPX_BENCH_IMAGE_PULL_POLICY", "imagePullPolicy of the bench container",
                                        default="IfNotPresent", pattern=r"^(Always|IfNotPresent|Never)$")
    bench_command: Annotated[tuple[str, ...], NoDecode] = _env(
        "SPX_BENCH_COMMAND", "command that runs the bench in the image, space-separated", default=DEFAULT_BENCH_COMMAND)
    log_limit_bytes: int = _env("SPX_LOG_LIMIT_BYTES", "bytes of pod log read when collecting the result",
                                default=16 * 1024 * 1024, gt=0)
    progress_log_interval_s: float = _env(
        "SPX_PROGRESS_LOG_SECONDS",
        "seconds between reads of a running bench pod's log (its points survive a node loss); 0 = only at the end",
        default=30.0, ge=0)
    kube_server: str | None = _env("SPX_KUBE_SERVER",
                                   "API server for development/tests, bypassing in-cluster/kubeconfig login",
                                   default=None)
    kube_token: str | None = _env("SPX_KUBE_TOKEN", "bearer token for SPX_KUBE_SERVER", default=None, repr=False)
    kube_insecure: bool = _env("SPX_KUBE_INSECURE", "skip TLS verification of SPX_KUBE_SERVER", default=False)
    kube_namespace: str | None = _env("SPX_KUBE_NAMESPACE", "default namespace with SPX_KUBE_SERVER", default=None)
    # An integer: the API server parses ?timeoutSeconds= as one (a real server refuses "300.0" with 400).
    watch_server_timeout_s: int = _env("SPX_WATCH_SERVER_TIMEOUT", "server-side timeout of one watch request, whole s",
                                       default=300, gt=0)
    watch_client_timeout_s: float = _env("SPX_WATCH_CLIENT_TIMEOUT", "client-side timeout of one watch request, s",
                                         default=330.0, gt=0)
    watch_inactivity_timeout_s: float = _env("SPX_WATCH_INACTIVITY_TIMEOUT",
                                             "reconnect a watch silent (no event, no bookmark) this long, s",
                                             default=70.0, gt=0)
    request_timeout_s: float = _env("SPX_REQUEST_TIMEOUT", "timeout of one API request, s", default=60.0, gt=0)
    conflict_backoff_s: float = _env("SPX_CONFLICT_BACKOFF_SECONDS",
                                     "first delay after a 409 Conflict; doubles per conflict, full jitter",
                                     default=0.2, gt=0)
    conflict_backoff_max_s: float = _env("SPX_CONFLICT_BACKOFF_MAX_SECONDS", "cap of the conflict backoff, s",
                                         default=10.0, gt=0)
    watch_namespaces: Annotated[tuple[str, ...], NoDecode] = _env(
        "SPX_WATCH_NAMESPACES",
        "namespaces the operator watches (comma- or space-separated; empty = all); its own re-lists stay "
        "inside them, so namespaced RBAC (a Role per namespace) suffices — `spx operator -n` sets it",
        default=())
    log_every_event: bool = _env("SPX_LOG_EVERY_EVENT", "log kopf's per-event handler lines at INFO", default=False)
    finished_retention_s: float = _env(
        "SPX_FINISHED_RETENTION_SECONDS",
        "delete experiments decided longer ago than this (their Job, pods, ConfigMap and series go with "
        "them); 0 = keep them (needs delete on experiments)", default=0.0, ge=0)
    series_retention_s: float = _env(
        "SPX_SERIES_RETENTION_SECONDS",
        "stop exporting the per-experiment series of experiments decided longer ago than this; 0 = keep",
        default=0.0, ge=0)
    leader_election: bool = _env(
        "SPX_LEADER_ELECTION",
        "only the holder of a coordination.k8s.io Lease reconciles (run several replicas); the others watch",
        default=False)
    leader_election_namespace: str | None = _env(
        "SPX_LEADER_ELECTION_NAMESPACE", "namespace of the leader Lease (the chart: the release namespace)",
        default=None)
    leader_election_lease: str = _env("SPX_LEADER_ELECTION_LEASE", "name of the leader Lease",
                                      default="spx-operator-leader")
    leader_election_identity: str | None = _env(
        "SPX_LEADER_ELECTION_IDENTITY", "this replica's identity in the Lease (the chart: the pod name); "
        "empty = hostname-pid", default=None)
    leader_lease_seconds: float = _env("SPX_LEADER_LEASE_SECONDS",
                                       "lease duration; renew deadline and retry period are 2/3 and 2/15 of it",
                                       default=15.0, ge=3)
    extra_env: dict[str, str] = Field(default_factory=dict,
                                      description=f"environment of the bench container [{BENCH_ENV_PREFIX}<NAME>]")

    @field_validator("bench_command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not value.strip():
                raise PydanticUseDefault()
            return tuple(value.split())
        return value

    @field_validator("bench_model_cache", mode="before")
    @classmethod
    def _parse_model_cache(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return ModelCache.model_validate_json(value or "{}")
            except ValidationError as e:  # name the chart's field (bench.modelCache.<key>) and what it accepts
                raise ValueError("; ".join(f"modelCache.{'.'.join(str(p) for p in err['loc']) or '(value)'}: "
                                           f"{err['msg']}" for err in e.errors())) from None
        return value

    @field_validator("bench_placement", mode="before")
    @classmethod
    def _parse_placement(cls, value: Any) -> Any:
        if isinstance(value, str):
            return PlacementDefaults.model_validate_json(value or "{}")
        return value

    @field_validator("policy", mode="before")
    @classmethod
    def _parse_policy(cls, value: Any) -> Any:
        if isinstance(value, str):  # the environment's JSON: parsed (and its errors worded) by spx.api.policy
            return policy_from_env({POLICY_ENV_VAR: value})
        return value

    @field_validator("watch_namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(n for n in value.replace(",", " ").split() if n)
        return value

    @field_validator("bench_service_account", "bench_shm_size", "kube_server", "kube_token", "kube_namespace",
                     "leader_election_namespace", "leader_election_identity",
                     mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("max_concurrent", "schedule_timeout_s", "image_pull_timeout_s", "replacement_timeout_s",
                     "max_disruptions", "metrics_port",
                     "workers", "admission_hold_s", "resync_s", "log_limit_bytes", "progress_log_interval_s", "watch_server_timeout_s",
                     "watch_client_timeout_s", "watch_inactivity_timeout_s", "request_timeout_s",
                     "conflict_backoff_s", "conflict_backoff_max_s", "bench_image", "bench_image_pull_policy",
                     "kube_insecure", "log_every_event", "metrics_bind_address", "crd_check", mode="before")
    @classmethod
    def _empty_is_default(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise PydanticUseDefault()
        return value.strip() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit values first, then the environment, then ``SPX_BENCH_ENV_*``; no dotenv or secret files."""
        return init_settings, env_settings, _BenchEnvSource(settings_cls)

    @model_validator(mode="after")
    def _bench_image_pinned(self) -> OperatorSettings:
        """``requireImageDigest`` covers the default bench image too (:func:`spx.api.policy.check_bench_image`)."""
        problems = check_bench_image(self.bench_image, self.policy)
        if problems:
            raise ValueError(str(problems[0]))
        return self

    @property
    def timeouts(self) -> Timeouts:
        """The limits :func:`spx.controller.decide.pod_outcome.observe` classifies a run against."""
        return Timeouts(schedule_timeout_s=self.schedule_timeout_s, image_pull_timeout_s=self.image_pull_timeout_s,
                        max_disruptions=self.max_disruptions, replacement_timeout_s=self.replacement_timeout_s)


def env_var(field_name: str) -> str:
    """The environment variable of a field of :class:`OperatorSettings`."""
    alias = OperatorSettings.model_fields[field_name].validation_alias
    return str(alias) if alias else BENCH_ENV_PREFIX + "<NAME>"


#: Field name → environment variable, for every setting read from one variable.
ENV_VARS: dict[str, str] = {name: str(f.validation_alias) for name, f in OperatorSettings.model_fields.items()
                            if f.validation_alias}


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> OperatorSettings:
    """The settings from the process environment (or from ``environ``, then nothing else is read), with
    ``overrides`` (field names; None = not given) on top.

    Raises:
        ValueError: a variable that does not parse or is out of range, naming it, its value and the rule.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        if environ is None:
            return OperatorSettings(**given)
        values: dict[str, Any] = {var: environ[var] for var in ENV_VARS.values() if var in environ}
        extra = {k.removeprefix(BENCH_ENV_PREFIX): v for k, v in environ.items()
                 if k.startswith(BENCH_ENV_PREFIX) and len(k) > len(BENCH_ENV_PREFIX)}
        if extra:
            values["extra_env"] = extra
        return OperatorSettings.model_validate({**values, **given})
    except ValidationError as err:
        lines = []
        for e in err.errors():
            loc = str(e["loc"][0]) if e["loc"] else "?"
            name = env_var(loc) if loc in OperatorSettings.model_fields else loc
            value = str(e.get("input"))[:80]
            lines.append(f"{name}={value!r}: {e['msg']}")
        raise ValueError("; ".join(lines)) from None
