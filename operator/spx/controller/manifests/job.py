"""Pure builders of the bench Job (dask-kubernetes' ``build_*_spec()`` style).

Nothing here talks to an API server; the controller's writes (:mod:`spx.controller.writes`) send
these manifests. The Job is built in layers, each a pure function of its inputs:
:func:`build_container_spec` (the bench container) → :func:`build_pod_spec` (volumes, placement,
security) → :func:`build_job_spec` (deadline, failure policy, Kueue suspension) → :func:`build_job`
(metadata, owner reference). Its names, labels and owner reference come from
:mod:`spx.controller.manifests.naming`, its placement (GPU node affinity, tolerations) from
:mod:`spx.controller.manifests.placement`; the result ConfigMap is built by :mod:`spx.controller.manifests.result_configmap`.
Everything is a deterministic function of its inputs, so a restarted operator rebuilds exactly the
same Job and an existing one is recognised by name (and owner uid).

The bench pod gets no API credentials: the experiment reaches it through the downward API (a pod
annotation projected as ``/etc/spx/experiment.json``), and results leave it through the container's
termination message (a bounded :class:`~spx.api.ResultSummary`) and its log (JSON lines of the full
:class:`~spx.api.KernelResult`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spx.api.pod import VolumeSpec
from spx.api.spec import API_VERSION, KIND, ExperimentSpec
from spx.controller.manifests import pod_security
from spx.controller.manifests.model_cache import ModelCache
from spx.controller.manifests.naming import (
    ANNOTATION_EXPERIMENT,
    ANNOTATION_EXPERIMENT_NAME,
    CONTAINER_NAME,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    job_name,
    link_labels,
    owner_reference,
)
from spx.controller.manifests.placement import (
    GPU_RESOURCE,
    PlacementDefaults,
    build_affinity,
    build_tolerations,
    uses_gpus,
    with_defaults,
)
from spx.vocabulary import EXPERIMENT_MOUNT, SCRATCH_MOUNT, SHM_MOUNT, TERMINATION_MESSAGE_PATH

EXPERIMENT_FILE = f"{EXPERIMENT_MOUNT}/experiment.json"
OUT_DIR = f"{SCRATCH_MOUNT}/out"
DEFAULT_BENCH_COMMAND: tuple[str, ...] = ("spx", "run")


def experiment_document(experiment_name: str, namespace: str, spec: ExperimentSpec) -> dict[str, Any]:
    """The experiment as ``spx run`` reads it (``/etc/spx/experiment.json`` in the pod)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": experiment_name, "namespace": namespace},
        "spec": spec.to_wire(),
    }


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


@dataclass(frozen=True)
class BenchOptions:
    """The operator's settings that shape the bench pod (:class:`~spx.controller.settings.OperatorSettings`)."""

    command: Sequence[str] = DEFAULT_BENCH_COMMAND
    service_account_name: str | None = None
    shm_size: str | None = "64Gi"
    #: Memory of a GPU bench pod whose experiment sets none (SPX_BENCH_MEMORY); None: GPU_DEFAULTS.
    memory: str | None = None
    #: Where a serving pod's model cache lives (SPX_BENCH_MODEL_CACHE, :mod:`~spx.controller.manifests.model_cache`).
    model_cache: ModelCache = field(default_factory=ModelCache)
    image_pull_policy: str = "IfNotPresent"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: The cluster's default placement (nodeSelector, tolerations, affinity, gpuNodeAffinity) where the
    #: experiment sets none (:func:`spx.controller.manifests.placement.with_defaults`).
    placement: PlacementDefaults | None = None


def needs_model_cache(spec: ExperimentSpec) -> bool:
    """A pod that loads the model through vLLM without ``serving.modelPvc``: it needs the model cache."""
    return spec.serving is not None and not spec.serving.model_pvc


