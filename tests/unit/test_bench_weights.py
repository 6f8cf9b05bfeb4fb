"""FP8 block weights and activations in the checkpoint's format (CPU)."""

import pytest

torch = pytest.importorskip("torch")

from spx.bench.weights import (  # noqa: E402
    FP8_E4M3_MAX,
    quantize_activation_1x128,
    quantize_weight_block_fp8,
    random_block_fp8_weight,
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
    w = random_block_fp8_weight(256, 384, 128, torch.device("cpu"), g)
    assert w.weight.dtype == torch.float8_e4m3fn and w.weight.shape == (256, 384)
    assert w.scale.shape == (2, 3) and w.scale.dtype == torch.float32
    ref = torch.randn(256, 384, generator=torch.Generator().manual_seed(0)) * 384**-0.5
    deq = w.dequantize(torch.float32)
    rel = ((deq - ref).norm() / ref.norm()).item()
    assert 0 < rel < 0.05  # e4m3 keeps 3 mantissa bits: a few % relative error, never exact


def test_weight_shape_must_be_block_aligned():
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize_weight_block_fp8(torch.ones(100, 128), 128)


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


# --------------------------------------------------------------------------- block-size-aware weights

from spx.bench.weights import (  # noqa: E402
    BlockFp8Weight,
    e8m0_bytes,
)


def _reference_dequant(w: BlockFp8Weight) -> torch.Tensor:
    """Element by element, independent of the implementation's repeat_interleave."""
    n, k = w.shape
    out = torch.empty(n, k)
    b = w.block
    for i in range(n // b):
        for j in range(k // b):
            out[i * b:(i + 1) * b, j * b:(j + 1) * b] = w.weight[i * b:(i + 1) * b, j * b:(j + 1) * b].float() * w.scale[i, j]
    return out


@pytest.mark.parametrize("block", [32, 128])
def test_block_weight_layout_and_exact_dequantization(block):
    g = torch.Generator().manual_seed(1)
    w = random_block_fp8_weight(256, 384, block, torch.device("cpu"), g)
    assert w.block == block and w.shape == (256, 384)
    assert w.weight.dtype == torch.float8_e4m3fn and tuple(w.scale.shape) == (256 // block, 384 // block)
    assert torch.equal(torch.exp2(torch.log2(w.scale).round()), w.scale)  # exact powers of two
    deq = w.dequantize(torch.float32)
    assert torch.equal(deq, _reference_dequant(w))
    assert torch.equal(w.dequantize(torch.bfloat16).float(), deq)  # e4m3 × 2^e is exact in bf16


def test_32_blocks_track_the_weight_more_closely_than_128_blocks():
    w = torch.randn(256, 512, generator=torch.Generator().manual_seed(2)) * 512**-0.5
    w[:32, :32] *= 2.0**14  # one outlier 32×32 block: in a 128×128 block its scale pushes the neighbours
    near = (slice(32, 128), slice(0, 128))  # ...below e4m3's normal range (2^-6 of 448)

    def err(block: int) -> float:
        d = quantize_weight_block_fp8(w, block).dequantize(torch.float32)
        return ((d[near] - w[near]).norm() / w[near].norm()).item()

    assert err(32) < 0.05 < err(128)


@pytest.mark.parametrize("block", [32, 128])
def test_row_scales_e8m0_are_vllms_per_row_expansion(block):
    w = random_block_fp8_weight(256, 256, block, torch.device("cpu"), torch.Generator().manual_seed(3))
    rows = w.row_scales_e8m0()
    assert rows.dtype == torch.uint8 and tuple(rows.shape) == (256, 256 // 32)
    # vLLM 0.33 KMxfp8Static scale loader: checkpoint bytes [N/b, K/b] repeat_interleave(b, dim=0)
    checkpoint_bytes = (torch.log2(w.scale).to(torch.int32) + 127).to(torch.uint8)
    expected = checkpoint_bytes.repeat_interleave(block, dim=0).repeat_interleave(block // 32, dim=1)
    assert torch.equal(rows, expected)
    # decoding the bytes gives back every element's scale exactly
    decoded = torch.exp2(rows.float() - 127).repeat_interleave(32, dim=1)
    assert torch.equal(decoded, w.element_scales())


def test_e8m0_bytes_are_exact_and_refuse_non_powers_of_two():
    s = torch.tensor([1.0, 0.5, 2.0**-20, 2.0**-127, 2.0**127])
    assert e8m0_bytes(s).tolist() == [127, 126, 107, 0, 254]
    with pytest.raises(ValueError, match="powers of two"):
        e8m0_bytes(torch.tensor([0.75]))


def test_block_weight_refuses_bad_layouts():
    with pytest.raises(ValueError, match="block must be one of"):
        quantize_weight_block_fp8(torch.ones(64, 64), 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_weight_block_fp8(torch.ones(48, 64), 32)
    with pytest.raises(ValueError, match="needs N, K multiples of 32 and scale"):
        BlockFp8Weight(torch.zeros(64, 64, dtype=torch.float8_e4m3fn), torch.ones(1, 1), block=32)
    w128 = random_block_fp8_weight(128, 128, 128, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert w128.block == 128 and tuple(w128.scale.shape) == (1, 1)
