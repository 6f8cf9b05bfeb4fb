"""Every GEMM backend spx benchmarks, one :class:`~spx.bench.gemm.record.GemmKernel` each, and vLLM's MXFP8 order.

:data:`KERNELS` is the registry (its names are :data:`spx.vocabulary.ResolvedGemmBackend`'s, its CUDA and MXFP8
subsets the vocabulary's :data:`~spx.vocabulary.CUDA_GEMM_BACKENDS` and :data:`~spx.vocabulary.MXFP8_GEMM_BACKENDS`,
held equal by ``tests/unit/test_gemm_registry.py``). ``auto`` on a CUDA GPU with MXFP8 weights walks
:func:`mxfp8_order`: vLLM 0.33's order of its MXFP8 linear kernels on that compute capability
(``_POSSIBLE_MXFP8_KERNELS[PlatformEnum.CUDA]`` in ``vllm/model_executor/kernels/linear/__init__.py``, then
``prioritize_humming`` of ``vllm/model_executor/layers/quantization/utils/humming/priority.py``), checked
against the installed vLLM by ``tests/real_vllm/test_gemm_order.py``.

Adding a backend: its name in :mod:`spx.vocabulary`, its module with its ``KERNEL`` record, one line in
:data:`KERNELS` here (and its class in :data:`VLLM_MXFP8_CUDA_ORDER` if it is one of vLLM's MXFP8 kernels),
and a row in docs/kernel-benchmark.md; then ``bash scripts/regen.sh``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from spx.bench.gemm import ceilings, humming, marlin, vllm_linear
from spx.bench.gemm.record import GemmKernel

#: The registry, in the order messages list backends.
KERNELS: Final[tuple[GemmKernel, ...]] = (
    humming.KERNEL, marlin.KERNEL, ceilings.TORCH_BF16, ceilings.TORCH_FP8, vllm_linear.VLLM,
)
BY_NAME: Final[Mapping[str, GemmKernel]] = {k.name: k for k in KERNELS}
BY_VLLM_KERNEL: Final[Mapping[str, GemmKernel]] = {k.vllm_kernel: k for k in KERNELS if k.vllm_kernel}

#: vLLM 0.33.0 ``_POSSIBLE_MXFP8_KERNELS[PlatformEnum.CUDA]``, "in priority/performance order (when available)".
VLLM_MXFP8_CUDA_ORDER: Final[tuple[str, ...]] = (
    "FlashInferCutedslMxfp8LinearKernel",
    "FlashInferCutlassMxfp8LinearKernel",
    "MarlinMxfp8LinearKernel",
    "B12xMxfp8LinearKernel",
    "EmulationMxfp8LinearKernel",
    "HummingMxfp8LinearKernel",
    "FlashInferTrtllmMxfp8LinearKernel",
    "TorchMxFp8LinearKernel",
)
#: vLLM 0.33 ``_HUMMING_PREFERRED_CAPABILITIES`` (``utils/humming/priority.py``): Humming outranks Marlin.
HUMMING_PREFERRED_CAPABILITIES: Final = frozenset({90})

#: vLLM's MXFP8 kernels that spx does not benchmark, with the capabilities their ``is_supported`` accepts
#: (vLLM 0.33 ``kernels/linear/mxfp8/flashinfer.py``: CuTe-DSL and TRT-LLM need the SM100 family, CUTLASS
#: ``has_device_capability(100)``; ``b12x.py``: the SM120 family). Where one of them comes first, ``auto``
#: refuses rather than time a kernel vLLM would not run.
NOT_BENCHMARKED: Final[Mapping[str, Callable[[int], bool]]] = {
    "FlashInferCutedslMxfp8LinearKernel": lambda cap: cap // 10 == 10,
    "FlashInferCutlassMxfp8LinearKernel": lambda cap: cap >= 100,
    "B12xMxfp8LinearKernel": lambda cap: cap // 10 == 12,
    "FlashInferTrtllmMxfp8LinearKernel": lambda cap: cap // 10 == 10,
}

#: vLLM 0.33's software emulation (``kernels/linear/mxfp8/emulation.py``: ``is_supported`` is always true): where
#: ``auto``'s walk reaches it, vLLM would emulate, so the walk ends there (spx times no emulation on a GPU).
VLLM_MXFP8_EMULATION: Final = "EmulationMxfp8LinearKernel"


def mxfp8_order(capability: int) -> tuple[str, ...]:
    """vLLM 0.33's MXFP8 kernel classes in the order ``init_mxfp8_linear_kernel`` tries them on SM ``capability``.

    ``prioritize_humming``: where ``capability`` is in :data:`HUMMING_PREFERRED_CAPABILITIES`, Humming moves
    directly ahead of Marlin; every other entry keeps its place. ``capability`` as vLLM writes it (90 = SM90).
    """
    order = list(VLLM_MXFP8_CUDA_ORDER)
    if capability in HUMMING_PREFERRED_CAPABILITIES:
        h, m = order.index("HummingMxfp8LinearKernel"), order.index("MarlinMxfp8LinearKernel")
        if h > m:
            order.insert(m, order.pop(h))
    return tuple(order)


def kernel(name: str) -> GemmKernel:
    """The record of backend ``name``.

    Raises:
        ValueError: no such backend (names the known ones).
    """
    if name not in BY_NAME:
        raise ValueError(f"spec.kernel.gemmBackend: unknown backend {name[:64]!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]
