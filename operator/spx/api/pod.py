"""Cluster-specific fields passed through to the bench pod (``spec.pod``), validated.

A GPU pool has its own conventions that the operator cannot guess: a ``runtimeClassName`` (``nvidia``
on clusters whose default runtime has no GPU hook), a second scheduler, cost labels, a service-mesh
annotation (``sidecar.istio.io/inject: "false"``), NCCL settings (``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``),
a dataset or cache volume. :class:`PodSpec` carries them; the operator copies them into the pod
(:func:`spx.controller.manifests.job.build_pod_spec`), the cluster's policy (:mod:`spx.api.policy`) says
which of them a tenant may set.

What the operator itself puts into the pod cannot be overridden: the keys, names and paths in
:data:`RESERVED_LABEL_KEYS`, :data:`RESERVED_PREFIXES`, :data:`RESERVED_ENV`, :data:`RESERVED_VOLUMES`
and :data:`~spx.vocabulary.RESERVED_MOUNT_PATHS` are refused with a message naming the field (an annotation
``bench.spx.dev/experiment`` would replace the experiment the pod runs). Writable volumes are emptyDirs
only, as the pod's hardening requires (``spx.controller.manifests.pod_security``); other volumes mount read-only.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field, field_validator, model_validator

from spx.api.base import CamelModel
from spx.api.k8s_patterns import DNS_LABEL, DNS_SUBDOMAIN, LABEL_VALUE, QUANTITY, LabelKey
from spx.vocabulary import RESERVED_MOUNT_PATHS

#: Label/annotation key prefixes the operator and the Job controller own.
RESERVED_PREFIXES: Final = ("bench.spx.dev/", "batch.kubernetes.io/")
#: Pod label keys the operator or the Job controller set (:func:`spx.controller.manifests.naming.link_labels`).
RESERVED_LABEL_KEYS: Final = frozenset({
    "app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by", "job-name", "controller-uid",
})
#: Environment variables the operator sets in the bench container (``SPX_*`` is reserved as a prefix:
#: the experiment's identity and the vLLM plugin's switches).
RESERVED_ENV: Final = frozenset({
    "PYTHONUNBUFFERED", "HOME", "TMPDIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
    "VLLM_CACHE_ROOT",
})
RESERVED_ENV_PREFIX: Final = "SPX_"
#: Volume names the operator uses (experiment file, scratch, /dev/shm, the serving model PVC).
RESERVED_VOLUMES: Final = frozenset({"experiment", "scratch", "dshm", "model"})

#: Environment variable names as the API server accepts them (``IsEnvVarName``).
_ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"

#: A label or annotation key (:data:`spx.api.k8s_patterns.LabelKey`).
Key = LabelKey
VolumeType = Literal["persistentVolumeClaim", "configMap", "secret", "emptyDir"]
#: The volume sources :class:`VolumeSpec` offers, in the order a message lists them.
VOLUME_TYPES: Final[tuple[VolumeType, ...]] = ("persistentVolumeClaim", "configMap", "secret", "emptyDir")


def _reserved_key(key: str) -> bool:
    return key.startswith(RESERVED_PREFIXES)


def path_overlaps(path: str, other: str) -> bool:
    """Whether mount path ``path`` is ``other``, lies under it, or contains it (``/etc`` contains ``/etc/spx``)."""
    a, b = path.rstrip("/") or "/", other.rstrip("/") or "/"
    return a == b or a.startswith(b + "/") or b.startswith(a.rstrip("/") + "/")


class EnvVar(CamelModel):
    """One environment variable of the bench container (a literal value; no secrets by reference)."""

    name: str = Field(min_length=1, max_length=253, pattern=_ENV_NAME)
    """Variable name (e.g. NCCL_IB_HCA); SPX_* and the operator's own variables are reserved."""
    value: str = Field(default="", max_length=32768)
    """Value (a literal string)."""

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        if v.startswith(RESERVED_ENV_PREFIX) or v in RESERVED_ENV:
            raise ValueError(
                f"environment variable {v!r} is set by the operator (SPX_* and {', '.join(sorted(RESERVED_ENV))} "
                "are reserved); choose another name"
            )
        return v


class EmptyDirSource(CamelModel):
    """A scratch ``emptyDir`` (writable): ``medium`` "" (node disk) or Memory, optional ``sizeLimit``."""

    medium: Literal["", "Memory"] = ""
    """Storage medium: "" (the node's disk) or Memory (tmpfs, counts against resources.memory)."""
    size_limit: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """Size limit (a quantity, e.g. 20Gi)."""


