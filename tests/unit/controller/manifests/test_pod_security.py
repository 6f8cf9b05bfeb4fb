"""spx.controller.manifests.pod_security: the bench pod's hardening and the check of a built pod (table)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spx.controller.manifests.pod_security import (
    BENCH_UID,
    MIN_UID,
    SCRATCH_MOUNT,
    container_security_context,
    hardening_problems,
    pod_security_context,
    scratch_env,
    scratch_mounts,
)


def hardened_pod() -> dict[str, Any]:
    """A bench pod as build_job should make it: the module's contexts, mounts and env."""
    return {
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(),
        "containers": [{
            "name": "bench",
            "securityContext": container_security_context(),
            "env": scratch_env(),
            "volumeMounts": [{"name": "experiment", "mountPath": "/etc/spx", "readOnly": True},
                             *scratch_mounts(), {"name": "dshm", "mountPath": "/dev/shm"},
                             {"name": "model", "mountPath": "/models", "readOnly": True}],
        }],
        "volumes": [{"name": "experiment", "downwardAPI": {"items": []}}, {"name": "scratch", "emptyDir": {}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                    {"name": "model", "persistentVolumeClaim": {"claimName": "m", "readOnly": True}}],
    }


def test_the_hardened_pod_passes() -> None:
    assert hardening_problems(hardened_pod()) == []
    assert BENCH_UID >= MIN_UID == 10000
    env = {e["name"]: e["value"] for e in scratch_env()}
    assert env["HOME"].startswith(SCRATCH_MOUNT) and env["TMPDIR"] == "/tmp"
    assert all(v.startswith((SCRATCH_MOUNT, "/tmp")) for v in env.values())


def _broken(path: str, value: Any) -> dict[str, Any]:
    pod = copy.deepcopy(hardened_pod())
    node: Any = pod
    *head, last = path.split(".")
    for key in head:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return pod


@pytest.mark.parametrize(
    ("pod", "problem"),
    [
        (_broken("securityContext.runAsUser", 1000), "runAsUser must be ≥ 10000, got 1000"),
        (_broken("containers.0.securityContext.runAsUser", 0), "runAsUser must be ≥ 10000, got 0"),
        (_broken("securityContext.runAsGroup", KeyError), "runAsGroup must be ≥ 10000, got None"),
        (_broken("containers.0.securityContext.readOnlyRootFilesystem", KeyError), "readOnlyRootFilesystem must be true"),
        (_broken("containers.0.securityContext.allowPrivilegeEscalation", True), "allowPrivilegeEscalation must be false"),
        (_broken("containers.0.securityContext.privileged", True), "must not be privileged"),
        (_broken("containers.0.securityContext.capabilities", {"drop": ["NET_RAW"]}), "capabilities must drop ALL"),
        (_broken("containers.0.securityContext.runAsNonRoot", False), "runAsNonRoot must be true"),
        (_broken("automountServiceAccountToken", True), "automountServiceAccountToken must be false"),
        (_broken("containers.0.volumeMounts.4.readOnly", False), "/models is writable but volume model is not an emptyDir"),
    ],
)
def test_each_weakening_is_named(pod: dict[str, Any], problem: str) -> None:
    problems = hardening_problems(pod)
    assert len(problems) == 1 and problem in problems[0], problems


def test_build_job_makes_a_hardened_pod() -> None:
    from spx.api import ExperimentSpec
    from spx.controller.manifests.job import build_job

    job = build_job("e", "ns", "uid-1", 1, ExperimentSpec(), "ghcr.io/spx-dev/spx-bench:0.1.0")
    assert hardening_problems(job["spec"]["template"]["spec"]) == []
