"""Building a chosen GEMM backend: its projection, its reference tolerance, and the weight the bench draws."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spx.api.projection import weight_block
from spx.api.spec import ExperimentSpec
from spx.bench.gemm.registry import kernel
from spx.vocabulary import ResolvedGemmBackend, WeightFormat

if TYPE_CHECKING:
    import torch

    from spx.bench.gemm.projection import Projection
    from spx.bench.weights import BlockFp8Weight


def build_projection(
    backend: ResolvedGemmBackend, weight: BlockFp8Weight, spec: ExperimentSpec, device: torch.device
) -> Projection:
    """A callable ``x[M, K] (activation dtype) -> y[M, N] (activation dtype)`` for ``backend`` (its record's build).

    Raises:
        RuntimeError: ``vllm`` without an importable vLLM; ``humming``/``marlin`` without their kernels.
        ValueError: an unknown backend, or a weight block size the backend cannot take.
    """
    return kernel(backend).build(weight, spec, device)


def reference_tolerance(backend: ResolvedGemmBackend, weight_format: WeightFormat) -> float:
    """Largest allowed relative Frobenius error ‖y − y_ref‖ / ‖y_ref‖ of ``backend`` against the fp32 reference.

    ``y_ref = x.float() @ W_deq.float().T`` (:func:`spx.bench.correctness.reference_error`). W8A16 kernels
    (humming, marlin, torch-bf16, vLLM's MXFP8) see the exact dequantised weight and the exact bf16
    activations, so only the bf16 output rounding (relative 2⁻⁹) and the fp32 accumulation order
    remain: ~3e-3 measured; tolerance 1e-2. W8A8 (the record's ``w8a8_formats``: torch-fp8, vLLM on 128×128
    blocks) also rounds X to e4m3 (3 mantissa bits, ~3 % RMS relative per element): tolerance 5e-2.
    """
    return 5e-2 if weight_format in kernel(backend).w8a8_formats else 1e-2


def weight_block_of(spec: ExperimentSpec) -> int:
    """Block edge of the random weight the bench builds: the format's (32 or 128).

    For ``bf16`` the weight is only ever dequantised, so any block works: 128 where N and K allow it,
    else 32.

    Raises:
        ValueError: ``bf16`` with N or K not a multiple of 32.
    """
    block = weight_block(spec.projection.weight_format)
    if block is not None:
        return block
    p = spec.projection
    for b in (128, 32):
        if p.hidden_size % b == 0 and all(n % b == 0 for n in p.output_sizes):
            return b
    raise ValueError("weightFormat bf16: spx draws its random weights in FP8 blocks; hiddenSize and outputSizes must be multiples of 32")
