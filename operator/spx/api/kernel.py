"""``spec.kernel``: how the kernel microbenchmark measures (backends, device, timer, samples, execution)."""

from __future__ import annotations

from pydantic import Field

from spx.api.base import CamelModel
from spx.api.gather_model import GatherModelSpec
from spx.vocabulary import (
    GATHER_BACKEND_MEANINGS,
    GATHER_BACKENDS,
    GEMM_BACKEND_MEANINGS,
    GEMM_BACKENDS,
    Device,
    Execution,
    GatherBackend,
    GemmBackend,
    Timer,
    one_of,
)


class KernelSpec(CamelModel):
    """How the kernel microbenchmark measures (method: docs/kernel-benchmark.md "Method", from the seed PR).

    ``gemm_backend`` (docs/kernel-benchmark.md): ``humming`` and ``marlin`` are the MXFP8 W8A16 kernels
    vLLM 0.33 runs for DeepSeek-V4.1 (Humming preferred on SM90, Marlin with ``--linear-backend
    marlin``); ``auto`` picks what vLLM 0.33 would pick for this weight on this GPU (``torch-bf16`` on
    CPU); ``torch-bf16`` (cuBLAS) and ``torch-fp8`` (cuBLASLt W8A8, 128×128 blocks only) are reference
    ceilings, not vLLM's kernels; ``vllm`` builds vLLM's own linear layer.
    """

    gemm_backend: GemmBackend = Field(
        default="auto", description=f"GEMM implementation: {one_of(GEMM_BACKENDS, GEMM_BACKEND_MEANINGS)}.")
    gather: GatherBackend = Field(
        default="auto", description=f"All-gather implementation: {one_of(GATHER_BACKENDS, GATHER_BACKEND_MEANINGS)}.")
    device: Device = "auto"
    """Device to measure on: auto, cuda or cpu (cpu only proves the pipeline works)."""
    samples: int = Field(default=50, ge=5, le=10_000)
    """Timed samples per candidate and token count; the median is reported."""
    warmup: int = Field(default=5, ge=0, le=1_000)
    """Untimed calls before sampling."""
    l2_flush: bool = True
    """Flush the GPU L2 cache before every sample, so weights are read from HBM as in a model's forward pass."""
    timer: Timer = "auto"
    """Timer: auto, cupti (kernel spans from the profiler), cuda-events or host."""
    cuda_graphs: bool = True
    """Allow CUDA graphs; false times every point eagerly (as execution: eager)."""
    execution: Execution = "auto"
    """auto (default): a CUDA graph where vLLM would capture the batch size (<= maxCudagraphCaptureSize), eager above, as vLLM 0.33 runs DeepSeek-V4.1; graph or eager: every point."""
    max_cudagraph_capture_size: int | None = Field(default=None, ge=1, le=1 << 20)
    """vLLM's max_cudagraph_capture_size; unset: vLLM 0.33's rule for the GPU (min(maxNumSeqs x (1 + speculative tokens) x 2, 512) on Hopper, 1024 on SM100), with maxNumSeqs and speculative tokens read from serving.extraArgs when given."""
    gather_model: GatherModelSpec = Field(default_factory=GatherModelSpec)
    """Parameters of the modelled all-gather, used when fewer GPUs than TP are present."""
    seed: int = Field(default=0, ge=0)
    """Seed of the random inputs and weights."""
