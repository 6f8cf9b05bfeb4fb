"""The cuBLAS reference ceilings: ``torch-bf16`` and ``torch-fp8`` (not what vLLM runs for DeepSeek-V4.1).

- ``torch-bf16``: W dequantised once to the activation dtype, ``torch.nn.functional.linear``
  (cuBLAS on GPUs, the CPU BLAS on CPU).
- ``torch-fp8``: W8A8: X quantised per token in 1×128 groups (UE8M0 scales; one fused Triton kernel,
  :mod:`spx.bench.gemm.fp8_quant`), then ``torch._scaled_mm`` with blockwise scales (1×128 for X, 128×128
  for W; cuBLASLt, torch ≥ 2.9 on SM90). cuBLASLt's blockwise scaling takes only 1×128 / 128×128
  scale blocks, so ``torch-fp8`` refuses 32×32-block (MXFP8) weights instead of changing their format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spx.api.spec import ExperimentSpec
from spx.bench.gemm.projection import activation_dtype
from spx.bench.gemm.record import GemmKernel
from spx.vocabulary import BF16, FP8_BLOCK128, MXFP8

if TYPE_CHECKING:
    import torch

    from spx.bench.gemm.projection import Projection
    from spx.bench.weights import BlockFp8Weight


def build_bf16(weight: BlockFp8Weight, spec: ExperimentSpec, device: torch.device) -> Projection:
    """``x[M, K] -> x · W_deqᵀ [M, N]`` in the activation dtype: W dequantised once, ``F.linear``."""
    import torch

    w = weight.dequantize(activation_dtype(spec)).to(device)

    def linear(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, w)

    return linear


def build_fp8(weight: BlockFp8Weight, spec: ExperimentSpec, device: torch.device) -> Projection:
    """``x[M, K] -> y[M, N]`` through cuBLASLt's blockwise W8A8 ``torch._scaled_mm`` (see the module docstring).

    Raises:
        ValueError: a weight whose blocks are not 128×128 (cuBLASLt's blockwise scaling takes no other).
    """
    import torch

    from spx.bench.gemm.fp8_quant import quantize_activation_1x128_fused

    if weight.block != 128:
        raise ValueError(f"gemmBackend torch-fp8 takes 128×128-block weights (cuBLASLt blockwise); this one has {weight.block}×{weight.block}")
    dtype = activation_dtype(spec)
    w_t = weight.weight.to(device).t()  # [K, N], column-major: what _scaled_mm wants for B
    scale_b = weight.scale.to(device).t()  # [K/128, N/128], stride (1, K/128)

    def scaled_mm(x: torch.Tensor) -> torch.Tensor:
        xq, scale_a = quantize_activation_1x128_fused(x)  # rows padded to a multiple of 16
        out: torch.Tensor = torch._scaled_mm(xq, w_t, scale_a, scale_b, out_dtype=dtype)
        return out[: x.shape[0]]

    return scaled_mm


TORCH_BF16 = GemmKernel(
    name="torch-bf16", runs="dequantized weight, cuBLAS; the CPU BLAS on CPU",
    formats=frozenset({MXFP8, FP8_BLOCK128, BF16}), format_note="", cuda=False, min_capability=None,
    w8a8_formats=frozenset(), ceiling=True, build=build_bf16,
)
TORCH_FP8 = GemmKernel(
    name="torch-fp8", runs="cuBLASLt blockwise W8A8",
    formats=frozenset({FP8_BLOCK128}),
    format_note="cuBLASLt's blockwise W8A8 takes 1×128 / 128×128 scale blocks only",
    # cuBLASLt's blockwise-scaled FP8 GEMM behind torch._scaled_mm needs Hopper (torch ≥ 2.9, SM90)
    cuda=True, min_capability=90, w8a8_formats=frozenset({FP8_BLOCK128}), ceiling=True, build=build_fp8,
)
