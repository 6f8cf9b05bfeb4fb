"""spx's port of vLLM 0.33's MXFP8 Marlin load-time conversion equals vLLM's own functions (real vLLM, CPU).

The port (:mod:`spx.bench.gemm.marlin`) is what runs on GPU boxes without vLLM; these are the pure-torch
steps of ``prepare_mxfp8_layer_for_marlin`` (``gptq_marlin_repack`` is a CUDA op, the same source
either way). Skipped where vLLM is not installed; CI installs it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from spx.bench.gemm import marlin  # noqa: E402
from spx.bench.weights import quantize_weight_block_fp8  # noqa: E402

pytestmark = pytest.mark.vllm


def test_float8_e4m3fn_scalar_type_id_matches_vllm():
    from vllm.scalar_type import scalar_types

    assert scalar_types.float8_e4m3fn.id == marlin.FLOAT8_E4M3FN_ID


@pytest.mark.parametrize(("n", "k"), [(1792, 5120), (1800, 5000), (128, 256)])
def test_padding_matches_vllm(n, k):
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_padded_nk

    assert marlin.marlin_padded_nk(n, k, 32) == marlin_padded_nk(n, k, 32)


def test_weight_packing_matches_vllm():
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import pack_fp8_to_int32

    w = quantize_weight_block_fp8(torch.randn(256, 512), 32).weight
    assert torch.equal(marlin.pack_fp8_to_int32(w), pack_fp8_to_int32(w, size_k_first=False))


@pytest.mark.parametrize(("n", "k"), [(1792, 5120), (1800, 5000)])
def test_scale_conversion_matches_vllm(n, k):
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_pad_scales, marlin_permute_scales
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import mxfp8_marlin_process_scales

    gen = torch.Generator().manual_seed(3)
    rows = torch.randint(110, 140, (n, k // 32), generator=gen, dtype=torch.uint8)
    padded_n, padded_k = marlin.marlin_padded_nk(n, k)
    ours = marlin.marlin_scales_mxfp8(rows, n, k, padded_n, padded_k, torch.bfloat16)
    # vLLM's steps, as prepare_mxfp8_layer_for_marlin runs them (default dtype bf16 at model load)
    s = rows.view(torch.float8_e8m0fnu).to(torch.bfloat16).T.contiguous()
    s = marlin_pad_scales(s, n, k, padded_n, padded_k, 32)
    s = marlin_permute_scales(s=s, size_k=padded_k, size_n=padded_n, group_size=32)
    theirs = mxfp8_marlin_process_scales(s)
    assert ours.dtype == theirs.dtype == torch.float8_e8m0fnu
    assert torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8))
