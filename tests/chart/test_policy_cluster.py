"""The experiment policy, twice: spx.api.policy.check_policy (what the operator enforces) and the
chart's ValidatingAdmissionPolicy on a real API server — one table through both, so the two never
disagree on what is refused and by which rule.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from spx.api.policy import Policy, check_policy
from spx_testing.chart_cluster import Cluster
from spx_testing.chartlib import CHART, CRD_NAME, installable_crd, render_docs

DIGEST = "sha256:" + "a" * 64
POLICY_VALUES: dict[str, Any] = {
    "imageRegistries": ["ghcr.io/spx-dev/"],
    "imageDigests": [DIGEST],
    "requireImageDigest": False,
    "priorityClasses": ["spx-bench"],
    "tolerations": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
    "nodeSelectorKeys": ["kubernetes.io/hostname"],
    "envNames": ["NCCL_*", "OMP_NUM_THREADS"],
    "servingExtraArgs": ["--max-model-len", "--enforce-eager"],
    "servingModels": ["deepseek-ai/*"],
    "volumeTypes": ["persistentVolumeClaim", "emptyDir"],
    "volumeClaims": ["models", "datasets-*"],
    "runtimeClasses": ["nvidia"],
    "schedulerNames": [],
    "podLabelKeys": ["cost-center"],
    "podAnnotationKeys": ["sidecar.istio.io/inject"],
    "allowAffinity": False,
}
SERVING = {"model": "deepseek-ai/DeepSeek-V4.1", "points": []}
#: a serving spec the CRD accepts: its deadline covers the default arms' model loads
SERVING_TIMEOUT = 4 * 2400
WATCHED, UNWATCHED = "policy-team", "policy-other"

#: (id, spec, the rules check_policy must name — the first is the one the API server's message names)
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("defaults", {}, []),
    ("own-registry", {"image": "ghcr.io/spx-dev/spx-bench:0.1.0"}, []),
    ("other-registry", {"image": "docker.io/someone/miner:latest"}, ["policy.imageRegistries"]),
    ("prefix-lookalike", {"image": "ghcr.io/spx-dev-evil/spx-bench:0.1.0"}, ["policy.imageRegistries"]),
    ("allowed-digest", {"image": f"quay.io/team/bench@{DIGEST}"}, []),
    ("other-digest", {"image": "quay.io/team/bench@sha256:" + "b" * 64}, ["policy.imageRegistries"]),
    ("allowed-priority", {"scheduling": {"priorityClassName": "spx-bench"}}, []),
    ("other-priority", {"scheduling": {"priorityClassName": "system-node-critical"}}, ["policy.priorityClasses"]),
    ("allowed-toleration",
     {"resources": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}}, []),
    ("tolerate-everything", {"resources": {"tolerations": [{"operator": "Exists"}]}}, ["policy.tolerations"]),
    ("other-toleration-value",
     {"resources": {"tolerations": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}},
     ["policy.tolerations"]),
    ("allowed-node-selector", {"resources": {"nodeSelector": {"kubernetes.io/hostname": "gpu-7"}}}, []),
    ("control-plane-node",
     {"resources": {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}}, ["policy.nodeSelectorKeys"]),
    ("several",
     {"image": "docker.io/x/y:1", "scheduling": {"priorityClassName": "system-cluster-critical"}},
     ["policy.imageRegistries", "policy.priorityClasses"]),
    # what runs in the pod
    ("nccl-env", {"pod": {"env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}]}}, []),
    ("ld-preload", {"pod": {"env": [{"name": "LD_PRELOAD", "value": "/x.so"}]}}, ["policy.envNames"]),
    ("serving-ld-preload", {"serving": {**SERVING, "env": {"LD_PRELOAD": "/x.so"}}, "timeoutSeconds": SERVING_TIMEOUT},
     ["policy.envNames"]),
    ("allowed-args", {"serving": {**SERVING, "extraArgs": ["--max-model-len", "8192", "--enforce-eager"]},
                      "timeoutSeconds": SERVING_TIMEOUT}, []),
    ("trust-remote-code", {"serving": {**SERVING, "extraArgs": ["--trust-remote-code"]}, "timeoutSeconds": SERVING_TIMEOUT},
     ["policy.servingExtraArgs"]),
    ("arg-with-equals", {"serving": {**SERVING, "extraBenchArgs": ["--tokenizer-mode=custom"]},
                         "timeoutSeconds": SERVING_TIMEOUT}, ["policy.servingExtraArgs"]),
    ("other-model", {"serving": {**SERVING, "model": "someone/backdoored"}, "timeoutSeconds": SERVING_TIMEOUT},
     ["policy.servingModels"]),
    ("allowed-volumes", {"pod": {"volumes": [{"name": "m", "mountPath": "/m", "persistentVolumeClaim": "datasets-a"},
                                             {"name": "c", "mountPath": "/c", "emptyDir": {}}]}}, []),
    ("secret-volume", {"pod": {"volumes": [{"name": "s", "mountPath": "/s", "secret": "creds"}]}}, ["policy.volumeTypes"]),
    ("other-claim", {"pod": {"volumes": [{"name": "m", "mountPath": "/m", "persistentVolumeClaim": "finance"}]}},
     ["policy.volumeClaims"]),
    ("other-model-pvc", {"serving": {**SERVING, "modelPvc": "finance", "modelPath": "/models/ds"}, "timeoutSeconds": SERVING_TIMEOUT},
     ["policy.volumeClaims"]),
    ("runtime-class", {"pod": {"runtimeClassName": "nvidia"}}, []),
    ("other-runtime-class", {"pod": {"runtimeClassName": "kata"}}, ["policy.runtimeClasses"]),
    ("scheduler", {"pod": {"schedulerName": "volcano"}}, ["policy.schedulerNames"]),
    ("labels", {"pod": {"labels": {"cost-center": "ml"}, "annotations": {"sidecar.istio.io/inject": "false"}}}, []),
    ("other-label", {"pod": {"labels": {"team": "x"}}}, ["policy.podLabelKeys"]),
    ("other-annotation", {"pod": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}},
     ["policy.podAnnotationKeys"]),
    ("own-affinity", {"resources": {"affinity": {"podAntiAffinity": {}}}}, ["policy.allowAffinity"]),
    ("gpu-affinity-modes", {"resources": {"gpuNodeAffinity": "none"}}, []),
]


def _experiment(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.mark.parametrize(("case", "spec", "rules"), CASES, ids=[c[0] for c in CASES])
def test_check_policy_names_the_rules(case: str, spec: dict[str, Any], rules: list[str]) -> None:
    policy = Policy.model_validate(POLICY_VALUES, by_alias=True, by_name=False)
    assert [v.rule for v in check_policy(spec, policy)] == rules


@pytest.fixture(scope="module")
def admission(cluster: Cluster, chart: Any) -> Cluster:
    for ns in (WATCHED, UNWATCHED, "spx-system"):
        cluster.kubectl("create", "namespace", ns, check=False)
    crd = installable_crd(yaml.safe_load((CHART / "crds" / "shardedprojectionexperiments.yaml").read_text()))
    cluster.apply([crd], server_side=True)
    cluster.wait_established(CRD_NAME)
    docs = render_docs(chart, {"policy": POLICY_VALUES, "admissionPolicy": {"enabled": True},
                               "watch": {"namespaces": [WATCHED]}})
    cluster.apply([d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")])
    # The API server type-checks and loads a new policy asynchronously: wait until it refuses.
    probe = _experiment("probe", WATCHED, {"image": "docker.io/probe/probe:1"})
    deadline = time.monotonic() + 90
    while True:
        proc = cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(probe), check=False)
        if proc.returncode != 0 and "policy.imageRegistries" in proc.stderr:
            break
        cluster.kubectl("delete", "spx", "probe", "-n", WATCHED, "--ignore-not-found", check=False)
        assert time.monotonic() < deadline, f"the ValidatingAdmissionPolicy never took effect: {proc.stderr}"
        time.sleep(0.5)
    policy = cluster.get_json("validatingadmissionpolicy", "spx-spx-operator-experiments")
    warnings = (policy.get("status") or {}).get("typeChecking", {}).get("expressionWarnings") or []
    assert not warnings, f"CEL type-checking warnings: {warnings}"
    return cluster


@pytest.mark.parametrize(("case", "spec", "rules"), CASES, ids=[c[0] for c in CASES])
def test_the_admission_policy_refuses_what_check_policy_refuses(
        admission: Cluster, case: str, spec: dict[str, Any], rules: list[str]) -> None:
    exp = _experiment(f"p-{case}", WATCHED, spec)
    proc = admission.kubectl("create", "-f", "-", stdin=yaml.safe_dump(exp), check=False)
    if rules:
        assert proc.returncode != 0, f"{case}: the API server accepted what check_policy refuses ({rules})"
        assert "ValidatingAdmissionPolicy" in proc.stderr and rules[0] in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, f"{case}: refused but check_policy allows it: {proc.stderr}"
    # outside the watched namespaces the binding does not apply (the operator does not run them)
    exp["metadata"]["namespace"] = UNWATCHED
    other = admission.kubectl("create", "-f", "-", stdin=yaml.safe_dump(exp), check=False)
    assert other.returncode == 0, other.stderr


def test_status_writes_are_not_subject_to_the_policy(admission: Cluster) -> None:
    """The operator's /status patches of an experiment created before the policy tightened still work."""
    exp = _experiment("status-ok", WATCHED, {})
    admission.kubectl("create", "-f", "-", stdin=yaml.safe_dump(exp))
    admission.kubectl("patch", "spx", "status-ok", "-n", WATCHED, "--subresource=status", "--type=merge",
                      "-p", '{"status": {"phase": "Pending"}}')
    assert admission.get_json("spx", "status-ok", "-n", WATCHED)["status"]["phase"] == "Pending"
