"""``auto``'s order of the MXFP8 kernels is vLLM 0.33's: the registry's copy against the installed vLLM.

:data:`spx.bench.gemm.registry.VLLM_MXFP8_CUDA_ORDER` is vLLM's ``_POSSIBLE_MXFP8_KERNELS[PlatformEnum.CUDA]``
(class names, in order), and :func:`spx.bench.gemm.registry.mxfp8_order` is vLLM's ``prioritize_humming`` of it
on every compute capability vLLM ships kernels for; the registry's kernels name classes vLLM has.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from spx.bench.gemm.registry import (
    BY_VLLM_KERNEL,
    NOT_BENCHMARKED,
    VLLM_MXFP8_CUDA_ORDER,
    VLLM_MXFP8_EMULATION,
    mxfp8_order,
)


def _cuda_mxfp8() -> list[type]:
    from vllm.model_executor.kernels import linear as kernels
    from vllm.platforms import PlatformEnum

    return list(kernels._POSSIBLE_MXFP8_KERNELS[PlatformEnum.CUDA])


def test_the_registry_copies_vllms_cuda_mxfp8_order(vllm: ModuleType) -> None:
    assert tuple(k.__name__ for k in _cuda_mxfp8()) == VLLM_MXFP8_CUDA_ORDER


@pytest.mark.parametrize("capability", [75, 80, 86, 89, 90, 100, 103, 120])
def test_mxfp8_order_is_prioritize_humming(vllm: ModuleType, capability: int) -> None:
    from vllm.model_executor.layers.quantization.utils.humming.priority import prioritize_humming

    assert tuple(k.__name__ for k in prioritize_humming(_cuda_mxfp8(), capability)) == mxfp8_order(capability)


def test_every_named_class_is_one_of_vllms(vllm: ModuleType) -> None:
    names = {k.__name__ for k in _cuda_mxfp8()}
    assert set(BY_VLLM_KERNEL) | set(NOT_BENCHMARKED) | {VLLM_MXFP8_EMULATION} <= names
