"""FP8 block weights and activations in the checkpoint's format (CPU)."""

import pytest

torch = pytest.importorskip("torch")

from spx.bench.weights import (  # noqa: E402
    FP8_E4M3_MAX,
    quantize_activation_1x128,
    quantize_weight_fp8_block,
    random_fp8_block_weight,
    ue8m0_scale,
)


def test_ue8m0_scales_are_exact_powers_of_two_covering_amax():
    amax = torch.tensor([1e-3, 0.5, 447.0, 448.0, 449.0, 1000.0, 0.0])
    s = ue8m0_scale(amax)
    assert torch.equal(torch.exp2(torch.log2(s).round()), s)  # exact powers of two
    assert bool(((amax / s) <= FP8_E4M3_MAX).all())
    assert bool(((amax / (s / 2)) > FP8_E4M3_MAX)[amax > 0].all())  # the smallest such power
    assert s[-1].item() == 1.0  # all-zero block
    assert s[3].item() == 1.0 and s[4].item() == 2.0


def test_weight_blocks_have_one_scale_each_and_dequantize_close():
    g = torch.Generator().manual_seed(0)
    w = random_fp8_block_weight(256, 384, torch.device("cpu"), g)
    assert w.weight.dtype == torch.float8_e4m3fn and w.weight.shape == (256, 384)
    assert w.scale.shape == (2, 3) and w.scale.dtype == torch.float32
    ref = torch.randn(256, 384, generator=torch.Generator().manual_seed(0)) * 384**-0.5
    deq = w.dequantize(torch.float32)
    rel = ((deq - ref).norm() / ref.norm()).item()
    assert 0 < rel < 0.05  # e4m3 keeps 3 mantissa bits: a few % relative error, never exact


def test_weight_shape_must_be_block_aligned():
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize_weight_fp8_block(torch.ones(100, 128))


def test_activation_scales_are_outer_dim_major_for_scaled_mm():
    x = torch.randn(5, 256, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    x[1, :128] = 0
    q, s = quantize_activation_1x128(x)
    assert q.shape == (5, 256) and s.shape == (5, 2)
    assert s.stride() == (1, 5)  # what torch._scaled_mm blockwise 1x128 accepts
    assert s[1, 0].item() == 1.0 and bool((q[1, :128].float() == 0).all())
    back = (q.float().reshape(5, 2, 128) * s[:, :, None]).reshape(5, 256)
    # e4m3 keeps 3 mantissa bits (≤ 6.25 % rounding per element; small values of a group lose more)
    assert ((back - x.float()).norm() / x.float().norm()).item() < 0.05
