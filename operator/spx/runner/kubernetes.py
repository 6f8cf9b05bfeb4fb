"""Kubernetes executor: pure builders of the bench Job and the result ConfigMap.

Nothing here talks to an API server; the controller (:mod:`spx.controller`) sends these manifests.
Everything is a deterministic function of its inputs, so a restarted operator rebuilds exactly the
same Job and an existing one is recognised by name (and owner uid).

The bench pod gets no API credentials: the experiment reaches it through the downward API (a pod
annotation projected as ``/etc/spx/experiment.json``), and results leave it through the container's
termination message (a bounded :class:`~spx.api.ResultSummary`) and its log (JSON lines of the full
:class:`~spx.api.KernelResult`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from spx.api.result import SUMMARY_MAX_BYTES
from spx.api.spec import API_VERSION, GROUP, KIND, ExperimentSpec

#: Prefix of every label/annotation key the operator owns (also kopf's finalizer/annotation prefix).
PREFIX = GROUP
LABEL_EXPERIMENT = f"{PREFIX}/experiment"
LABEL_EXPERIMENT_UID = f"{PREFIX}/experiment-uid"
LABEL_GENERATION = f"{PREFIX}/generation"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "spx-operator"
ANNOTATION_EXPERIMENT = f"{PREFIX}/experiment"
ANNOTATION_EXPERIMENT_NAME = f"{PREFIX}/experiment-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Selector of everything the operator creates (used for server-side filtered watches).
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"

CONTAINER_NAME = "bench"
EXPERIMENT_MOUNT = "/etc/spx"
EXPERIMENT_FILE = f"{EXPERIMENT_MOUNT}/experiment.json"
SCRATCH_MOUNT = "/var/run/spx"
OUT_DIR = f"{SCRATCH_MOUNT}/out"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: GPU feature discovery's compute-capability label; Hopper is 9.x (SM90).
GPU_COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
HOPPER_COMPUTE_MAJOR = "9"
DEFAULT_BENCH_COMMAND: tuple[str, ...] = ("spx", "run")

#: Kubernetes names: a Job name must be a DNS label (≤ 63) because it becomes the pods' ``job-name``
#: label value; label values are ≤ 63 characters too.
MAX_NAME = 63
#: A ConfigMap holds at most 1 MiB; keep a margin for metadata.
CONFIGMAP_BUDGET_BYTES = 1_000_000

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def _digest(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _dns_label(text: str) -> str:
    """Lower-case, ``[a-z0-9-]`` only, no leading/trailing dash."""
    return _NOT_DNS.sub("-", text.lower()).strip("-")


def _bounded(base: str, suffix: str, full: str) -> str:
    """``base + suffix`` if it fits a DNS label, else ``base[:k] + '-' + hash(full) + suffix``."""
    base = _dns_label(base) or "x"
    if len(base) + len(suffix) <= MAX_NAME and base == full:
        return base + suffix
    head = base[: MAX_NAME - len(suffix) - 9].rstrip("-") or "x"
    return f"{head}-{_digest(full)}{suffix}"


def job_name(experiment_name: str, generation: int) -> str:
    """Deterministic Job name of one run: ``<experiment>-g<generation>``, a DNS label ≤ 63 characters.

    Long (or non-DNS-label) experiment names are truncated and suffixed with a hash of the full
    name, so different experiments never share a Job name and the same one always gets the same.
    """
    return _bounded(experiment_name, f"-g{int(generation)}", experiment_name)


def result_configmap_name(experiment_name: str, generation: int) -> str:
    """Name of the ConfigMap holding the result of one run: ``<job name>-result``."""
    return f"{job_name(experiment_name, generation)}-result"


def experiment_label_value(experiment_name: str) -> str:
    """The ``bench.spx.dev/experiment`` label value: the name, or a bounded hash form if > 63 chars."""
    if len(experiment_name) <= MAX_NAME and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", experiment_name):
        return experiment_name
    return _bounded(experiment_name, "", experiment_name + "\0")


def owner_reference(experiment_name: str, uid: str) -> dict[str, Any]:
    """Controller owner reference to the experiment (garbage collection removes the child with it)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": experiment_name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def link_labels(experiment_name: str, uid: str, generation: int) -> dict[str, str]:
    """Labels put on every child (Job, pod, ConfigMap): which experiment, which incarnation, which run."""
    return {
        "app.kubernetes.io/name": "spx-bench",
        "app.kubernetes.io/component": "kernel-bench",
        "app.kubernetes.io/part-of": "spx",
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_EXPERIMENT: experiment_label_value(experiment_name),
        LABEL_EXPERIMENT_UID: uid,
        LABEL_GENERATION: str(int(generation)),
    }


