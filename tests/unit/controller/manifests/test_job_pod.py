"""spx.controller.manifests.job, the bench pod: spec.pod fields copied into it, requests that follow the
experiment; and the spec's refusals of what would collide with the operator's own pod fields (the
pod's placement: test_placement)."""

from __future__ import annotations

from typing import Any

import pytest

from spx.api import ExperimentSpec, validate_spec
from spx.api.loading import SpecError
from spx.controller.manifests import job as k8s
from spx.controller.manifests import placement

UID = "0b7e3c1e-5f0a-4c4e-9a55-1d2f3e4a5b6c"


def spec(**overrides: Any) -> ExperimentSpec:
    overrides.setdefault("resources", {}).setdefault("gpuProducts", ["NVIDIA-H200"])
    return validate_spec(overrides)


def pod_of(s: ExperimentSpec, **options: Any) -> dict[str, Any]:
    job = k8s.build_job("exp", "team", UID, 1, s, "registry.example/spx-bench:1", k8s.BenchOptions(**options))
    return job["spec"]["template"]


@pytest.mark.parametrize("overrides", [{}, {"resources": {"gpuNodeAffinity": "preferred"}},
                                       {"resources": {"gpuNodeAffinity": "none"}}, {"kernel": {"device": "cpu"}}])
def test_the_pod_is_placed_as_placement_says(overrides: dict[str, Any]) -> None:
    s = spec(**overrides)
    pod = pod_of(s)["spec"]
    assert pod.get("affinity") == placement.build_affinity(s)
    assert pod.get("tolerations", []) == placement.build_tolerations(s)


#: (id, kernel device, resources overrides, operator shm, expected limits, expected shm sizeLimit)
RESOURCE_CASES: list[tuple[str, str, dict[str, Any], str | None, dict[str, str], str | None]] = [
    ("gpu-defaults", "cuda", {}, "64Gi", {"cpu": "32", "memory": "192Gi", "nvidia.com/gpu": "8"}, "64Gi"),
    ("cpu-smoke-defaults", "cpu", {}, "64Gi", {"cpu": "2", "memory": "4Gi"}, "1Gi"),
    ("cpu-explicit", "cpu", {"cpu": "4", "memory": "16Gi", "shmSize": "2Gi"}, "64Gi", {"cpu": "4", "memory": "16Gi"}, "2Gi"),
    ("gpu-ephemeral", "auto", {"ephemeralStorage": "100Gi"}, None,
     {"cpu": "32", "memory": "192Gi", "ephemeral-storage": "100Gi", "nvidia.com/gpu": "8"}, None),
]


@pytest.mark.parametrize(("case", "device", "resources", "shm", "limits", "shm_limit"), RESOURCE_CASES,
                         ids=[c[0] for c in RESOURCE_CASES])
def test_requests_follow_the_experiment(case: str, device: str, resources: dict[str, Any], shm: str | None,
                                        limits: dict[str, str], shm_limit: str | None) -> None:
    template = pod_of(spec(kernel={"device": device}, resources={"gpuProducts": ["NVIDIA-H200"], **resources}),
                      shm_size=shm)
    container = template["spec"]["containers"][0]
    assert container["resources"] == {"limits": limits, "requests": limits}
    (dshm,) = [v for v in template["spec"]["volumes"] if v["name"] == "dshm"]
    assert dshm["emptyDir"].get("sizeLimit") == shm_limit


