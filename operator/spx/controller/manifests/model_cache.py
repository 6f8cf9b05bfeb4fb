"""Where a serving bench pod finds the model (issue #36): a volume the cluster names, or a sized emptyDir.

The serving arms and the step A/B load the model through vLLM, which downloads it into the Hugging Face
cache (``HF_HOME``) unless ``spec.serving.modelPvc`` holds it. Unsized, that download went to the scratch
emptyDir with no ``sizeLimit`` and no ``ephemeral-storage`` request: the first pod the kubelet evicts
under DiskPressure. The operator's ``SPX_BENCH_MODEL_CACHE`` (chart: ``bench.modelCache``) says where the
cache lives instead:

- ``emptyDir`` (default): a download per run into an emptyDir with ``sizeLimit`` (default
  :data:`DEFAULT_SIZE_LIMIT`), and the container requests the same ``ephemeral-storage`` (when the
  experiment sets none), so the scheduler places it on a node with that much disk;
- ``persistentVolumeClaim`` (``claimName``) or ``hostPath`` (``path``, a node directory, e.g. a
  pre-filled cache on local NVMe): an existing cache, mounted read-only with ``HF_HUB_OFFLINE=1`` (no
  download: the pod needs no egress, which ``networkPolicy.benchEgress`` may forbid).

Experiments with ``spec.serving.modelPvc`` (the weights at ``modelPath``) and kernel-only experiments get
no cache volume.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spx.api.k8s_patterns import QUANTITY
from spx.vocabulary import SCRATCH_MOUNT

#: Mount path of the cache and ``HF_HOME`` inside the bench container: under the Job's own scratch mount
#: (a path spec.pod.volumes and serving.modelMountPath may not use, spx.vocabulary.RESERVED_MOUNT_PATHS).
MOUNT_PATH: Final = f"{SCRATCH_MOUNT}/model-cache"
VOLUME_NAME: Final = "model-cache"
#: Default ``sizeLimit`` of the emptyDir cache: above the largest public DeepSeek-V4.1 checkpoint spx knows
#: of, the FP8 conversion of DeepSeek V4.1 Flash with 772,004,202,840 bytes (719 GiB) of tensor payload
#: (huggingface.co/timur136/DeepSeek-V4.1-Flash-FP8, model card; its FP4 experts are expanded to FP8, so
#: the original checkpoint is smaller), plus room for the tokenizer, config and Hugging Face's lock files.
DEFAULT_SIZE_LIMIT: Final = "800Gi"


class ModelCache(BaseModel):
    """``SPX_BENCH_MODEL_CACHE`` (JSON, camelCase as the chart writes it): where the model cache lives.

    Raises:
        pydantic.ValidationError: a type without its field (``claimName`` for persistentVolumeClaim, ``path``
            for hostPath), a relative path, or a sizeLimit that is not a Kubernetes quantity.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    type: Literal["emptyDir", "persistentVolumeClaim", "hostPath"] = "emptyDir"
    size_limit: str = Field(default=DEFAULT_SIZE_LIMIT, alias="sizeLimit", pattern=QUANTITY, max_length=32)
    claim_name: str = Field(default="", alias="claimName", max_length=253)
    path: str = Field(default="", max_length=4096)

    @model_validator(mode="after")
    def _source_named(self) -> ModelCache:
        if self.type == "persistentVolumeClaim" and not self.claim_name:
            raise ValueError("modelCache.type persistentVolumeClaim needs modelCache.claimName (the PVC holding the cache)")
        if self.type == "hostPath" and not self.path.startswith("/"):
            raise ValueError(f"modelCache.type hostPath needs an absolute modelCache.path, got {self.path[:80]!r}")
        return self

    def volume(self) -> dict[str, Any]:
        """The pod's core/v1 Volume of the cache."""
        if self.type == "persistentVolumeClaim":
            return {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": self.claim_name, "readOnly": True}}
        if self.type == "hostPath":
            return {"name": VOLUME_NAME, "hostPath": {"path": self.path, "type": "Directory"}}
        return {"name": VOLUME_NAME, "emptyDir": {"sizeLimit": self.size_limit}}

    def mount(self) -> dict[str, Any]:
        """The container's mount: read-write for the emptyDir download, read-only for an existing cache."""
        return {"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": self.type != "emptyDir"}

    def env(self) -> list[dict[str, str]]:
        """``HF_HOME`` at the cache; ``HF_HUB_OFFLINE=1`` for an existing (read-only) cache."""
        out = [{"name": "HF_HOME", "value": MOUNT_PATH}]
        if self.type != "emptyDir":
            out.append({"name": "HF_HUB_OFFLINE", "value": "1"})
        return out

    def ephemeral_storage(self) -> str | None:
        """The ``ephemeral-storage`` the container must request for the cache (emptyDir only)."""
        return self.size_limit if self.type == "emptyDir" else None
