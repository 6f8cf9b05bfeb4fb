"""spx.controller.manifests.job: the bench Job is a pure, deterministic manifest (its names: test_naming; its
placement: test_placement; the pod's pass-through of spec.pod/resources: test_job_pod)."""

from __future__ import annotations

import pytest

from spx.api import ExperimentSpec, load_experiment, validate_spec
from spx.controller.manifests import job as k8s
from spx.controller.manifests import naming

UID = "0b7e3c1e-5f0a-4c4e-9a55-1d2f3e4a5b6c"
KUBE_VERSION = "1.30"  # oldest Kubernetes the chart supports


def spec(**overrides: object) -> ExperimentSpec:
    return validate_spec(overrides)


def job(s: ExperimentSpec | None = None, **kw: object) -> dict:
    return k8s.build_job("ds-v41-h200", "bench", UID, 3, s or spec(), "registry.example/spx-bench:1",
                         k8s.BenchOptions(**kw))  # type: ignore[arg-type]


# The Job ----------------------------------------------------------------------------------------------


def test_job_has_owner_labels_and_deterministic_content() -> None:
    j = job()
    assert j == job()  # pure: same inputs, same manifest
    meta = j["metadata"]
    assert meta["name"] == "ds-v41-h200-g3" and meta["namespace"] == "bench"
    assert meta["ownerReferences"] == [{
        "apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment", "name": "ds-v41-h200",
        "uid": UID, "controller": True, "blockOwnerDeletion": True,
    }]
    for labels in (meta["labels"], j["spec"]["template"]["metadata"]["labels"]):
        assert labels[naming.LABEL_EXPERIMENT] == "ds-v41-h200"
        assert labels[naming.LABEL_EXPERIMENT_UID] == UID
        assert labels[naming.LABEL_GENERATION] == "3"
        assert labels[naming.LABEL_MANAGED_BY] == naming.MANAGED_BY


def test_job_runs_one_pod_no_retries_except_disruptions_and_a_deadline() -> None:
    s = spec(timeoutSeconds=5400)
    js = job(s)["spec"]
    assert js["backoffLimit"] == 0 and js["parallelism"] == 1 and js["completions"] == 1
    assert js["activeDeadlineSeconds"] == 5400
    rules = js["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"]["containerName"] == naming.CONTAINER_NAME
    assert js["template"]["spec"]["restartPolicy"] == "Never"  # required by podFailurePolicy
    assert "suspend" not in js


def test_gpus_affinity_selector_tolerations_priority() -> None:
    s = spec(
        parallelism={"tensorParallelSize": 8},
        resources={"gpuProducts": ["NVIDIA-H200"], "nodeSelector": {"pool": "h200"},
                   "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"}]},
        scheduling={"priorityClassName": "bench-high"},
    )
    pod = job(s)["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "32", "memory": "192Gi", "nvidia.com/gpu": "8"}
    assert c["resources"]["requests"] == c["resources"]["limits"]  # Guaranteed QoS
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    exprs = {e["key"]: e for e in terms[0]["matchExpressions"]}
    assert exprs["nvidia.com/gpu.product"] == {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]}
    assert exprs["nvidia.com/gpu.compute.major"]["values"] == ["9"]
    assert pod["nodeSelector"] == {"pool": "h200"}
    assert {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["priorityClassName"] == "bench-high"


def test_cpu_device_asks_for_no_gpu() -> None:
    pod = job(spec(kernel={"device": "cpu"}, parallelism={"tensorParallelSize": 2}))["spec"]["template"]["spec"]
    reserved = {"cpu": "2", "memory": "4Gi"}  # a CPU smoke run asks for what its 2 gloo ranks need
    assert pod["containers"][0]["resources"] == {"limits": reserved, "requests": reserved}
    assert "affinity" not in pod and "tolerations" not in pod
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}


def test_cpu_and_memory_from_the_spec_requests_equal_limits() -> None:
    s = spec(parallelism={"tensorParallelSize": 4}, resources={"cpu": "48", "memory": "256Gi"})
    res = job(s)["spec"]["template"]["spec"]["containers"][0]["resources"]
    expected = {"cpu": "48", "memory": "256Gi", "nvidia.com/gpu": "4"}
    assert res["limits"] == expected and res["requests"] == expected
    assert res["limits"] is not res["requests"]  # two dicts: a mutation of one does not leak into the other