def test_pod_pass_through() -> None:
    s = spec(pod={
        "runtimeClassName": "nvidia", "schedulerName": "volcano",
        "labels": {"cost-center": "ml-infra"}, "annotations": {"sidecar.istio.io/inject": "false"},
        "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}, {"name": "NCCL_DEBUG", "value": "INFO"}],
        "volumes": [
            {"name": "datasets", "mountPath": "/data", "persistentVolumeClaim": "datasets"},
            {"name": "nccl-topo", "mountPath": "/opt/topo", "configMap": "nccl-topo", "subPath": "topo.xml"},
            {"name": "cache", "mountPath": "/cache", "readOnly": False, "emptyDir": {"sizeLimit": "20Gi"}},
        ],
    })
    template = pod_of(s)
    pod, meta = template["spec"], template["metadata"]
    assert pod["runtimeClassName"] == "nvidia" and pod["schedulerName"] == "volcano"
    assert meta["labels"]["cost-center"] == "ml-infra" and meta["labels"]["bench.spx.dev/experiment"] == "exp"
    assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
    assert "bench.spx.dev/experiment" in meta["annotations"]
    env = pod["containers"][0]["env"]
    assert env[-2:] == [{"name": "NCCL_IB_HCA", "value": "mlx5"}, {"name": "NCCL_DEBUG", "value": "INFO"}]
    assert pod["volumes"][-3:] == [
        {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
        {"name": "nccl-topo", "configMap": {"name": "nccl-topo"}},
        {"name": "cache", "emptyDir": {"sizeLimit": "20Gi"}},
    ]
    assert pod["containers"][0]["volumeMounts"][-3:] == [
        {"name": "datasets", "mountPath": "/data", "readOnly": True},
        {"name": "nccl-topo", "mountPath": "/opt/topo", "readOnly": True, "subPath": "topo.xml"},
        {"name": "cache", "mountPath": "/cache", "readOnly": False},
    ]
    from spx.controller.manifests.pod_security import hardening_problems

    assert hardening_problems(pod) == []  # extra volumes keep the pod's hardening


#: (id, spec overrides, field path the error names, words the message holds)
REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    ("reserved-label", {"pod": {"labels": {"bench.spx.dev/experiment": "other"}}}, "spec.pod.labels", "reserved"),
    ("managed-by-label", {"pod": {"labels": {"app.kubernetes.io/managed-by": "me"}}}, "spec.pod.labels", "reserved"),
    ("experiment-annotation", {"pod": {"annotations": {"bench.spx.dev/experiment": "{}"}}}, "spec.pod.annotations",
     "the operator's"),
    ("spx-env", {"pod": {"env": [{"name": "SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS", "value": "1"}]}}, "spec.pod.env",
     "reserved"),
    ("home-env", {"pod": {"env": [{"name": "HOME", "value": "/"}]}}, "spec.pod.env", "reserved"),
    ("env-twice", {"pod": {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}}, "spec.pod.env",
     "more than once"),
    ("volume-name", {"pod": {"volumes": [{"name": "scratch", "mountPath": "/x", "emptyDir": {}}]}}, "spec.pod.volumes",
     "operator's"),
    ("over-etc-spx", {"pod": {"volumes": [{"name": "v", "mountPath": "/etc", "configMap": "c"}]}}, "spec.pod.volumes",
     "overlaps /etc/spx"),
    ("under-tmp", {"pod": {"volumes": [{"name": "v", "mountPath": "/tmp/x", "emptyDir": {}}]}}, "spec.pod.volumes",
     "overlaps /tmp"),
    ("two-sources", {"pod": {"volumes": [{"name": "v", "mountPath": "/d", "configMap": "c", "secret": "s"}]}},
     "spec.pod.volumes", "exactly one"),
    ("writable-pvc", {"pod": {"volumes": [{"name": "v", "mountPath": "/d", "readOnly": False,
                                           "persistentVolumeClaim": "c"}]}}, "spec.pod.volumes", "readOnly: true"),
    ("nested-mounts", {"pod": {"volumes": [{"name": "a", "mountPath": "/d", "configMap": "c"},
                                           {"name": "b", "mountPath": "/d/e", "configMap": "c"}]}},
     "spec.pod.volumes", "overlap"),
    ("affinity-key", {"resources": {"affinity": {"nodeAfinity": {}}}}, "spec.resources.affinity", "nodeAffinity"),
    ("targeting", {"resources": {"gpuNodeAffinity": "sometimes"}}, "spec.resources.gpuNodeAffinity", "preferred"),
]


@pytest.mark.parametrize(("case", "overrides", "field", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_what_collides_with_the_operator_is_refused(case: str, overrides: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        validate_spec(overrides)
    assert field in str(err.value) and words in str(err.value), str(err.value)
