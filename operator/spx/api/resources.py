"""``spec.resources``: where the bench pod may run (GPU node labels, affinity) and what it reserves."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field, field_validator

from spx.api.base import CamelModel
from spx.api.k8s_patterns import LABEL_KEY, LABEL_VALUE, QUANTITY, LabelValue

#: How the bench pod targets GPU nodes by the GPU Feature Discovery labels ``nvidia.com/gpu.product``
#: ∈ ``gpuProducts`` and ``nvidia.com/gpu.compute.major`` = 9: ``required`` (a node without them never
#: runs the pod), ``preferred`` (such nodes first, any GPU node otherwise) or ``none`` (no GPU-label
#: affinity: pools without GFD, e.g. many managed clusters; ``nvidia.com/gpu`` requests still place it).
GpuNodeAffinity = Literal["required", "preferred", "none"]
#: Keys of a core/v1 ``Affinity``.
AFFINITY_KEYS: Final = ("nodeAffinity", "podAffinity", "podAntiAffinity")

#: What a GPU run reserves when ``resources.cpu``/``memory``/``shmSize`` are unset: an 8-GPU H200
#: node's share for one TP8 run (the vLLM serving arms load DeepSeek-V4.1 through host memory).
GPU_DEFAULTS: Final = {"cpu": "32", "memory": "192Gi"}
#: What a CPU smoke run (``kernel.device: cpu``) reserves when unset: ``spx run`` starts 2 gloo ranks
#: on CPU (``spx.runner.sizing.default_nproc``), each ~400 MiB resident
#: (``spx.runner.sizing.RANK_BASE_BYTES``) plus its tensors; 1 Gi of ``/dev/shm`` for gloo.
CPU_DEFAULTS: Final = {"cpu": "2", "memory": "4Gi", "shmSize": "1Gi"}


class ResourcesSpec(CamelModel):
    """Where the bench pod may run and what it reserves (Kubernetes only; ignored by ``spx run``).

    ``gpu_products`` are values of the ``nvidia.com/gpu.product`` node label (GPU Feature Discovery
    spelling, e.g. ``NVIDIA-H200``), used as ``gpu_node_affinity`` says (:data:`GpuNodeAffinity`;
    pools without GFD labels: ``preferred`` or ``none``). ``affinity`` is the user's own core/v1
    Affinity, merged with the GPU-label one: its required node selector terms each get the GPU
    expressions added (``required``), its preferred terms one more (``preferred``), nothing (``none``).
    ``cpu``/``memory`` are the bench container's requests (= limits, Guaranteed QoS so it is not
    evicted first and gets exclusive cores under the static CPU manager); unset, they follow the
    experiment (:data:`GPU_DEFAULTS`, :data:`CPU_DEFAULTS` for ``kernel.device: cpu``). The
    memory-backed ``/dev/shm`` (``shm_size``) counts against ``memory``.
    """

    gpu_products: list[LabelValue] = Field(
        default_factory=lambda: ["NVIDIA-H200", "NVIDIA-H100-80GB-HBM3"], min_length=1, max_length=16
    )
    """Allowed values of the nvidia.com/gpu.product node label (GPU Feature Discovery spelling, e.g. NVIDIA-H200)."""
    gpu_node_affinity: GpuNodeAffinity = "required"
    """How the GPU Feature Discovery labels place the pod: required (default), preferred, or none (GPU pools without GFD labels)."""
    affinity: dict[str, Any] | None = None
    """The user's own core/v1 Affinity (nodeAffinity, podAffinity, podAntiAffinity), merged with the GPU-label affinity of gpuNodeAffinity."""
    node_selector: dict[Annotated[str, Field(max_length=253, pattern=LABEL_KEY)], Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=32
    )
    """Extra node labels the bench pod requires (label keys and values; at most 32)."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=32)
    """Tolerations of the bench pod (core/v1 Toleration objects); nvidia.com/gpu NoSchedule is added for GPU runs."""
    cpu: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """CPU request = limit of the bench container (a quantity, e.g. 32 or 500m); unset: 32 for GPU runs, 2 for kernel.device cpu."""
    memory: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """Memory request = limit of the bench container (e.g. 192Gi; /dev/shm counts against it); unset: 192Gi for GPU runs, 4Gi for kernel.device cpu."""
    shm_size: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """Size limit of the memory-backed /dev/shm; unset: the operator's SPX_BENCH_SHM_SIZE (64Gi) for GPU runs, 1Gi for kernel.device cpu."""
    ephemeral_storage: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """ephemeral-storage request = limit of the bench container (scratch, caches, /tmp), e.g. 50Gi; unset: none."""

    @field_validator("affinity")
    @classmethod
    def _affinity_shape(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        unknown = sorted(set(v) - set(AFFINITY_KEYS))
        if unknown:
            raise ValueError(f"affinity keys {unknown[:4]} are unknown; a core/v1 Affinity has {', '.join(AFFINITY_KEYS)}")
        bad = [k for k, x in v.items() if not isinstance(x, dict)]
        if bad:
            raise ValueError(f"affinity.{bad[0]} must be an object (a core/v1 {bad[0][0].upper() + bad[0][1:]})")
        return v

    def reserved(self, device: str, default_shm: str | None, default_memory: str | None = None) -> dict[str, str | None]:
        """``{"cpu", "memory", "shmSize", "ephemeralStorage"}`` the bench pod gets on ``device``
        (``kernel.device``: cpu or another): the fields where set, else :data:`CPU_DEFAULTS` (cpu) or
        :data:`GPU_DEFAULTS`, ``default_shm`` (the operator's ``SPX_BENCH_SHM_SIZE``) and ``default_memory``
        (its ``SPX_BENCH_MEMORY``; None: GPU_DEFAULTS')."""
        defaults: dict[str, str | None] = dict(CPU_DEFAULTS) if device == "cpu" else {
            **GPU_DEFAULTS, "shmSize": default_shm, **({"memory": default_memory} if default_memory else {})}
        return {
            "cpu": self.cpu or defaults["cpu"],
            "memory": self.memory or defaults["memory"],
            "shmSize": self.shm_size or defaults["shmSize"],
            "ephemeralStorage": self.ephemeral_storage,
        }