def test_pod_has_no_credentials_and_a_locked_down_container() -> None:
    pod = job()["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = pod["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["privileged"] is False


def test_shm_is_memory_backed_and_results_leave_by_termination_message() -> None:
    pod = job()["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert vols[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    c = pod["containers"][0]
    assert c["terminationMessagePath"] == "/dev/termination-log" and c["terminationMessagePolicy"] == "File"
    assert c["command"] == ["spx", "run", "/etc/spx/experiment.json", "--out", "/var/run/spx/out",
                            "--summary-file", "/dev/termination-log", "--jsonl"]


def test_experiment_reaches_the_pod_through_the_downward_api() -> None:
    s = spec(sweep={"tokens": [6, 96, 4096]}, gate={"thresholdTokens": 1024})
    j = job(s)
    tmpl = j["spec"]["template"]
    vol = next(v for v in tmpl["spec"]["volumes"] if v["name"] == "experiment")
    field = vol["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
    assert field == f"metadata.annotations['{naming.ANNOTATION_EXPERIMENT}']"
    doc = tmpl["metadata"]["annotations"][naming.ANNOTATION_EXPERIMENT]
    exp = load_experiment(doc)  # what `spx run /etc/spx/experiment.json` reads
    assert exp.spec == s and exp.metadata.name == "ds-v41-h200"


def test_kueue_queue_label_and_suspended_job() -> None:
    j = job(spec(scheduling={"queueName": "gpu-queue"}))
    assert j["metadata"]["labels"][naming.KUEUE_QUEUE_LABEL] == "gpu-queue"
    assert j["spec"]["suspend"] is True
    assert naming.KUEUE_QUEUE_LABEL not in j["spec"]["template"]["metadata"]["labels"]


def test_operator_settings_reach_the_pod() -> None:
    j = job(service_account_name="bench", shm_size=None, image_pull_policy="Always", command=("python", "-m", "spx.cli", "run"),
            extra_env={"NCCL_DEBUG": "INFO"})
    pod = j["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["serviceAccountName"] == "bench" and pod["automountServiceAccountToken"] is False
    assert c["imagePullPolicy"] == "Always" and c["command"][:4] == ["python", "-m", "spx.cli", "run"]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in c["env"]
    assert "sizeLimit" not in next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]


@pytest.mark.parametrize("overrides", [
    {},
    {"kernel": {"device": "cpu"}, "parallelism": {"tensorParallelSize": 2}},
    {"scheduling": {"queueName": "q", "priorityClassName": "p"},
     "resources": {"nodeSelector": {"a": "b"}, "tolerations": [{"key": "k", "operator": "Exists"}]}},
    # every pass-through field of spec.pod and the placement/sizing fields of spec.resources
    {"scheduling": {"queueName": "q", "workloadPriorityClassName": "high"},
     "resources": {"gpuNodeAffinity": "preferred", "ephemeralStorage": "50Gi", "shmSize": "32Gi",
                   "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                       {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}},
     "pod": {"runtimeClassName": "nvidia", "schedulerName": "volcano", "labels": {"cost-center": "ml"},
             "annotations": {"sidecar.istio.io/inject": "false"}, "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}],
             "volumes": [{"name": "data", "mountPath": "/data", "persistentVolumeClaim": "datasets"},
                         {"name": "topo", "mountPath": "/opt/topo", "configMap": "topo", "subPath": "topo.xml"},
                         {"name": "creds", "mountPath": "/creds", "secret": "creds"},
                         {"name": "cache", "mountPath": "/cache", "readOnly": False,
                          "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]}},
])
def test_job_is_a_valid_kubernetes_object(overrides: dict) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(job(spec(**overrides)), KUBE_VERSION, strict=True)


# spec.serving.modelMountPath -------------------------------------------------------------------------


SERVING = {"model": "deepseek-ai/DeepSeek-V4.1", "modelPvc": "weights"}


def test_reserved_mount_paths_are_the_jobs_own_mounts() -> None:
    from spx.api.serving import RESERVED_MOUNT_PATHS

    pod = job(spec(serving={**SERVING, "modelPath": "/models/m"}, timeoutSeconds=14400))["spec"]["template"]["spec"]
    own = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] != "model"}
    assert own | {k8s.TERMINATION_MESSAGE_PATH} == set(RESERVED_MOUNT_PATHS)


@pytest.mark.parametrize("path", ["/", "//", "/dev/shm", "/dev/shm/", "/dev/shm/models", "/etc/spx", "/etc/spx/m",
                                  "/var/run/spx", "/var/run/spx/out", "/models/../etc/spx", "/dev/termination-log"])
def test_model_mount_path_may_not_collide_with_the_jobs_mounts(path: str) -> None:
    from spx.api import SpecError

    with pytest.raises(SpecError) as err:
        validate_spec({"serving": {**SERVING, "modelMountPath": path}, "timeoutSeconds": 14400})
    assert "spec.serving.modelMountPath" in str(err.value)


@pytest.mark.parametrize("path", ["/models", "/dev/shmx", "/etc/spx-models", "/var/run/spxm", "/mnt/weights"])
def test_model_mount_path_elsewhere_is_fine(path: str) -> None:
    s = spec(serving={**SERVING, "modelMountPath": path, "modelPath": f"{path}/m"}, timeoutSeconds=14400)
    mounts = job(s)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "model", "mountPath": path, "readOnly": True} in mounts
