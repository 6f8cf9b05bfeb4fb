"""Which GEMM backend runs, and why (recorded as ``gemmBackendReason``): a walk over the registry.

:func:`choose_gemm_backend` is the pure decision (table-tested in ``tests/unit/test_gemm_backend_choice.py``);
:func:`resolve_gemm_backend` reads the device and asks the backends it reaches whether their kernels are here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

from spx.bench.gemm.record import CEILING, Availability, GemmKernel
from spx.bench.gemm.registry import (
    BY_VLLM_KERNEL,
    HUMMING_PREFERRED_CAPABILITIES,
    KERNELS,
    NOT_BENCHMARKED,
    VLLM_MXFP8_EMULATION,
    kernel,
    mxfp8_order,
)
from spx.vocabulary import BF16, CPU_NOTE, MXFP8, GemmBackend, ResolvedDevice, ResolvedGemmBackend, WeightFormat

if TYPE_CHECKING:
    import torch

    from spx.api.spec import ExperimentSpec

#: ``name -> Availability`` of a backend's kernels on this machine (only asked of backends the walk reaches).
Probe = Callable[[str], Availability]

#: ``auto`` on fp8-block128 weights: the ceilings in the order tried (vLLM runs a W8A8 block GEMM there).
FP8_BLOCK_CEILINGS: tuple[ResolvedGemmBackend, ...] = ("torch-fp8", "torch-bf16")


def _or(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _obstacle(k: GemmKernel, weight_format: WeightFormat, cuda: bool, cap: int | None) -> str | None:
    """What keeps ``k`` from this weight on this device, in a few words; ``None`` if nothing does."""
    if weight_format not in k.formats:
        return f"{k.name} takes weightFormat {_or(sorted(k.formats))} only"
    if k.cuda and not cuda:
        return f"{k.name} needs a CUDA GPU"
    if k.min_capability is not None and (cap is None or cap < k.min_capability):
        return f"{k.name} needs SM{k.min_capability}+"
    return None


def _refusal(k: GemmKernel, weight_format: WeightFormat, cuda: bool, cap: int | None, sm: str) -> str | None:
    """Why ``k`` cannot run this weight on this device, the fix named (``spx validate``'s wording); ``None`` if it can."""
    if weight_format not in k.formats:
        takes = [o.name for o in KERNELS if weight_format in o.formats]
        return (f"spec.kernel.gemmBackend: {k.name} needs weightFormat {_or(sorted(k.formats))} ({k.format_note}), "
                f"not {weight_format}: use weightFormat {_or(sorted(k.formats))}, or gemmBackend {_or([*takes, 'auto'])}")
    if k.cuda and not cuda:
        return f"spec.kernel.gemmBackend: {k.name} needs a CUDA GPU (device is cpu); use gemmBackend torch-bf16 or auto on CPU"
    if _obstacle(k, weight_format, cuda, cap):
        return (f"spec.kernel.gemmBackend: {k.name} needs a CUDA GPU of compute capability ≥ {(k.min_capability or 0) / 10:.1f} "
                f"(device is {sm}); use gemmBackend torch-bf16 or auto")
    return None


def _requested(k: GemmKernel, weight_format: WeightFormat, cuda: bool, cap: int | None, sm: str,
               probe: Probe) -> tuple[ResolvedGemmBackend, str]:
    refusal = _refusal(k, weight_format, cuda, cap, sm)
    if refusal:
        raise ValueError(refusal)
    reason = f"requested: {k.name} ({k.runs}) on {sm}" + (f", {CEILING}" if k.ceiling else "")
    if k.available is None:
        return k.name, reason
    ok, why = probe(k.name)
    if not ok:
        raise RuntimeError(f"spec.kernel.gemmBackend: {k.name}: {why}")
    return k.name, f"{reason}; {why}"


def _auto_mxfp8(cap: int, sm: str, probe: Probe) -> tuple[ResolvedGemmBackend, str]:
    """The first of vLLM's MXFP8 kernels (:func:`~spx.bench.gemm.registry.mxfp8_order`) that spx has and can run."""
    order = mxfp8_order(cap)
    ours = [BY_VLLM_KERNEL[c] for c in order if c in BY_VLLM_KERNEL and _obstacle(BY_VLLM_KERNEL[c], MXFP8, True, cap) is None]
    head = (f"auto: vLLM 0.33 prefers Humming on {sm} (_HUMMING_PREFERRED_CAPABILITIES={{90}})"
            if cap in HUMMING_PREFERRED_CAPABILITIES else f"auto: vLLM 0.33 ranks {ours[0].title if ours else 'none of them'} first for MXFP8 on {sm}")
    passed: list[str] = []
    for cls in order:
        if cls in NOT_BENCHMARKED and NOT_BENCHMARKED[cls](cap):
            raise ValueError(
                f"spec.kernel.gemmBackend auto: on {sm} vLLM 0.33 runs {cls} first, which spx does not benchmark; "
                f"set gemmBackend {_or([k.name for k in KERNELS if k.vllm_kernel])} explicitly to measure those kernels here")
        if cls == VLLM_MXFP8_EMULATION:
            break
        k = BY_VLLM_KERNEL.get(cls)
        if k is None:
            continue
        if k not in ours:  # below its minimum capability: vLLM's is_supported passes over it too
            continue
        ok, why = probe(k.name)
        if ok:
            return k.name, f"{head}; {why}" if not passed else f"{head}, but {'; '.join(passed)}: vLLM falls back to {k.title}; {why}"
        passed.append(f"{k.name} ({why}{'; ' + k.install if k.install else ''})")
    raise RuntimeError(
        f"spec.kernel.gemmBackend auto: none of vLLM's MXFP8 kernels that spx benchmarks can run here before vLLM would "
        f"fall back to its emulation: {', '.join(passed)}; "
        "install one, or set gemmBackend torch-bf16 for a cuBLAS ceiling")


def _auto(weight_format: WeightFormat, cuda: bool, cap: int | None, sm: str, probe: Probe) -> tuple[ResolvedGemmBackend, str]:
    if not cuda:
        return "torch-bf16", f"auto: torch-bf16 (vLLM's MXFP8 kernels need CUDA); {CPU_NOTE}"
    if weight_format == BF16:
        return "torch-bf16", "auto: weightFormat bf16 is unquantized: torch-bf16 (cuBLAS), as vLLM runs unquantized linears"
    if weight_format == MXFP8 and cap is not None:
        return _auto_mxfp8(cap, sm, probe)
    passed: list[str] = []
    for name in FP8_BLOCK_CEILINGS:
        k = kernel(name)
        obstacle = _obstacle(k, weight_format, cuda, cap)
        if obstacle is None:
            return k.name, (f"auto: {weight_format} on {sm}: vLLM runs a W8A8 block GEMM (Fp8LinearMethod); "
                            + "".join(f"{p}; " for p in passed) + f"{k.name} ({k.runs}) is the closest spx has, {CEILING}")
        passed.append(obstacle)
    raise RuntimeError(f"spec.kernel.gemmBackend auto: no backend runs {weight_format} on {sm}")


def choose_gemm_backend(
    requested: GemmBackend,
    weight_format: WeightFormat,
    device_type: ResolvedDevice,
    capability: tuple[int, int] | None,
    probe: Probe,
) -> tuple[ResolvedGemmBackend, str]:
    """Pure decision: the backend to run and why (recorded as ``gemmBackendReason``).

    ``requested`` is ``spec.kernel.gemmBackend``; ``device_type`` ``cuda``/``cpu``; ``capability`` the
    GPU's compute capability (``None`` on CPU); ``probe(name)`` says whether a backend's kernels are installed
    (:attr:`GemmKernel.available <spx.bench.gemm.record.GemmKernel.available>`); it is asked only of the
    backends the walk reaches.

    ``auto`` follows vLLM 0.33's MXFP8 linear-kernel order on CUDA (:func:`~spx.bench.gemm.registry.mxfp8_order`):
    the first kernel spx has whose capability and package are here (on SM90 Humming, else Marlin; below SM90
    Marlin); where vLLM would first run a kernel spx does not benchmark (FlashInfer's on SM100+) it refuses.
    ``fp8-block128-ue8m0`` on SM90+ → ``torch-fp8`` (vLLM runs a W8A8 block GEMM there; cuBLASLt's is the
    closest spx has); ``bf16`` weights and CPU → ``torch-bf16``.

    Raises:
        ValueError: a backend this weight format or device cannot run (names the fix).
        RuntimeError: the kernel's package is missing (for ``auto``, names each of vLLM's kernels tried).
    """
    cap = capability[0] * 10 + capability[1] if capability else None
    sm = f"SM{cap}" if cap else "CPU"
    cuda = device_type == "cuda"
    if requested == "auto":
        return _auto(weight_format, cuda, cap, sm, probe)
    return _requested(kernel(requested), weight_format, cuda, cap, sm, probe)


def resolve_gemm_backend(spec: ExperimentSpec, device: torch.device) -> tuple[ResolvedGemmBackend, str]:
    """``spec.kernel.gemmBackend`` resolved for ``device``: ``(backend, reason)`` (see :func:`choose_gemm_backend`).

    Raises:
        ValueError / RuntimeError: from :func:`choose_gemm_backend`.
    """
    import torch

    cuda = device.type == "cuda"
    cap = torch.cuda.get_device_capability(device) if cuda else None

    @cache
    def probe(name: str) -> Availability:
        available = kernel(name).available
        return Availability(*available()) if available is not None else Availability(True, "")

    device_type: ResolvedDevice = "cuda" if cuda else "cpu"
    return choose_gemm_backend(spec.kernel.gemm_backend, spec.projection.weight_format, device_type, cap, probe)
