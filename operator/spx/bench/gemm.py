"""GEMM backends of the projection ``Y[M, N] = X[M, K] · Wᵀ`` (W in the checkpoint's FP8 block format).

- ``torch-bf16``: W dequantised once to the activation dtype, ``torch.nn.functional.linear``
  (cuBLAS on GPUs, the CPU BLAS on CPU). What a deployment without FP8 kernels would run.
- ``torch-fp8``: native FP8: X quantised per token in 1×128 groups (UE8M0 scales, as DeepSeek's
  activation quantisation; one fused Triton kernel, :mod:`spx.bench.fp8_quant`), then
  ``torch._scaled_mm`` with blockwise scales (1×128 for X, 128×128 for W; torch ≥ 2.9 on SM90,
  cuBLASLt). The quantisation is part of the timed call, as in vLLM.
- ``vllm``: vLLM's own ``MergedColumnParallelLinear`` with DeepSeek-V4's FP8 block config, built in
  :mod:`spx.bench.vllm_backend` (needs an importable vLLM).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from spx.api.spec import ExperimentSpec

if TYPE_CHECKING:
    import torch

    from spx.bench.weights import Fp8BlockWeight

Projection = Callable[["torch.Tensor"], "torch.Tensor"]

DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def activation_dtype(spec: ExperimentSpec) -> torch.dtype:
    """The torch dtype of ``spec.projection.activationDtype``."""
    import torch

    dtype: torch.dtype = getattr(torch, DTYPES[spec.projection.activation_dtype])
    return dtype


def resolve_gemm_backend(spec: ExperimentSpec, device: torch.device) -> str:
    """``auto`` → ``torch-fp8`` on SM90+ GPUs with an FP8 weight format, else ``torch-bf16``.

    Raises:
        ValueError: ``torch-fp8`` asked for on CPU, on a GPU below SM89, or with ``weightFormat: bf16``.
    """
    import torch

    backend = spec.kernel.gemm_backend
    fp8_weights = spec.projection.weight_format == "fp8-block128-ue8m0"
    fp8_gpu = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)
    if backend == "auto":
        return "torch-fp8" if fp8_weights and fp8_gpu else "torch-bf16"
    if backend == "torch-fp8" and not (fp8_weights and fp8_gpu):
        raise ValueError(
            "spec.kernel.gemmBackend: torch-fp8 needs weightFormat fp8-block128-ue8m0 and a CUDA GPU of "
            f"compute capability ≥ 9.0 (device is {device}); use gemmBackend torch-bf16 or auto"
        )
    return backend


def build_projection(
    backend: str, weight: Fp8BlockWeight, spec: ExperimentSpec, device: torch.device
) -> Projection:
    """A callable ``x[M, K] (activation dtype) -> y[M, N] (activation dtype)`` for ``backend``.

    Raises:
        RuntimeError: ``vllm`` without an importable vLLM (from :func:`spx.bench.vllm_backend.ensure_vllm`).
        ValueError: an unknown backend.
    """
    import torch

    dtype = activation_dtype(spec)
    if backend == "torch-bf16":
        w = weight.dequantize(dtype).to(device)

        def linear(x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.linear(x, w)

        return linear
    if backend == "torch-fp8":
        from spx.bench.fp8_quant import quantize_activation_1x128_fused

        w_t = weight.weight.to(device).t()  # [K, N], column-major: what _scaled_mm wants for B
        scale_b = weight.scale.to(device).t()  # [K/128, N/128], stride (1, K/128)

        def scaled_mm(x: torch.Tensor) -> torch.Tensor:
            xq, scale_a = quantize_activation_1x128_fused(x)  # rows padded to a multiple of 16
            out: torch.Tensor = torch._scaled_mm(xq, w_t, scale_a, scale_b, out_dtype=dtype)
            return out[: x.shape[0]]

        return scaled_mm
    if backend == "vllm":
        from spx.bench import vllm_backend

        vllm_backend.ensure_vllm()
        return vllm_backend.build_vllm_projection(spec, device, weight)
    raise ValueError(f"spec.kernel.gemmBackend: unknown backend {backend!r}")
