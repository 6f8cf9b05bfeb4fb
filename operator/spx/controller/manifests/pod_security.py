"""Security context of the bench pod, and a check of a built pod against it (pure).

The bench pod runs whatever image an experiment names (within the operator's policy,
:mod:`spx.api.policy`) on 8 GPUs, so it gets as little as a GPU benchmark can run with:

- a UID/GID of :data:`BENCH_UID` (≥ 10000, so it never coincides with a host user or a system
  account of the node; the bench image, ``images/bench/Dockerfile``, runs as the same UID);
- a read-only root filesystem; the only writable places are the scratch emptyDir at
  :data:`SCRATCH_MOUNT` (results, and as ``HOME``/``TMPDIR`` the torch, Triton and vLLM caches; also
  mounted at ``/tmp`` through a ``subPath``) and the memory-backed ``/dev/shm`` emptyDir NCCL needs;
- no privilege escalation, all capabilities dropped, RuntimeDefault seccomp, no API token.

:func:`hardening_problems` is the table-tested judgement; ``spx.controller.manifests.job`` (the bench Job) uses
:func:`pod_security_context`, :func:`container_security_context`, :func:`scratch_env` and
:func:`scratch_mounts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from spx.vocabulary import SCRATCH_MOUNT, TMP_MOUNT

#: UID and GID of the bench process (≥ 10000: Pod Security "restricted" asks for non-root; platform
#: policies commonly also reserve UIDs below 10000 for the node's own users).
BENCH_UID: Final = 10001
MIN_UID: Final = 10000
SCRATCH_VOLUME: Final = "scratch"
SHM_VOLUME: Final = "dshm"
#: Where the caches go on the scratch volume (HOME, TMPDIR and the caches torch, Triton and vLLM write).
SCRATCH_ENV: Final = {
    "HOME": f"{SCRATCH_MOUNT}/home",
    "TMPDIR": TMP_MOUNT,
    "XDG_CACHE_HOME": f"{SCRATCH_MOUNT}/home/.cache",
    "TRITON_CACHE_DIR": f"{SCRATCH_MOUNT}/home/.triton",
    "TORCHINDUCTOR_CACHE_DIR": f"{SCRATCH_MOUNT}/home/.inductor",
    "VLLM_CACHE_ROOT": f"{SCRATCH_MOUNT}/home/.cache/vllm",
}


def pod_security_context() -> dict[str, Any]:
    """``spec.template.spec.securityContext`` of the bench pod."""
    return {
        "runAsNonRoot": True,
        "runAsUser": BENCH_UID,
        "runAsGroup": BENCH_UID,
        "fsGroup": BENCH_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """``securityContext`` of the bench container: read-only root, nothing to escalate to."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def scratch_env() -> list[dict[str, str]]:
    """Environment entries pointing HOME, TMPDIR and the caches at the scratch volume."""
    return [{"name": k, "value": v} for k, v in SCRATCH_ENV.items()]


def scratch_mounts() -> list[dict[str, Any]]:
    """The scratch emptyDir at :data:`SCRATCH_MOUNT` and, through ``subPath: tmp``, at ``/tmp``."""
    return [
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT},
        {"name": SCRATCH_VOLUME, "mountPath": TMP_MOUNT, "subPath": "tmp"},
    ]


def hardening_problems(pod_spec: Mapping[str, Any]) -> list[str]:
    """What in a pod spec breaks the bench pod's hardening; [] when nothing does.

    Checks: pod-level ``runAsNonRoot`` and a UID/GID ≥ :data:`MIN_UID` (container-level overrides
    included); per container ``readOnlyRootFilesystem: true``, no privilege escalation, not
    privileged, all capabilities dropped; every writable (not ``readOnly``) volume mount is an
    emptyDir; no service-account token.
    """
    problems: list[str] = []
    pod_sc = pod_spec.get("securityContext") or {}
    if pod_spec.get("automountServiceAccountToken") is not False:
        problems.append("automountServiceAccountToken must be false (the bench pod needs no API access)")
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or []}
    for c in pod_spec.get("containers") or []:
        name = c.get("name")
        sc = {**pod_sc, **(c.get("securityContext") or {})}
        if sc.get("runAsNonRoot") is not True:
            problems.append(f"container {name}: runAsNonRoot must be true")
        for field in ("runAsUser", "runAsGroup"):
            uid = sc.get(field)
            if not isinstance(uid, int) or uid < MIN_UID:
                problems.append(f"container {name}: {field} must be ≥ {MIN_UID}, got {uid}")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"container {name}: readOnlyRootFilesystem must be true")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"container {name}: allowPrivilegeEscalation must be false")
        if sc.get("privileged"):
            problems.append(f"container {name}: must not be privileged")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            problems.append(f"container {name}: capabilities must drop ALL")
        for m in c.get("volumeMounts") or []:
            if m.get("readOnly"):
                continue
            volume = volumes.get(m.get("name")) or {}
            if "emptyDir" not in volume:
                problems.append(f"container {name}: {m.get('mountPath')} is writable but volume {m.get('name')} "
                                "is not an emptyDir (mount it readOnly)")
    return problems