def experiment_document(experiment_name: str, namespace: str, spec: ExperimentSpec) -> dict[str, Any]:
    """The experiment as ``spx run`` reads it (``/etc/spx/experiment.json`` in the pod)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": experiment_name, "namespace": namespace},
        "spec": spec.to_wire(),
    }


def _uses_gpus(spec: ExperimentSpec) -> bool:
    return spec.kernel.device != "cpu"


def _node_affinity(spec: ExperimentSpec) -> dict[str, Any] | None:
    if not _uses_gpus(spec):
        return None
    expressions = [
        {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(spec.resources.gpu_products)},
        {"key": GPU_COMPUTE_MAJOR_LABEL, "operator": "In", "values": [HOPPER_COMPUTE_MAJOR]},
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}],
            }
        }
    }


def _tolerations(spec: ExperimentSpec) -> list[dict[str, Any]]:
    tolerations = [dict(t) for t in spec.resources.tolerations]
    if _uses_gpus(spec) and not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        # GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule (GPU operator / cloud defaults).
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def bench_args(command: Sequence[str] = DEFAULT_BENCH_COMMAND, serving: bool = False) -> list[str]:
    """The container command: ``spx run /etc/spx/experiment.json --out … --summary-file … --jsonl``,
    plus ``--serving`` when the experiment has ``spec.serving`` (the vLLM serving A/B and GSM8K run
    in the same pod, on the same GPUs, after the kernel bench)."""
    return [
        *command,
        EXPERIMENT_FILE,
        "--out",
        OUT_DIR,
        "--summary-file",
        TERMINATION_MESSAGE_PATH,
        "--jsonl",
        *(["--serving"] if serving else []),
    ]


def build_job(
    experiment_name: str,
    namespace: str,
    uid: str,
    generation: int,
    spec: ExperimentSpec,
    image: str,
    *,
    command: Sequence[str] = DEFAULT_BENCH_COMMAND,
    service_account_name: str | None = None,
    shm_size: str | None = "64Gi",
    image_pull_policy: str = "IfNotPresent",
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The bench Job of one run (one generation) of an experiment, as a manifest dict.

    - name :func:`job_name`; owner reference to the experiment; :func:`link_labels` on Job and pod;
    - one pod (``parallelism = completions = 1``), ``backoffLimit: 0`` and a ``podFailurePolicy`` that
      ignores disruptions (``DisruptionTarget``: eviction, preemption, node drain) so an evicted pod is
      retried while a failing benchmark is not; ``activeDeadlineSeconds`` = ``spec.timeoutSeconds``;
    - requests = limits = ``spec.resources.cpu``/``memory`` and ``nvidia.com/gpu: <TP>`` (Guaranteed
      QoS); required node affinity on ``nvidia.com/gpu.product`` ∈
      ``spec.resources.gpuProducts`` and compute capability 9.x, the user's node selector,
      tolerations (plus ``nvidia.com/gpu`` NoSchedule) and priority class — GPU parts are left out
      when ``spec.kernel.device`` is ``cpu``;
    - ``/dev/shm`` as a memory-backed emptyDir (NCCL and torch use shared memory);
    - with ``spec.serving``: the command gets ``--serving`` (the vLLM serving A/B and GSM8K run after
      the kernel bench, in the same pod), ``serving.modelPvc`` is mounted read-only at
      ``serving.modelMountPath``; the deadline stays ``spec.timeoutSeconds``, which the spec requires
      to cover every arm's model load (:func:`spx.api.spec.min_timeout_seconds`);
    - no API credentials (``automountServiceAccountToken: false``), non-root, all capabilities
      dropped, no privilege escalation, RuntimeDefault seccomp;
    - Kueue: ``spec.scheduling.queueName`` sets ``kueue.x-k8s.io/queue-name`` and creates the Job
      suspended (Kueue unsuspends it on admission).
    """
    labels = link_labels(experiment_name, uid, generation)
    job_labels = dict(labels)
    queue = spec.scheduling.queue_name
    if queue:
        job_labels[KUEUE_QUEUE_LABEL] = queue
    annotations = {ANNOTATION_EXPERIMENT_NAME: experiment_name}
    pod_annotations = {
        **annotations,
        ANNOTATION_EXPERIMENT: json.dumps(experiment_document(experiment_name, namespace, spec), sort_keys=True),
    }

    # requests = limits: Guaranteed QoS (last to be evicted, exclusive cores under the static CPU manager).
    reserved: dict[str, str] = {"cpu": spec.resources.cpu, "memory": spec.resources.memory}
    if _uses_gpus(spec):
        reserved[GPU_RESOURCE] = str(spec.parallelism.tensor_parallel_size)
    resources: dict[str, Any] = {"limits": dict(reserved), "requests": dict(reserved)}

    env = [
        {"name": "SPX_EXPERIMENT_NAME", "value": experiment_name},
        {"name": "SPX_EXPERIMENT_NAMESPACE", "value": namespace},
        {"name": "SPX_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    env += [{"name": k, "value": v} for k, v in sorted((extra_env or {}).items())]

    shm: dict[str, Any] = {"medium": "Memory"}
    if shm_size:
        shm["sizeLimit"] = shm_size

    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": image,
                "imagePullPolicy": image_pull_policy,
                "command": bench_args(command, serving=spec.serving is not None),
                "env": env,
                "resources": resources,
                "terminationMessagePath": TERMINATION_MESSAGE_PATH,
                "terminationMessagePolicy": "File",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "experiment", "mountPath": EXPERIMENT_MOUNT, "readOnly": True},
                    {"name": "scratch", "mountPath": SCRATCH_MOUNT},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ],
            }
        ],
        "volumes": [
            {
                "name": "experiment",
                "downwardAPI": {
                    "items": [
                        {
                            "path": "experiment.json",
                            "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_EXPERIMENT}']"},
                        }
                    ]
                },
            },
            {"name": "scratch", "emptyDir": {}},
            {"name": "dshm", "emptyDir": shm},
        ],
    }
    serving = spec.serving
    if serving is not None and serving.model_pvc:
        # The weights, read-only: every arm loads the model from here (no download per arm).
        pod_spec["volumes"].append(
            {"name": "model", "persistentVolumeClaim": {"claimName": serving.model_pvc, "readOnly": True}}
        )
        pod_spec["containers"][0]["volumeMounts"].append(
            {"name": "model", "mountPath": serving.model_mount_path, "readOnly": True}
        )
    if service_account_name:
        pod_spec["serviceAccountName"] = service_account_name
    if spec.resources.node_selector:
        pod_spec["nodeSelector"] = dict(spec.resources.node_selector)
    affinity = _node_affinity(spec)
    if affinity:
        pod_spec["affinity"] = affinity
    tolerations = _tolerations(spec)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if spec.scheduling.priority_class_name:
        pod_spec["priorityClassName"] = spec.scheduling.priority_class_name

    job_spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "activeDeadlineSeconds": int(spec.timeout_seconds),
        "podFailurePolicy": {
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "NotIn", "values": [0]},
                },
            ]
        },
        "template": {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": pod_spec},
    }
    if queue:
        job_spec["suspend"] = True

    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(experiment_name, generation),
            "namespace": namespace,
            "labels": job_labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(experiment_name, uid)],
        },
        "spec": job_spec,
    }


