"""Fused per-token 1×128 FP8 activation quantisation with UE8M0 scales (Triton, CUDA only).

Eager torch needs ~8 passes over a float32 copy of X for this (measured on H200, torch 2.11: the
``torch-fp8`` projection at 8192 tokens took 713 µs, 3.3× the bf16 GEMM); vLLM runs one fused kernel
(``per_token_group_quant_fp8``), and so does this one: one read of X, one write of X_fp8 and its
scales. Semantics match :func:`spx.bench.weights.quantize_activation_1x128` (tested against it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spx.bench.weights import BLOCK, FP8_E4M3_MAX

if TYPE_CHECKING:
    import torch

#: cuBLASLt's blockwise FP8 GEMM in torch 2.11 rejects M = 1 and M = 6 (CUBLAS_STATUS_NOT_SUPPORTED,
#: measured on H200) and accepts M = 8 and 12; rows are padded to a multiple of this.
ROW_ALIGN = 16
_BLOCK_M = 64  # rows per program: a [64, 128] tile (16 KiB of bf16); 16 rows measured 69 µs at 8192 tokens
_kernel: Any = None


def _build_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def quant_1x128_ue8m0(x_ptr, q_ptr, s_ptr, m_valid, m_total, k, stride_xm,
                          BLOCK_M: tl.constexpr, GROUP: tl.constexpr, FP8_MAX: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * GROUP + tl.arange(0, GROUP)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=rows[:, None] < m_valid, other=0.0)
        x = x.to(tl.float32)
        amax = tl.max(tl.abs(x), axis=1)
        scale = tl.exp2(tl.ceil(tl.log2(tl.maximum(amax, 1e-30) / FP8_MAX)))
        scale = tl.where(amax > 0, scale, 1.0)
        q = tl.clamp(x / scale[:, None], -FP8_MAX, FP8_MAX)
        in_total = rows < m_total
        tl.store(q_ptr + rows[:, None] * k + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=in_total[:, None])
        tl.store(s_ptr + tl.program_id(1) * m_total + rows, scale, mask=in_total)

    return quant_1x128_ue8m0


def quantize_activation_1x128_fused(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x[M, K]`` (bf16/fp16/fp32, CUDA) → ``(x_fp8 [M_pad, K], scale [M_pad, K/128] float32)``.

    ``M_pad`` = M rounded up to :data:`ROW_ALIGN`; pad rows are zeros with scale 1. The scale is
    outer-dim-major (stride ``(1, M_pad)``), as ``torch._scaled_mm`` blockwise scaling requires.
    """
    import torch
    import triton

    global _kernel
    if _kernel is None:
        _kernel = _build_kernel()
    m, k = x.shape
    m_pad = triton.cdiv(m, ROW_ALIGN) * ROW_ALIGN
    q = torch.empty(m_pad, k, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(k // BLOCK, m_pad, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m_pad, _BLOCK_M), k // BLOCK)
    _kernel[grid](x, q, s, m, m_pad, k, x.stride(0), BLOCK_M=_BLOCK_M, GROUP=BLOCK, FP8_MAX=FP8_E4M3_MAX, num_warps=4)
    return q, s.t()
