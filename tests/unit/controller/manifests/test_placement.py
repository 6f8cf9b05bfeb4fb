"""spx.controller.manifests.placement: GPU-label affinity required / preferred / none merged with the user's
own affinity, and the GPU taint's toleration — none of it on a CPU run."""

from __future__ import annotations

from typing import Any

import pytest

from spx.api import ExperimentSpec, validate_spec
from spx.controller.manifests import placement

GPU_EXPRS = [
    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]},
    {"key": "nvidia.com/gpu.compute.major", "operator": "In", "values": ["9"]},
]
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}
POOL = {"key": "pool", "operator": "In", "values": ["a100-spare"]}
ANTI = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": {"app": "x"}}}}]}}


def spec(**overrides: Any) -> ExperimentSpec:
    overrides.setdefault("resources", {}).setdefault("gpuProducts", ["NVIDIA-H200"])
    return validate_spec(overrides)


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


#: (id, resources overrides, kernel device, expected affinity)
AFFINITY_CASES: list[tuple[str, dict[str, Any], str, dict[str, Any] | None]] = [
    ("required-default", {}, "auto", required({"matchExpressions": GPU_EXPRS})),
    ("preferred", {"gpuNodeAffinity": "preferred"}, "cuda",
     {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
         {"weight": 100, "preference": {"matchExpressions": GPU_EXPRS}}]}}),
    ("none", {"gpuNodeAffinity": "none"}, "cuda", None),
    ("cpu-never-targets-gpus", {"gpuNodeAffinity": "required"}, "cpu", None),
    ("own-terms-each-get-gpu", {"affinity": required({"matchExpressions": [ZONE]}, {"matchExpressions": [POOL]})},
     "cuda", required({"matchExpressions": [ZONE, *GPU_EXPRS]}, {"matchExpressions": [POOL, *GPU_EXPRS]})),
    ("own-terms-untouched-with-none",
     {"gpuNodeAffinity": "none", "affinity": required({"matchExpressions": [POOL]})}, "cuda",
     required({"matchExpressions": [POOL]})),
    ("own-preferred-kept-with-preferred",
     {"gpuNodeAffinity": "preferred", "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
         {"weight": 5, "preference": {"matchExpressions": [ZONE]}}]}}}, "cuda",
     {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
         {"weight": 5, "preference": {"matchExpressions": [ZONE]}},
         {"weight": 100, "preference": {"matchExpressions": GPU_EXPRS}}]}}),
    ("pod-anti-affinity-beside-gpu", {"affinity": ANTI}, "cuda", {**ANTI, **required({"matchExpressions": GPU_EXPRS})}),
]


@pytest.mark.parametrize(("case", "resources", "device", "expected"), AFFINITY_CASES, ids=[c[0] for c in AFFINITY_CASES])
def test_affinity(case: str, resources: dict[str, Any], device: str, expected: dict[str, Any] | None) -> None:
    s = spec(resources={"gpuProducts": ["NVIDIA-H200"], **resources}, kernel={"device": device})
    before = s.model_dump()
    assert placement.build_affinity(s) == expected
    assert s.model_dump() == before  # the spec's own affinity is not mutated


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
OWN = {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"}
OWN_GPU = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


#: (id, kernel device, spec.resources.tolerations, expected tolerations)
TOLERATION_CASES: list[tuple[str, str, list[dict[str, str]], list[dict[str, str]]]] = [
    ("gpu-adds-the-gpu-taint", "cuda", [], [GPU_TAINT]),
    ("gpu-keeps-own-first", "auto", [OWN], [OWN, GPU_TAINT]),
    ("own-gpu-toleration-not-doubled", "cuda", [OWN_GPU], [OWN_GPU]),
    ("cpu-only-own", "cpu", [OWN], [OWN]),
    ("cpu-none", "cpu", [], []),
]


@pytest.mark.parametrize(("case", "device", "tolerations", "expected"), TOLERATION_CASES,
                         ids=[c[0] for c in TOLERATION_CASES])
def test_tolerations(case: str, device: str, tolerations: list[dict[str, str]], expected: list[dict[str, str]]) -> None:
    s = spec(kernel={"device": device}, resources={"gpuProducts": ["NVIDIA-H200"], "tolerations": tolerations})
    assert placement.build_tolerations(s) == expected


# The cluster's defaults (benchPlacement / SPX_BENCH_PLACEMENT): each part only where the experiment sets none

ADMIN = placement.PlacementDefaults.model_validate({
    "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [POOL]}}]}},
    "gpuNodeAffinity": "none",
})

#: (id, the experiment's resources, expected: nodeSelector, toleration keys, gpuNodeAffinity, affinity kept from)
DEFAULTS_CASES: list[tuple[str, dict[str, Any], dict[str, str], list[str], str, str]] = [
    ("sets-nothing", {}, {"node.kubernetes.io/instance-type": "p5.48xlarge"}, ["dedicated"], "none", "admin"),
    ("own-node-selector", {"nodeSelector": {"kubernetes.io/hostname": "gpu-7"}}, {"kubernetes.io/hostname": "gpu-7"},
     ["dedicated"], "none", "admin"),
    ("own-tolerations", {"tolerations": [{"key": "team", "operator": "Exists"}]},
     {"node.kubernetes.io/instance-type": "p5.48xlarge"}, ["team"], "none", "admin"),
    ("own-gpu-mode", {"gpuNodeAffinity": "required"}, {"node.kubernetes.io/instance-type": "p5.48xlarge"},
     ["dedicated"], "required", "admin"),
    ("own-affinity", {"affinity": ANTI}, {"node.kubernetes.io/instance-type": "p5.48xlarge"}, ["dedicated"], "none",
     "experiment"),
]


@pytest.mark.parametrize(("case", "resources", "selector", "toleration_keys", "mode", "affinity_from"), DEFAULTS_CASES,
                         ids=[c[0] for c in DEFAULTS_CASES])
def test_cluster_defaults_fill_only_what_the_experiment_left_unset(
        case: str, resources: dict[str, Any], selector: dict[str, str], toleration_keys: list[str], mode: str,
        affinity_from: str) -> None:
    original = spec(resources=dict(resources))
    placed = placement.with_defaults(original, ADMIN)
    r = placed.resources
    assert r.node_selector == selector
    assert [t.get("key") for t in r.tolerations] == toleration_keys
    assert r.gpu_node_affinity == mode
    assert r.affinity == (ADMIN.affinity if affinity_from == "admin" else ANTI)
    assert original.resources.affinity == resources.get("affinity")  # the experiment's spec is not touched


def test_no_defaults_or_empty_ones_change_nothing() -> None:
    s = spec()
    assert placement.with_defaults(s, None) is s
    assert placement.with_defaults(s, placement.PlacementDefaults.model_validate(
        {"nodeSelector": {}, "tolerations": [], "affinity": {}, "gpuNodeAffinity": ""})) is s