def build_container_spec(experiment_name: str, namespace: str, spec: ExperimentSpec, image: str,
                         options: BenchOptions = BenchOptions()) -> dict[str, Any]:
    """The bench container: command (:func:`bench_args`), env (the operator's, then ``spec.pod.env``),
    requests = limits (Guaranteed QoS: cpu/memory/ephemeral-storage of
    :meth:`~spx.api.resources.ResourcesSpec.reserved`, which follow the device when unset, and
    ``nvidia.com/gpu: <TP>`` unless ``kernel.device`` is cpu), termination message at
    ``/dev/termination-log``, read-only root, no capabilities (:mod:`spx.controller.manifests.pod_security`),
    the experiment, scratch (also ``/tmp``) and ``/dev/shm`` mounts, ``serving.modelPvc`` read-only
    at ``serving.modelMountPath`` and each of ``spec.pod.volumes`` at its ``mountPath``."""
    sized = spec.resources.reserved(spec.kernel.device, options.shm_size, options.memory)
    reserved: dict[str, str] = {"cpu": str(sized["cpu"]), "memory": str(sized["memory"])}
    cache = options.model_cache if needs_model_cache(spec) else None
    ephemeral = sized["ephemeralStorage"] or (cache.ephemeral_storage() if cache is not None else None)
    if ephemeral:
        reserved["ephemeral-storage"] = ephemeral
    if uses_gpus(spec):
        reserved[GPU_RESOURCE] = str(spec.parallelism.tensor_parallel_size)
    env = [
        {"name": "SPX_EXPERIMENT_NAME", "value": experiment_name},
        {"name": "SPX_EXPERIMENT_NAMESPACE", "value": namespace},
        {"name": "SPX_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    env += pod_security.scratch_env()
    own = {e.name for e in spec.pod.env}
    env += [e for e in (cache.env() if cache is not None else []) if e["name"] not in own]
    env += [{"name": k, "value": v} for k, v in sorted(options.extra_env.items())]
    # the experiment's own (spec.pod.env; the operator's names are reserved there, so none repeats)
    env += [{"name": e.name, "value": e.value} for e in spec.pod.env if e.name not in options.extra_env]
    mounts = [
        {"name": "experiment", "mountPath": EXPERIMENT_MOUNT, "readOnly": True},
        *pod_security.scratch_mounts(),
        {"name": "dshm", "mountPath": SHM_MOUNT},
    ]
    if spec.serving is not None and spec.serving.model_pvc:
        mounts.append({"name": "model", "mountPath": spec.serving.model_mount_path, "readOnly": True})
    if cache is not None:
        mounts.append(cache.mount())
    for v in spec.pod.volumes:
        mounts.append({"name": v.name, "mountPath": v.mount_path, "readOnly": v.read_only,
                       **({"subPath": v.sub_path} if v.sub_path else {})})
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": options.image_pull_policy,
        "command": bench_args(options.command, serving=spec.serving is not None),
        "env": env,
        "resources": {"limits": dict(reserved), "requests": dict(reserved)},
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
        "securityContext": pod_security.container_security_context(),
        "volumeMounts": mounts,
    }


def build_pod_spec(container: Mapping[str, Any], spec: ExperimentSpec, options: BenchOptions = BenchOptions()) -> dict[str, Any]:
    """The bench pod's spec around ``container``: ``restartPolicy: Never``, no API credentials
    (``automountServiceAccountToken: false``), RuntimeDefault seccomp, the downward-API experiment
    file, scratch and memory-backed ``/dev/shm`` (NCCL and torch use shared memory; size from
    ``spec.resources.shmSize`` or the device's default), the model PVC, ``spec.pod.volumes``
    (:func:`extra_volume`); placement: the user's node selector, the affinity of
    :func:`build_affinity` (GPU labels required/preferred/none, merged with the user's),
    tolerations (plus ``nvidia.com/gpu`` NoSchedule), the priority class, ``spec.pod``'s
    runtimeClassName and schedulerName — GPU parts left out when ``kernel.device`` is cpu."""
    shm: dict[str, Any] = {"medium": "Memory"}
    shm_size = spec.resources.reserved(spec.kernel.device, options.shm_size)["shmSize"]
    if shm_size:
        shm["sizeLimit"] = shm_size
    volumes: list[dict[str, Any]] = [
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
    ]
    if spec.serving is not None and spec.serving.model_pvc:
        # The weights, read-only: every arm loads the model from here (no download per arm).
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": spec.serving.model_pvc, "readOnly": True}})
    if needs_model_cache(spec):
        volumes.append(options.model_cache.volume())
    volumes += [extra_volume(v) for v in spec.pod.volumes]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": pod_security.pod_security_context(),
        "containers": [dict(container)],
        "volumes": volumes,
    }
    if options.service_account_name:
        pod_spec["serviceAccountName"] = options.service_account_name
    placed = with_defaults(spec, options.placement)
    if placed.resources.node_selector:
        pod_spec["nodeSelector"] = dict(placed.resources.node_selector)
    affinity = build_affinity(placed)
    if affinity:
        pod_spec["affinity"] = affinity
    tolerations = build_tolerations(placed)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if spec.scheduling.priority_class_name:
        pod_spec["priorityClassName"] = spec.scheduling.priority_class_name
    if spec.pod.runtime_class_name:
        pod_spec["runtimeClassName"] = spec.pod.runtime_class_name
    if spec.pod.scheduler_name:
        pod_spec["schedulerName"] = spec.pod.scheduler_name
    return pod_spec