class VolumeSpec(CamelModel):
    """An extra volume of the bench pod and where the bench container mounts it.

    Exactly one source: ``persistentVolumeClaim`` (a claim name), ``configMap`` (a ConfigMap name),
    ``secret`` (a Secret name) or ``emptyDir``. Only an emptyDir may be writable (``readOnly: false``).
    """

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    """Volume name (a DNS label; experiment, scratch, dshm and model are the operator's)."""
    mount_path: str = Field(min_length=2, max_length=1024, pattern=r"^/[^:]*$")
    """Absolute mount path in the bench container (not /etc/spx, /var/run/spx, /dev/shm, /tmp or /dev/termination-log, nor above or below them)."""
    read_only: bool = True
    """Mount read-only (default); only an emptyDir may be writable."""
    sub_path: str | None = Field(default=None, min_length=1, max_length=1024, pattern=r"^[^/](.*[^/])?$")
    """Relative path inside the volume to mount instead of its root (no leading or trailing '/')."""
    persistent_volume_claim: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Name of a PersistentVolumeClaim in the experiment's namespace."""
    config_map: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Name of a ConfigMap in the experiment's namespace."""
    secret: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Name of a Secret in the experiment's namespace."""
    empty_dir: EmptyDirSource | None = None
    """A scratch emptyDir."""

    @field_validator("name")
    @classmethod
    def _name_free(cls, v: str) -> str:
        if v in RESERVED_VOLUMES:
            raise ValueError(f"volume name {v!r} is the operator's ({', '.join(sorted(RESERVED_VOLUMES))}); choose another")
        return v

    @field_validator("mount_path")
    @classmethod
    def _path_free(cls, v: str) -> str:
        if ".." in v.split("/"):
            raise ValueError(f"mountPath {v[:80]!r} contains '..'; use an absolute path without it")
        clash = [p for p in RESERVED_MOUNT_PATHS if path_overlaps(v, p)]
        if clash:
            raise ValueError(
                f"mountPath {v[:80]!r} overlaps {clash[0]}, which the operator mounts; use a path outside "
                f"{', '.join(RESERVED_MOUNT_PATHS)} (e.g. /data)"
            )
        return v

    @model_validator(mode="after")
    def _one_source(self) -> VolumeSpec:
        given = [t for t in VOLUME_TYPES if self.source_of(t) is not None]
        if len(given) != 1:
            raise ValueError(
                f"volume {self.name!r} sets {given or 'no source'}; set exactly one of {', '.join(VOLUME_TYPES)}"
            )
        if not self.read_only and given[0] != "emptyDir":
            raise ValueError(
                f"volume {self.name!r} ({given[0]}) is writable; only an emptyDir may be (the bench pod writes to "
                "emptyDirs only): set readOnly: true"
            )
        return self

    def source_of(self, kind: VolumeType) -> object | None:
        """The value of source field ``kind`` (camelCase name), ``None`` if unset."""
        return {
            "persistentVolumeClaim": self.persistent_volume_claim, "configMap": self.config_map,
            "secret": self.secret, "emptyDir": self.empty_dir,
        }[kind]

    @property
    def kind(self) -> VolumeType:
        """The one source this volume sets (camelCase, as the policy's ``volumeTypes`` names it)."""
        return next(t for t in VOLUME_TYPES if self.source_of(t) is not None)


class PodSpec(CamelModel):
    """Cluster-specific fields of the bench pod (Kubernetes only; ``spx run`` ignores them).

    Each is copied into the pod as given; the operator's policy (chart values ``policy``) decides
    which a tenant may set: ``runtimeClasses``, ``schedulerNames``, ``podLabelKeys``,
    ``podAnnotationKeys``, ``envNames``, ``volumeTypes``, ``volumeClaims``.
    """

    runtime_class_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """RuntimeClass of the pod (e.g. nvidia where the default runtime has no GPU hook)."""
    scheduler_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Scheduler of the pod (unset: the cluster's default-scheduler)."""
    labels: dict[Key, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(default_factory=dict, max_length=64)
    """Extra pod labels (cost centre, team); bench.spx.dev/*, batch.kubernetes.io/* and the operator's app.kubernetes.io/* keys are reserved."""
    annotations: dict[Key, Annotated[str, Field(max_length=4096)]] = Field(default_factory=dict, max_length=64)
    """Extra pod annotations (e.g. sidecar.istio.io/inject: "false"); bench.spx.dev/* and batch.kubernetes.io/* are reserved."""
    env: list[EnvVar] = Field(default_factory=list, max_length=128)
    """Extra environment variables of the bench container (e.g. NCCL_IB_HCA); names unique, SPX_* reserved."""
    volumes: list[VolumeSpec] = Field(default_factory=list, max_length=16)
    """Extra volumes and their mounts in the bench container; names and mount paths unique."""

    @field_validator("labels")
    @classmethod
    def _labels_free(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in v if _reserved_key(k) or k in RESERVED_LABEL_KEYS)
        if bad:
            raise ValueError(
                f"pod label keys {bad[:4]} are set by the operator or the Job controller; remove them "
                f"(reserved: {', '.join(RESERVED_PREFIXES)}*, {', '.join(sorted(RESERVED_LABEL_KEYS))})"
            )
        return v

    @field_validator("annotations")
    @classmethod
    def _annotations_free(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in v if _reserved_key(k))
        if bad:
            raise ValueError(
                f"pod annotation keys {bad[:4]} are the operator's (reserved: {', '.join(RESERVED_PREFIXES)}*); remove them"
            )
        return v

    @field_validator("env")
    @classmethod
    def _env_unique(cls, v: list[EnvVar]) -> list[EnvVar]:
        names = [e.name for e in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"environment variables {dupes[:4]} are listed more than once; list each once")
        return v

    @field_validator("volumes")
    @classmethod
    def _volumes_unique(cls, v: list[VolumeSpec]) -> list[VolumeSpec]:
        names = [x.name for x in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"volume names {dupes[:4]} repeat; give each volume its own name")
        for i, a in enumerate(v):
            for b in v[i + 1:]:
                if path_overlaps(a.mount_path, b.mount_path):
                    raise ValueError(
                        f"volumes {a.name!r} ({a.mount_path}) and {b.name!r} ({b.mount_path}) overlap; "
                        "mount them at disjoint paths"
                    )
        return v
