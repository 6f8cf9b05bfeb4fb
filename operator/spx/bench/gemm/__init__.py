"""GEMM backends of the projection ``Y[M, N] = X[M, K] · Wᵀ`` (W in the checkpoint's block-FP8 format), as a registry.

The kernels vLLM runs (docs/kernel-benchmark.md says which vLLM version runs which):

- ``humming``: vLLM 0.33's ``HummingMxfp8LinearKernel`` (MXFP8 W8A16; preferred on SM90), :mod:`~spx.bench.gemm.humming`.
- ``marlin``: vLLM's ``MarlinMxfp8LinearKernel`` (MXFP8 W8A16, ``marlin_gemm``; the seed PR's kernel,
  vLLM 0.33 with ``--linear-backend marlin``), :mod:`~spx.bench.gemm.marlin`.
- ``vllm``: vLLM's own ``MergedColumnParallelLinear``, :mod:`~spx.bench.gemm.vllm_linear` (needs vLLM).

Reference ceilings (cuBLAS; not what vLLM runs for DeepSeek-V4.1): ``torch-bf16`` and ``torch-fp8``,
:mod:`~spx.bench.gemm.ceilings`.

Each backend is one :class:`~spx.bench.gemm.record.GemmKernel` (formats, CUDA need, minimum capability, W8A8,
ceiling, availability, build) in :data:`~spx.bench.gemm.registry.KERNELS`; ``auto`` is
:func:`~spx.bench.gemm.choose.choose_gemm_backend`, a walk of vLLM 0.33's MXFP8 kernel order
(:func:`~spx.bench.gemm.registry.mxfp8_order`); :mod:`~spx.bench.gemm.build` builds the chosen one.
"""

from __future__ import annotations

from spx.bench.gemm.build import build_projection, reference_tolerance, weight_block_of
from spx.bench.gemm.choose import choose_gemm_backend, resolve_gemm_backend
from spx.bench.gemm.projection import DTYPES, Projection, activation_dtype
from spx.bench.gemm.record import Availability, GemmKernel
from spx.bench.gemm.registry import KERNELS, kernel, mxfp8_order

__all__ = ["DTYPES", "KERNELS", "Availability", "GemmKernel", "Projection", "activation_dtype", "build_projection",
           "choose_gemm_backend", "kernel", "mxfp8_order", "reference_tolerance", "resolve_gemm_backend",
           "weight_block_of"]