def extra_volume(volume: VolumeSpec) -> dict[str, Any]:
    """The core/v1 Volume of one ``spec.pod.volumes`` entry (its one source; PVCs read-only as mounted)."""
    if volume.persistent_volume_claim:
        return {"name": volume.name, "persistentVolumeClaim": {"claimName": volume.persistent_volume_claim,
                                                               "readOnly": volume.read_only}}
    if volume.config_map:
        return {"name": volume.name, "configMap": {"name": volume.config_map}}
    if volume.secret:
        return {"name": volume.name, "secret": {"secretName": volume.secret}}
    empty = volume.empty_dir.model_dump(by_alias=True, exclude_none=True) if volume.empty_dir else {}
    return {"name": volume.name, "emptyDir": {k: v for k, v in empty.items() if v != ""}}


def build_job_spec(pod_spec: Mapping[str, Any], pod_metadata: Mapping[str, Any], spec: ExperimentSpec) -> dict[str, Any]:
    """The Job's spec: one pod (``parallelism = completions = 1``), ``backoffLimit: 0`` and a
    ``podFailurePolicy`` that ignores disruptions (``DisruptionTarget``: eviction, preemption, node
    drain) so an evicted pod is retried while a failing benchmark is not;
    ``activeDeadlineSeconds`` = ``spec.timeoutSeconds`` (with ``spec.serving`` it must cover every
    arm's model load, :func:`spx.api.spec.min_timeout_seconds`); suspended when
    ``spec.scheduling.queueName`` is set (Kueue unsuspends it on admission)."""
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
        "template": {"metadata": dict(pod_metadata), "spec": dict(pod_spec)},
    }
    if spec.scheduling.queue_name:
        job_spec["suspend"] = True
    return job_spec


def build_job(
    experiment_name: str,
    namespace: str,
    uid: str,
    generation: int,
    spec: ExperimentSpec,
    image: str,
    options: BenchOptions = BenchOptions(),
) -> dict[str, Any]:
    """The bench Job of one run (one generation) of an experiment, as a manifest dict.

    Name :func:`job_name`; owner reference to the experiment; :func:`link_labels` on Job and pod
    (plus ``kueue.x-k8s.io/queue-name`` on the Job with ``spec.scheduling.queueName``); the pod
    annotation the experiment file is projected from; the spec of :func:`build_job_spec` around
    :func:`build_pod_spec` around :func:`build_container_spec`.
    """
    labels = link_labels(experiment_name, uid, generation)
    job_labels = dict(labels)
    if spec.scheduling.queue_name:
        job_labels[KUEUE_QUEUE_LABEL] = spec.scheduling.queue_name
    if spec.scheduling.workload_priority_class_name:
        job_labels[KUEUE_PRIORITY_LABEL] = spec.scheduling.workload_priority_class_name
    annotations = {ANNOTATION_EXPERIMENT_NAME: experiment_name}
    pod_metadata = {
        # the experiment's labels and annotations first: the operator's keys are reserved (spx.api.pod)
        "labels": {**spec.pod.labels, **labels},
        "annotations": {
            **spec.pod.annotations,
            **annotations,
            ANNOTATION_EXPERIMENT: json.dumps(experiment_document(experiment_name, namespace, spec), sort_keys=True),
        },
    }
    container = build_container_spec(experiment_name, namespace, spec, image, options)
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
        "spec": build_job_spec(build_pod_spec(container, spec, options), pod_metadata, spec),
    }
