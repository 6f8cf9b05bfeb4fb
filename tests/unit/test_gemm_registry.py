"""The GEMM registry (:mod:`spx.bench.gemm.registry`) and the vocabulary say the same thing.

The spec check (:mod:`spx.api.combinations`, the CRD's CEL rules) reads the vocabulary; the bench reads the
registry. A backend named in one and not the other, or a CUDA/MXFP8 fact that differs, fails here.
"""

from __future__ import annotations

from typing import get_args

import pytest

from spx.bench.gemm.registry import (
    BY_VLLM_KERNEL,
    KERNELS,
    NOT_BENCHMARKED,
    VLLM_MXFP8_CUDA_ORDER,
    VLLM_MXFP8_EMULATION,
    kernel,
    mxfp8_order,
)
from spx.vocabulary import (
    CUDA_GEMM_BACKENDS,
    GEMM_BACKEND_MEANINGS,
    GEMM_BACKENDS,
    MXFP8,
    MXFP8_GEMM_BACKENDS,
    WEIGHT_FORMATS,
    ResolvedGemmBackend,
)

NAMES = [k.name for k in KERNELS]


def test_one_record_per_backend_of_the_vocabulary() -> None:
    assert sorted(NAMES) == sorted(get_args(ResolvedGemmBackend))
    assert len(set(NAMES)) == len(NAMES)
    assert sorted(GEMM_BACKENDS) == sorted(["auto", *NAMES])
    assert sorted(GEMM_BACKEND_MEANINGS) == sorted(GEMM_BACKENDS)


def test_the_cuda_kernels_are_the_vocabularys() -> None:
    assert sorted(k.name for k in KERNELS if k.cuda) == sorted(CUDA_GEMM_BACKENDS)


def test_vllms_mxfp8_kernels_are_the_vocabularys_and_take_mxfp8_only() -> None:
    assert sorted(BY_VLLM_KERNEL[c].name for c in BY_VLLM_KERNEL) == sorted(MXFP8_GEMM_BACKENDS)
    assert all(BY_VLLM_KERNEL[c].formats == {MXFP8} for c in BY_VLLM_KERNEL)


def test_formats_are_weight_formats_and_w8a8_a_subset() -> None:
    for k in KERNELS:
        assert k.formats and k.formats <= set(WEIGHT_FORMATS), k.name
        assert k.w8a8_formats <= k.formats, k.name
        assert k.format_note or k.formats == set(WEIGHT_FORMATS), f"{k.name} refuses formats without saying why"
        assert (k.available is None) == (k.install == ""), f"{k.name}: a kernel that can be missing says how to get it"


def test_every_vllm_class_named_is_in_vllms_order() -> None:
    assert set(BY_VLLM_KERNEL) | set(NOT_BENCHMARKED) | {VLLM_MXFP8_EMULATION} <= set(VLLM_MXFP8_CUDA_ORDER)


@pytest.mark.parametrize(("capability", "humming_first"), [(90, True), (80, False), (100, False)])
def test_humming_moves_ahead_of_marlin_on_sm90_only(capability: int, humming_first: bool) -> None:
    order = mxfp8_order(capability)
    assert (order.index("HummingMxfp8LinearKernel") < order.index("MarlinMxfp8LinearKernel")) == humming_first
    assert sorted(order) == sorted(VLLM_MXFP8_CUDA_ORDER)


def test_an_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown backend 'cutlass'; known: humming, marlin"):
        kernel("cutlass")
