"""The CRD as the real API server takes it: installable strictly, and agreeing with ``spx validate``.

Every case goes through ``spx.api.validate_spec`` (what ``spx validate`` and the operator run) and
through the real API server (a dry-run create with ``fieldValidation=Strict``, evaluating the
structural schema and the CEL rules); the two must agree on accept/refuse. Cross-field rules that a
schema cannot say are CEL rules in the CRD (``spx.api.crd.CEL_RULES``); a case refused for such a
reason names the rule's message.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from spx.api.crd import build_crd, crd_yaml
from spx.api.loading import SpecError, validate_spec
from spx_testing.controlplane import CRD_FILE, ControlPlane, install_crd
from spx_testing.kubeapi import Api, ApiProblem

NS = "crd-table"
SERVING = {"model": "m", "startupTimeoutSeconds": 60,
           "arms": [{"name": "B1", "variant": "split"}, {"name": "A1", "variant": "main"}]}
PVC = {**SERVING, "modelPvc": "weights", "modelPath": "/models/ds"}

# (id, spec, accepted, what the server's message must contain when refused)
CASES: list[tuple[str, dict[str, Any], bool, str]] = [
    ("empty", {}, True, ""),
    ("partial-projection", {"projection": {"name": "my-proj"}}, True, ""),
    ("empty-sweep", {"sweep": {}}, True, ""),
    ("empty-serving-fields", {"serving": {"model": "m"}, "timeoutSeconds": 9600}, True, ""),
    ("bf16-unaligned", {"projection": {"weightFormat": "bf16", "hiddenSize": 1000, "outputSizes": [100]}}, True, ""),
    ("fp8-aligned", {"projection": {"hiddenSize": 1024, "outputSizes": [256, 128]}}, True, ""),
    ("mxfp8-aligned-to-32", {"projection": {"hiddenSize": 1056, "outputSizes": [1280, 544]}}, True, ""),
    ("node-selector", {"resources": {"nodeSelector": {"example.com/pool": "h200", "zone": "a"}}}, True, ""),
    ("serving-fits", {"serving": SERVING, "timeoutSeconds": 120}, True, ""),
    ("serving-pvc", {"serving": PVC, "timeoutSeconds": 120}, True, ""),
    ("serving-pvc-mount", {"serving": {**PVC, "modelMountPath": "/w/", "modelPath": "/w/ds"}, "timeoutSeconds": 120}, True, ""),
    ("accuracy-with-serving", {"serving": SERVING, "accuracy": {}, "timeoutSeconds": 120}, True, ""),
    ("split-arm-threshold", {"serving": {**SERVING, "arms": [{"name": "B1", "variant": "split", "thresholdTokens": 64},
                                                              {"name": "A1", "variant": "main"}]}, "timeoutSeconds": 120}, True, ""),
    # cross-field: CEL
    ("mxfp8-hidden-unaligned", {"projection": {"hiddenSize": 1000}}, False, "multiples of 32"),
    ("mxfp8-output-unaligned", {"projection": {"outputSizes": [1280, 100]}}, False, "multiples of 32"),
    ("fp8-hidden-unaligned", {"projection": {"weightFormat": "fp8-block128-ue8m0", "hiddenSize": 1056}}, False,
     "multiples of 128"),
    ("fp8-output-unaligned", {"projection": {"weightFormat": "fp8-block128-ue8m0", "outputSizes": [1280, 544]}},
     False, "multiples of 128"),
    ("tokens-repeat", {"sweep": {"tokens": [8, 8, 16]}}, False, "must not repeat"),
    ("tokens-unsorted", {"sweep": {"tokens": [2048, 8]}}, False, "increasing order"),
    ("accuracy-without-serving", {"accuracy": {}}, False, "set spec.serving too"),
    ("serving-timeout-short", {"serving": SERVING, "timeoutSeconds": 119}, False, "timeoutSeconds must be at least"),
    ("serving-default-timeout-short", {"serving": {"model": "m"}}, False, "timeoutSeconds must be at least"),
    ("step-servers-fit", {"serving": {**SERVING, "step": {"thresholds": [4096], "budgetSeconds": 600}},
                          "timeoutSeconds": 780}, True, ""),
    ("step-alone-fits", {"serving": {**SERVING, "points": [], "step": {"budgetSeconds": 600}},
                         "timeoutSeconds": 660}, True, ""),
    ("step-alone-short", {"serving": {**SERVING, "points": [], "step": {"budgetSeconds": 600}},
                          "timeoutSeconds": 659}, False, "timeoutSeconds must be at least"),
    ("step-thresholds-repeat", {"serving": {**SERVING, "step": {"thresholds": [4096, 4096]}}, "timeoutSeconds": 14400},
     False, "must list each threshold once"),
    ("step-servers-short", {"serving": {**SERVING, "step": {"thresholds": [4096], "budgetSeconds": 600}},
                            "timeoutSeconds": 779}, False, "timeoutSeconds must be at least"),
    ("arm-names-repeat", {"serving": {**SERVING, "arms": [{"name": "B1", "variant": "split"}, {"name": "B1", "variant": "main"}]},
                          "timeoutSeconds": 120}, False, "arm names must be unique"),
    ("arms-one-variant", {"serving": {**SERVING, "arms": [{"name": "A1", "variant": "main"}, {"name": "A2", "variant": "main"}]},
                          "timeoutSeconds": 120}, False, "one main and one split"),
    ("point-names-repeat", {"serving": {**SERVING, "points": [
        {"name": "p", "inputLen": 8, "outputLen": 1, "concurrency": 1, "numPrompts": 1, "metric": "ttft"},
        {"name": "p", "inputLen": 16, "outputLen": 1, "concurrency": 1, "numPrompts": 1, "metric": "ttft"}]},
        "timeoutSeconds": 120}, False, "point names must be unique"),
    ("main-arm-threshold", {"serving": {**SERVING, "arms": [{"name": "B1", "variant": "split"},
                                                             {"name": "A1", "variant": "main", "thresholdTokens": 64}]},
                            "timeoutSeconds": 120}, False, "main arm runs with the split off"),
    ("pvc-without-path", {"serving": {**SERVING, "modelPvc": "weights"}, "timeoutSeconds": 120}, False, "set serving.modelPath"),
    ("pvc-path-outside", {"serving": {**PVC, "modelPath": "/data/ds"}, "timeoutSeconds": 120}, False, "set serving.modelPath"),
    ("mount-reserved", {"serving": {**SERVING, "modelMountPath": "/etc/spx/models"}, "timeoutSeconds": 120}, False,
     "must not be / nor lie under"),
    ("mount-root", {"serving": {**SERVING, "modelMountPath": "/"}, "timeoutSeconds": 120}, False, "must not be / nor lie under"),
    ("env-reserved", {"serving": {**SERVING, "env": {"SPX_ARM": "x"}}, "timeoutSeconds": 120}, False, "set per arm by spx"),
    ("node-selector-bad-key", {"resources": {"nodeSelector": {"bad key!": "a"}}}, False, "nodeSelector keys must be label keys"),
    # combinations no machine can run (spx.api.combinations): every message at once, the same as spx validate's
    ("cpu-cupti-nccl-fp8", {"parallelism": {"tensorParallelSize": 2}, "kernel": {
        "device": "cpu", "timer": "cupti", "gather": "nccl", "gemmBackend": "torch-fp8"}}, False,
     "spec.kernel.timer: cupti and cuda-events time CUDA kernels"),
    ("cpu-nccl-tp2", {"parallelism": {"tensorParallelSize": 2}, "kernel": {"device": "cpu", "gather": "nccl"}}, False,
     "spec.kernel.gather: nccl gathers between CUDA GPUs"),
    ("cpu-nccl-default-tp", {"kernel": {"device": "cpu", "gather": "nccl"}}, False, "spec.kernel.gather: nccl"),
    ("cpu-nccl-tp1", {"parallelism": {"tensorParallelSize": 1}, "kernel": {"device": "cpu", "gather": "nccl"}}, True, ""),
    ("cuda-host", {"kernel": {"device": "cuda", "timer": "host"}}, False, "spec.kernel.timer: host is for CPU smoke runs"),
    ("torch-fp8-mxfp8", {"kernel": {"gemmBackend": "torch-fp8"}}, False, "spec.kernel.gemmBackend: torch-fp8"),
    ("humming-bf16", {"kernel": {"gemmBackend": "humming"}, "projection": {"weightFormat": "bf16"}}, False,
     "spec.kernel.gemmBackend: humming and marlin"),
    ("cpu-smoke", {"kernel": {"device": "cpu", "timer": "host", "gather": "gloo"}}, True, ""),
    # single fields: the structural schema
    ("samples-too-few", {"kernel": {"samples": 1}}, False, "spec.kernel.samples"),
    ("tp-not-an-integer", {"parallelism": {"tensorParallelSize": "eight"}}, False, "spec.parallelism.tensorParallelSize"),
    ("unknown-field", {"kernel": {"sampels": 5}}, False, "sampels"),
    ("node-selector-bad-value", {"resources": {"nodeSelector": {"zone": "-a"}}}, False, "nodeSelector"),
    ("node-selector-too-many", {"resources": {"nodeSelector": {f"k{i}": "v" for i in range(33)}}}, False, "nodeSelector"),
    ("timeout-too-short", {"timeoutSeconds": 59}, False, "spec.timeoutSeconds"),
]


def server_verdict(kube: Api, spec: dict[str, Any], name: str) -> tuple[bool, str]:
    body = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}
    try:
        kube.create("bench.spx.dev/v1alpha1", "shardedprojectionexperiments", NS, body,
                    params={"dryRun": "All", "fieldValidation": "Strict"})
    except ApiProblem as p:
        assert p.code in (400, 422), p
        return False, p.message
    return True, ""


@pytest.fixture(scope="module")
def ns(kube: Api) -> str:
    kube.create("v1", "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return NS


def test_crd_applies_strictly_without_warnings(kube: Api) -> None:
    warnings = install_crd(kube, yaml.safe_load(CRD_FILE.read_text()))
    assert warnings == []


def test_checked_in_crd_is_the_generated_one() -> None:
    assert CRD_FILE.read_text() == crd_yaml()
    assert (CRD_FILE.parents[1] / "charts" / "spx-operator" / "crds" / CRD_FILE.name).read_text() == crd_yaml()


@pytest.mark.parametrize(("case", "spec", "accepted", "why"), CASES, ids=[c[0] for c in CASES])
def test_spx_validate_and_the_api_server_agree(kube: Api, ns: str, case: str, spec: dict[str, Any],
                                               accepted: bool, why: str) -> None:
    try:
        validate_spec(spec)
        spx_ok, spx_msg = True, ""
    except SpecError as err:
        spx_ok, spx_msg = False, str(err)
    server_ok, server_msg = server_verdict(kube, spec, case)
    assert (spx_ok, server_ok) == (accepted, accepted), f"spx: {spx_msg or 'accepted'} | server: {server_msg or 'accepted'}"
    if not accepted:
        assert why in server_msg, server_msg
        if case == "cpu-cupti-nccl-fp8":  # every problem at once, with spx validate's messages
            for problem in spx_msg.splitlines()[1:]:
                assert problem.strip().removeprefix("- ") in server_msg, server_msg


def test_every_field_has_a_description() -> None:
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing: list[str] = []

    def walk(node: dict[str, Any], where: str) -> None:
        for name, sub in (node.get("properties") or {}).items():
            here = f"{where}.{name}"
            if not sub.get("description") and where:
                missing.append(here)
            walk(sub, here)
            if "items" in sub:
                walk(sub["items"], here + "[]")

    walk(root["properties"]["spec"], "spec")
    walk(root["properties"]["status"], "status")
    assert missing == []


def test_descriptions_name_no_file_outside_the_repository() -> None:
    text = crd_yaml()
    for bad in ("../shared", "/work/", "DESIGN.md", "NOTES.md"):
        assert bad not in text


def test_kubectl_explain_reads_the_descriptions(control_plane: ControlPlane, kube: Api) -> None:
    out = subprocess.run([control_plane.kubectl(), "--kubeconfig", str(control_plane.kubeconfig), "explain",
                          "shardedprojectionexperiment.spec.kernel", "--recursive"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "samples\t<integer>" in out and "gatherModel\t<Object>" in out
    described = subprocess.run([control_plane.kubectl(), "--kubeconfig", str(control_plane.kubeconfig), "explain",
                                "shardedprojectionexperiment.spec.kernel.samples"],
                               capture_output=True, text=True, timeout=60, check=True).stdout
    assert "DESCRIPTION:" in described and "<empty>" not in described
