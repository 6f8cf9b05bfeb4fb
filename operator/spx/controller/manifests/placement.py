"""Where the bench pod may run: the GPU nodes it targets (GPU Feature Discovery labels, required,
preferred or not at all), merged with the user's own ``spec.resources.affinity``, and the
tolerations of GPU nodes' taints. Pure; :func:`spx.controller.manifests.job.build_pod_spec` puts the
result into the pod. Nothing here targets GPUs when ``kernel.device`` is cpu.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator

from spx.api.base import CamelModel
from spx.api.resources import GpuNodeAffinity
from spx.api.spec import ExperimentSpec

#: The NVIDIA device plugin's extended resource (requested per TP rank), also the taint key of GPU nodes.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: GPU feature discovery's compute-capability label; Hopper is 9.x (SM90).
GPU_COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
HOPPER_COMPUTE_MAJOR = "9"
#: Weight of the GPU-label preference with ``gpuNodeAffinity: preferred`` (the largest the API allows).
PREFERRED_WEIGHT = 100


def uses_gpus(spec: ExperimentSpec) -> bool:
    """The experiment runs on GPUs (``kernel.device`` is not ``cpu``)."""
    return spec.kernel.device != "cpu"


def gpu_label_expressions(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """The GPU Feature Discovery match expressions: ``nvidia.com/gpu.product`` ∈
    ``spec.resources.gpuProducts`` and ``nvidia.com/gpu.compute.major`` = 9 (Hopper, SM90)."""
    return [
        {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(spec.resources.gpu_products)},
        {"key": GPU_COMPUTE_MAJOR_LABEL, "operator": "In", "values": [HOPPER_COMPUTE_MAJOR]},
    ]


def build_affinity(spec: ExperimentSpec) -> dict[str, Any] | None:
    """The pod's core/v1 Affinity: the user's ``spec.resources.affinity`` merged with the GPU-label
    expressions (:func:`gpu_label_expressions`) as ``spec.resources.gpuNodeAffinity`` says.

    - ``required``: every required node selector term (the user's, or one empty term) gets the GPU
      expressions added (terms are ORed, a term's expressions ANDed, so each stays a GPU node);
    - ``preferred``: a preferred term of weight 100 with the GPU expressions is appended;
    - ``none``, or ``kernel.device: cpu``: the user's affinity unchanged.

    ``None`` when the result is empty. The input is never mutated.
    """
    affinity: dict[str, Any] = json.loads(json.dumps(spec.resources.affinity or {}))
    mode = spec.resources.gpu_node_affinity
    if uses_gpus(spec) and mode != "none":
        node = affinity.setdefault("nodeAffinity", {})
        gpu = gpu_label_expressions(spec)
        if mode == "required":
            selector = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
            terms = selector.get("nodeSelectorTerms") or [{}]
            selector["nodeSelectorTerms"] = [
                {**term, "matchExpressions": [*(term.get("matchExpressions") or []), *gpu]} for term in terms
            ]
        else:
            node.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
                {"weight": PREFERRED_WEIGHT, "preference": {"matchExpressions": gpu}}
            )
    return affinity or None


def build_tolerations(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """``spec.resources.tolerations``, plus ``nvidia.com/gpu`` Exists/NoSchedule on GPU runs unless the
    user already tolerates that key (GPU nodes are commonly tainted so: GPU operator, cloud defaults)."""
    tolerations = [dict(t) for t in spec.resources.tolerations]
    if uses_gpus(spec) and not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        # GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule (GPU operator / cloud defaults).
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


class PlacementDefaults(CamelModel):
    """The cluster's default placement of bench pods (``SPX_BENCH_PLACEMENT``, JSON in camelCase; chart
    value ``benchPlacement``), each used only where the experiment sets none: a tenant on GPU pools
    without GPU Feature Discovery labels then runs without knowing the pools' labels and taints, instead
    of waiting Pending until ``Unschedulable``. Set by the cluster's admin, so not subject to the policy."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    #: Replaces the spec's default ``required`` when the experiment does not set ``gpuNodeAffinity``
    #: (``none`` on pools without GPU Feature Discovery labels).
    gpu_node_affinity: GpuNodeAffinity | None = None

    @field_validator("gpu_node_affinity", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value  # the chart's "" (keep each experiment's default)


def with_defaults(spec: ExperimentSpec, defaults: PlacementDefaults | None) -> ExperimentSpec:
    """``spec`` with the cluster's :class:`PlacementDefaults` filled in where ``spec.resources`` sets
    nothing: ``nodeSelector`` when empty, ``tolerations`` when empty, ``affinity`` when unset,
    ``gpuNodeAffinity`` when the experiment did not write it (pydantic's ``model_fields_set``). A new
    object; ``spec`` is not mutated. Used for the pod only (the policy is checked on the spec as written)."""
    if defaults is None:
        return spec
    r = spec.resources
    update: dict[str, Any] = {}
    if not r.node_selector and defaults.node_selector:
        update["node_selector"] = dict(defaults.node_selector)
    if not r.tolerations and defaults.tolerations:
        update["tolerations"] = [dict(t) for t in defaults.tolerations]
    if r.affinity is None and defaults.affinity:
        update["affinity"] = json.loads(json.dumps(defaults.affinity))
    if "gpu_node_affinity" not in r.model_fields_set and defaults.gpu_node_affinity is not None:
        update["gpu_node_affinity"] = defaults.gpu_node_affinity
    if not update:
        return spec
    return spec.model_copy(update={"resources": r.model_copy(update=update)})