def _fit(data: dict[str, str], binary: dict[str, str], key: str, text: str, budget: int) -> int:
    """Put ``text`` under ``key`` if it fits ``budget`` bytes; else its gzip (base64) if that fits."""
    import base64

    raw = text.encode()
    if len(raw) <= budget:
        data[key] = text
        return budget - len(raw)
    packed = base64.b64encode(gzip.compress(raw, mtime=0)).decode()
    if len(packed) <= budget:
        binary[key + ".gz"] = packed
        return budget - len(packed)
    return budget


def _truncate_middle(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    marker = f"\n… [{len(raw) - limit} bytes of the log left out to fit the ConfigMap] …\n"
    keep = max(0, limit - len(marker.encode()))
    head = raw[: keep // 4].decode(errors="ignore")
    tail = raw[len(raw) - (keep - keep // 4):].decode(errors="ignore")
    return head + marker + tail


def build_result_configmap(
    experiment_name: str,
    namespace: str,
    uid: str,
    generation: int,
    *,
    result: Mapping[str, Any] | None = None,
    termination_message: str | None = None,
    log: str | None = None,
    problems: Sequence[str] = (),
    pod_name: str | None = None,
    serving_result: Mapping[str, Any] | None = None,
    accuracy_result: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ConfigMap that keeps everything a run produced, owned by the experiment.

    Keys: ``result.json`` (the validated full :class:`~spx.api.KernelResult`, when there is one),
    ``summary.json`` (the termination message exactly as the pod wrote it), ``pod.log`` (the pod's
    log), ``problems.txt`` (what was wrong with the result, if anything). Everything must fit the
    1 MiB ConfigMap limit: the result goes gzip-compressed under ``binaryData`` (``result.json.gz``)
    when it does not fit as text; if even that is too big, its per-sample arrays are left out (the
    medians, quartiles and everything else stay) and ``problems.txt`` says so; the log is cut in the
    middle (head and tail kept) to what is left. ``serving-result.json`` and ``accuracy-result.json``
    (the vLLM benches' documents, when the run had them) come after the kernel result, gzip-compressed
    when needed, left out with a note in ``problems.txt`` when they do not fit at all.
    """
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    notes = list(problems)
    budget = CONFIGMAP_BUDGET_BYTES
    if termination_message:
        clipped = termination_message[: SUMMARY_MAX_BYTES * 4]
        data["summary.json"] = clipped
        budget -= len(clipped.encode())
    if result is not None:
        text = json.dumps(result, sort_keys=True, separators=(",", ":"))
        left = _fit(data, binary, "result.json", text, budget - 2048)
        if "result.json" not in data and "result.json.gz" not in binary:
            slim = json.loads(json.dumps(result))
            for point in slim.get("points", []):
                for cand in ("replicated", "split"):
                    if isinstance(point.get(cand), dict):
                        point[cand]["samplesUs"] = []
            notes.append("result.json: per-sample arrays (samplesUs) left out to fit the 1 MiB ConfigMap limit")
            left = _fit(data, binary, "result.json", json.dumps(slim, sort_keys=True, separators=(",", ":")), budget - 2048)
        budget = left + 2048
    for key, doc in (("serving-result.json", serving_result), ("accuracy-result.json", accuracy_result)):
        if doc is None:
            continue
        left = _fit(data, binary, key, json.dumps(doc, sort_keys=True, separators=(",", ":")), budget - 2048)
        if key not in data and key + ".gz" not in binary:
            notes.append(f"{key}: left out, too big for the 1 MiB ConfigMap (the pod log has it)")
        budget = left + 2048
    if notes:
        text = "\n".join(notes) + "\n"
        data["problems.txt"] = text
        budget -= len(text.encode())
    if log:
        data["pod.log"] = _truncate_middle(log, max(0, budget - 1024))
    labels = link_labels(experiment_name, uid, generation)
    annotations = {ANNOTATION_EXPERIMENT_NAME: experiment_name}
    if pod_name:
        annotations[f"{PREFIX}/pod"] = pod_name
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": result_configmap_name(experiment_name, generation),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(experiment_name, uid)],
        },
        "data": data,
    }
    if binary:
        manifest["binaryData"] = binary
    return manifest


def read_result_configmap(configmap: Mapping[str, Any], key: str = "result.json") -> dict[str, Any] | None:
    """A document stored by :func:`build_result_configmap` (text or gzip), or None: ``result.json``
    (the kernel's), ``serving-result.json`` or ``accuracy-result.json``."""
    import base64

    data = configmap.get("data") or {}
    if key in data:
        return json.loads(data[key])  # type: ignore[no-any-return]
    binary = configmap.get("binaryData") or {}
    if key + ".gz" in binary:
        return json.loads(gzip.decompress(base64.b64decode(binary[key + ".gz"])))  # type: ignore[no-any-return]
    return None
