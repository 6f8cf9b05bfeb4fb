"""GEMM backends of the projection ``Y[M, N] = X[M, K] · Wᵀ`` (W in the checkpoint's block-FP8 format).

The kernels vLLM runs (docs/kernel-benchmark.md says which vLLM version runs which):

- ``humming``: vLLM 0.33's ``HummingMxfp8LinearKernel`` (MXFP8 W8A16; preferred on SM90),
  :mod:`spx.bench.humming_backend`.
- ``marlin``: vLLM's ``MarlinMxfp8LinearKernel`` (MXFP8 W8A16, ``marlin_gemm``; the seed PR's kernel,
  vLLM 0.33 with ``--linear-backend marlin``), :mod:`spx.bench.marlin`.
- ``vllm``: vLLM's own ``MergedColumnParallelLinear``, :mod:`spx.bench.vllm_backend` (needs vLLM).

Reference ceilings (cuBLAS; not what vLLM runs for DeepSeek-V4.1):

- ``torch-bf16``: W dequantised once to the activation dtype, ``torch.nn.functional.linear``
  (cuBLAS on GPUs, the CPU BLAS on CPU).
- ``torch-fp8``: W8A8: X quantised per token in 1×128 groups (UE8M0 scales; one fused Triton kernel,
  :mod:`spx.bench.fp8_quant`), then ``torch._scaled_mm`` with blockwise scales (1×128 for X, 128×128
  for W; cuBLASLt, torch ≥ 2.9 on SM90). cuBLASLt's blockwise scaling takes only 1×128 / 128×128
  scale blocks, so ``torch-fp8`` refuses 32×32-block (MXFP8) weights instead of changing their format.

``auto`` is :func:`choose_gemm_backend`: what vLLM 0.33 would pick for this weight on this GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spx.api.projection import weight_block
from spx.api.spec import ExperimentSpec
from spx.bench.projection import DTYPES, Projection, activation_dtype
from spx.vocabulary import (
    BF16,
    FP8_BLOCK128,
    MXFP8,
    MXFP8_GEMM_BACKENDS,
    GemmBackend,
    ResolvedDevice,
    ResolvedGemmBackend,
    WeightFormat,
)

if TYPE_CHECKING:
    import torch

    from spx.bench.weights import BlockFp8Weight

__all__ = ["DTYPES", "Projection", "activation_dtype", "build_projection", "choose_gemm_backend",
           "reference_tolerance", "resolve_gemm_backend", "weight_block_of"]

#: vLLM 0.33 ``_HUMMING_PREFERRED_CAPABILITIES`` (``utils/humming/priority.py``): Humming outranks Marlin.
HUMMING_PREFERRED_CAPABILITIES = frozenset({90})
CEILING = "a cuBLAS reference ceiling, not vLLM's kernel"


def choose_gemm_backend(
    requested: GemmBackend,
    weight_format: WeightFormat,
    device_type: ResolvedDevice,
    capability: tuple[int, int] | None,
    humming: tuple[bool, str],
    marlin: tuple[bool, str],
) -> tuple[ResolvedGemmBackend, str]:
    """Pure decision: the backend to run and why (recorded as ``gemmBackendReason``).

    ``requested`` is ``spec.kernel.gemmBackend``; ``device_type`` ``cuda``/``cpu``; ``capability`` the
    GPU's compute capability (``None`` on CPU); ``humming``/``marlin`` are (available, reason) from
    :func:`spx.bench.humming_backend.humming_available` / :func:`spx.bench.marlin.marlin_available`.

    ``auto`` follows vLLM 0.33's MXFP8 linear-kernel order on CUDA
    (``_POSSIBLE_MXFP8_KERNELS`` in ``vllm/model_executor/kernels/linear/__init__.py``, then
    ``prioritize_humming``): on SM90 Humming, else Marlin; below SM90 Marlin; SM100+ runs FlashInfer
    MXFP8 kernels spx does not benchmark. ``fp8-block128-ue8m0`` on SM90+ → ``torch-fp8`` (vLLM runs a
    W8A8 block GEMM there; cuBLASLt's is the closest spx has); ``bf16`` weights and CPU → ``torch-bf16``.

    Raises:
        ValueError: a backend this weight format or device cannot run (names the fix).
        RuntimeError: the kernel's package is missing (names both Humming and Marlin for ``auto``).
    """
    cap = capability[0] * 10 + capability[1] if capability else None
    sm = f"SM{cap}" if cap else "CPU"
    cuda = device_type == "cuda"
    if requested == "auto":
        if not cuda:
            return "torch-bf16", "auto: CPU smoke run: torch-bf16 (vLLM's MXFP8 kernels need CUDA); timings say nothing about GPUs"
        if weight_format == BF16:
            return "torch-bf16", "auto: weightFormat bf16 is unquantized: torch-bf16 (cuBLAS), as vLLM runs unquantized linears"
        if weight_format != MXFP8:
            if cap is not None and cap >= 90:
                return "torch-fp8", (
                    f"auto: {weight_format} on {sm}: vLLM runs a W8A8 block GEMM (Fp8LinearMethod); torch-fp8 "
                    f"(cuBLASLt blockwise W8A8) is the closest spx has, {CEILING}"
                )
            return "torch-bf16", f"auto: {weight_format} on {sm} (no FP8 block GEMM below SM90): torch-bf16, {CEILING}"
        if cap is not None and cap >= 100:
            raise ValueError(
                f"spec.kernel.gemmBackend auto: on {sm} vLLM 0.33 runs FlashInfer MXFP8 kernels, which spx does not "
                "benchmark; set gemmBackend humming or marlin explicitly to measure those kernels here"
            )
        if cap in HUMMING_PREFERRED_CAPABILITIES:
            pref = f"vLLM 0.33 prefers Humming on {sm} (_HUMMING_PREFERRED_CAPABILITIES={{90}})"
            if humming[0]:
                return "humming", f"auto: {pref}; {humming[1]}"
            if marlin[0]:
                return "marlin", f"auto: {pref}, but {humming[1]}: vLLM falls back to Marlin; {marlin[1]}"
        elif marlin[0]:
            return "marlin", f"auto: vLLM 0.33 ranks Marlin first for MXFP8 on {sm}; {marlin[1]}"
        raise RuntimeError(
            f"spec.kernel.gemmBackend auto: neither of vLLM's MXFP8 kernels can run here: humming ({humming[1]}; "
            f"`pip install 'spx-operator[gpu]'`) nor marlin ({marlin[1]}); install one, or set gemmBackend "
            "torch-bf16 for a cuBLAS ceiling"
        )
    if requested == "humming" or requested == "marlin":
        if not cuda:
            raise ValueError(f"spec.kernel.gemmBackend: {requested} needs a CUDA GPU (device is cpu); use torch-bf16 or auto on CPU")
        if weight_format != MXFP8:
            raise ValueError(
                f"spec.kernel.gemmBackend: {requested} runs vLLM's MXFP8 path (32×32 blocks, e8m0 scales); weightFormat "
                f"{weight_format} is not that: use weightFormat {MXFP8}"
            )
        ok, why = humming if requested == "humming" else marlin
        if not ok:
            raise RuntimeError(f"spec.kernel.gemmBackend: {requested}: {why}")
        name = "HummingMxfp8LinearKernel" if requested == "humming" else "MarlinMxfp8LinearKernel"
        return requested, f"requested: {requested} (vLLM 0.33 {name}, W8A16) on {sm}; {why}"
    if requested == "torch-fp8":
        if weight_format != FP8_BLOCK128:
            raise ValueError(
                f"spec.kernel.gemmBackend: torch-fp8 needs weightFormat {FP8_BLOCK128} (cuBLASLt's blockwise W8A8 "
                f"takes 1×128 / 128×128 scale blocks only), not {weight_format}: use gemmBackend humming, marlin or "
                "torch-bf16 for MXFP8 weights"
            )
        if not cuda or cap is None or cap < 90:
            raise ValueError(
                f"spec.kernel.gemmBackend: torch-fp8 needs a CUDA GPU of compute capability ≥ 9.0 (device is {sm}); "
                "use gemmBackend torch-bf16 or auto"
            )
        return "torch-fp8", f"requested: torch-fp8 (cuBLASLt blockwise W8A8) on {sm}, {CEILING}"
    if requested == "torch-bf16":
        return "torch-bf16", f"requested: torch-bf16 (dequantized weight, {'cuBLAS' if cuda else 'CPU BLAS'}) on {sm}, {CEILING}"
    if requested == "vllm":
        return "vllm", f"requested: vllm (vLLM's own linear layer, spx.bench.vllm_backend) on {sm}"
    raise ValueError(f"spec.kernel.gemmBackend: unknown backend {requested!r}")


def marlin_status() -> tuple[bool, str]:
    """``spx.bench.marlin.marlin_available()``, or ``(False, reason)`` when that module is not in this build."""
    try:
        from spx.bench import marlin
    except ImportError as e:
        return False, f"spx.bench.marlin is not in this build ({e})"
    ok, why = marlin.marlin_available()
    return bool(ok), str(why) if why else ("marlin available" if ok else "marlin unavailable")


def resolve_gemm_backend(spec: ExperimentSpec, device: torch.device) -> tuple[ResolvedGemmBackend, str]:
    """``spec.kernel.gemmBackend`` resolved for ``device``: ``(backend, reason)`` (see :func:`choose_gemm_backend`).

    Raises:
        ValueError / RuntimeError: from :func:`choose_gemm_backend`.
    """
    import torch

    from spx.bench.humming_backend import humming_available

    cuda = device.type == "cuda"
    cap = torch.cuda.get_device_capability(device) if cuda else None
    requested = spec.kernel.gemm_backend
    needs_kernels = cuda and spec.projection.weight_format == MXFP8 and (requested == "auto" or requested in MXFP8_GEMM_BACKENDS)
    humming = humming_available() if needs_kernels else (False, "not checked")
    marlin = marlin_status() if needs_kernels and (requested == "marlin" or (requested == "auto" and not humming[0])) else (False, "not checked")
    device_type: ResolvedDevice = "cuda" if cuda else "cpu"
    return choose_gemm_backend(requested, spec.projection.weight_format, device_type, cap, humming, marlin)


def reference_tolerance(backend: ResolvedGemmBackend, weight_format: WeightFormat) -> float:
    """Largest allowed relative Frobenius error ‖y − y_ref‖ / ‖y_ref‖ of ``backend`` against the fp32 reference.

    ``y_ref = x.float() @ W_deq.float().T`` (:func:`spx.bench.correctness.reference_error`). W8A16 kernels
    (humming, marlin, torch-bf16, vLLM's MXFP8) see the exact dequantised weight and the exact bf16
    activations, so only the bf16 output rounding (relative 2⁻⁹) and the fp32 accumulation order
    remain: ~3e-3 measured; tolerance 1e-2. W8A8 (torch-fp8, vLLM on 128×128 blocks) also rounds X to
    e4m3 (3 mantissa bits, ~3 % RMS relative per element): tolerance 5e-2.
    """
    w8a8 = backend == "torch-fp8" or (backend == "vllm" and weight_format == FP8_BLOCK128)
    return 5e-2 if w8a8 else 1e-2


def build_projection(
    backend: ResolvedGemmBackend, weight: BlockFp8Weight, spec: ExperimentSpec, device: torch.device
) -> Projection:
    """A callable ``x[M, K] (activation dtype) -> y[M, N] (activation dtype)`` for ``backend``.

    Raises:
        RuntimeError: ``vllm`` without an importable vLLM; ``humming``/``marlin`` without their kernels.
        ValueError: an unknown backend, or a weight block size the backend cannot take.
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

        if weight.block != 128:
            raise ValueError(f"gemmBackend torch-fp8 takes 128×128-block weights (cuBLASLt blockwise); this one has {weight.block}×{weight.block}")
        w_t = weight.weight.to(device).t()  # [K, N], column-major: what _scaled_mm wants for B
        scale_b = weight.scale.to(device).t()  # [K/128, N/128], stride (1, K/128)

        def scaled_mm(x: torch.Tensor) -> torch.Tensor:
            xq, scale_a = quantize_activation_1x128_fused(x)  # rows padded to a multiple of 16
            out: torch.Tensor = torch._scaled_mm(xq, w_t, scale_a, scale_b, out_dtype=dtype)
            return out[: x.shape[0]]

        return scaled_mm
    if backend == "humming":
        from spx.bench.humming_backend import build_humming_projection

        return build_humming_projection(weight, spec, device)
    if backend == "marlin":
        try:
            from spx.bench.marlin import build_marlin_projection
        except ImportError as e:
            raise RuntimeError(f"gemmBackend marlin: spx.bench.marlin is not in this build ({e})") from e
        return build_marlin_projection(weight, spec, device)
    if backend == "vllm":
        from spx.bench import vllm_backend

        vllm_backend.ensure_vllm()
        return vllm_backend.build_vllm_projection(spec, device, weight)
    raise ValueError(f"spec.kernel.gemmBackend: unknown backend {backend!r}")


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
