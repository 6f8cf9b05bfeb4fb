"""Block-scaled FP8 weights as DeepSeek checkpoints store them, and the activation quantisation of W8A8.

Formats (``spec.projection.weightFormat``, block edges in :data:`spx.api.projection.WEIGHT_FORMAT_BLOCK`):

- ``mxfp8-block32-ue8m0``: FP8 e4m3 values, one UE8M0 (power-of-two) scale per **32×32** block: how the
  DeepSeek-V4.1 checkpoint stores ``fused_wqa_wkv`` (vLLM 0.33 ``DeepseekV4FP8Config``,
  ``vllm/models/deepseek_v41/quant_config.py``: ``weight_block_size == [32, 32]`` with e8m0 scales →
  ``ModelOptLinearMethod`` with MXFP8). At load vLLM expands the 32×32 scales per row to ``[N, K/32]``
  uint8 (``KMxfp8Static.get_scale_weight_loader`` in ``layers/quantization/modelopt.py``:
  ``repeat_interleave(32, dim=0)``), the layout MXFP8 kernels take (OCP MX: 32 elements share a scale):
  :meth:`BlockFp8Weight.row_scales_e8m0`.
- ``fp8-block128-ue8m0``: the same with 128×128 blocks (DeepSeek-V3 technical report §3.3; V3/V3.1
  checkpoints' ``weight_scale_inv`` with ``scale_fmt: ue8m0``).

Dequantised value = fp8 value × its block's scale. All functions run on CPU or CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

FP8_E4M3_MAX = 448.0  # largest finite float8_e4m3fn (OCP FP8 spec)
#: Activation group of DeepSeek's W8A8 (1×128 tiles) and the 128×128 weight block of V3-style checkpoints.
BLOCK = 128
#: MXFP8 scale group (OCP Microscaling spec v1.0: 32 elements share one E8M0 scale).
MX_GROUP = 32
#: E8M0 exponent bias: byte = log2(scale) + 127 (OCP MX spec; 255 is NaN).
E8M0_BIAS = 127
SUPPORTED_BLOCKS = (32, 128)


def ue8m0_scale(amax: torch.Tensor) -> torch.Tensor:
    """Smallest power of two ``s`` with ``amax / s ≤ 448`` (UE8M0: 8-bit exponent, no mantissa).

    ``amax`` float32 of any shape; returns float32 of the same shape, exact powers of two; an all-zero
    block gets scale 1.
    """
    import torch

    safe = torch.clamp(amax.float(), min=torch.finfo(torch.float32).tiny)
    scale = torch.exp2(torch.ceil(torch.log2(safe / FP8_E4M3_MAX)))
    return torch.where(amax > 0, scale, torch.ones_like(scale))


def e8m0_bytes(scale: torch.Tensor) -> torch.Tensor:
    """Exact powers of two (float32, any shape) → their UE8M0 bytes (uint8, ``log2(scale) + 127``).

    Raises:
        ValueError: a value that is not a power of two in [2⁻¹²⁷, 2¹²⁷] (no UE8M0 byte encodes it).
    """
    import torch

    mantissa, exponent = torch.frexp(scale.float())  # scale = mantissa · 2^exponent, mantissa in [0.5, 1)
    biased = exponent.to(torch.int32) - 1 + E8M0_BIAS
    if scale.numel() and (not bool((mantissa == 0.5).all()) or int(biased.min()) < 0 or int(biased.max()) > 254):
        raise ValueError("scales must be exact powers of two in [2^-127, 2^127] to be stored as UE8M0 bytes")
    return biased.to(torch.uint8)


@dataclass
class BlockFp8Weight:
    """A ``[N, K]`` weight as the checkpoint stores it: FP8 e4m3 values, one power-of-two scale per block.

    ``weight``: torch.float8_e4m3fn ``[N, K]``; ``scale``: float32 ``[N/block, K/block]``, exact powers of
    two (``weight_scale_inv`` / ``weight_scale`` in DeepSeek checkpoints); ``block``: 32 (MXFP8, V4.1) or
    128 (V3-style). Both tensors live on the same device.
    """

    weight: torch.Tensor
    scale: torch.Tensor
    block: int = BLOCK

    def __post_init__(self) -> None:
        n, k = self.weight.shape
        b = self.block
        if b not in SUPPORTED_BLOCKS:
            raise ValueError(f"block must be one of {SUPPORTED_BLOCKS}, got {b}")
        if tuple(self.scale.shape) != (n // b, k // b) or n % b or k % b:
            raise ValueError(
                f"weight [{n}, {k}] with {b}×{b} blocks needs N, K multiples of {b} and scale "
                f"[{n // b}, {k // b}]; got scale {list(self.scale.shape)}"
            )

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, K)``."""
        n, k = self.weight.shape
        return int(n), int(k)

    def element_scales(self) -> torch.Tensor:
        """float32 ``[N, K]``: every element's block scale."""
        return self.scale.repeat_interleave(self.block, 0).repeat_interleave(self.block, 1)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """``[N, K]`` tensor of ``dtype``: every element × its block's scale (computed in float32).

        Exact in bfloat16/float32: an e4m3 value (3 mantissa bits) times a power of two is a bf16 value.
        """
        return (self.weight.float() * self.element_scales()).to(dtype)

    def row_scales_e8m0(self) -> torch.Tensor:
        """uint8 ``[N, K/32]``: the scales as vLLM 0.33 holds MXFP8 weights after loading.

        Each row gets its block's scale (``KMxfp8Static.get_scale_weight_loader``: the checkpoint's
        ``[N/b, K/b]`` scale bytes ``repeat_interleave(b, dim=0)``; for b = 128 each 128-wide column block
        also spans four 32-groups), as E8M0 bytes (``log2(scale) + 127``).
        """
        per_group = self.scale.repeat_interleave(self.block, 0).repeat_interleave(self.block // MX_GROUP, 1)
        return e8m0_bytes(per_group).contiguous()




def quantize_weight_block_fp8(w: torch.Tensor, block: int) -> BlockFp8Weight:
    """Quantise a float ``[N, K]`` weight to FP8 e4m3 in ``block``×``block`` blocks with UE8M0 scales.

    Raises:
        ValueError: ``block`` not 32 or 128, or N or K not a multiple of ``block``.
    """
    import torch

    n, k = w.shape
    if block not in SUPPORTED_BLOCKS:
        raise ValueError(f"block must be one of {SUPPORTED_BLOCKS}, got {block}")
    if n % block or k % block:
        raise ValueError(f"weight shape {tuple(w.shape)} is not a multiple of {block} in both dims")
    blocks = w.float().reshape(n // block, block, k // block, block)
    scale = ue8m0_scale(blocks.abs().amax(dim=(1, 3)))
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return BlockFp8Weight(weight=q.reshape(n, k).to(torch.float8_e4m3fn), scale=scale.contiguous(), block=block)


def random_block_fp8_weight(
    n: int, k: int, block: int, device: torch.device, generator: torch.Generator, std: float | None = None
) -> BlockFp8Weight:
    """A random ``[N, K]`` weight in the checkpoint's layout with ``block``×``block`` blocks.

    Drawn as N(0, std²) with ``std = 1/sqrt(K)`` by default (a Linear's init scale) on ``device`` from
    ``generator``, then quantised, so the blocks get realistic, varied power-of-two scales.

    Raises:
        ValueError: see :func:`quantize_weight_block_fp8`.
    """
    import torch

    std = std if std is not None else k**-0.5
    w = torch.randn(n, k, generator=generator, device=device, dtype=torch.float32) * std
    return quantize_weight_block_fp8(w, block)


def quantize_activation_1x128(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token 1×128 group quantisation of ``x[M, K]`` to FP8 e4m3 with UE8M0 scales.

    Returns ``(x_fp8 [M, K], scale [M, K/128] float32)``, the scale stored outer-dim-major
    (stride ``(1, M)``), the layout ``torch._scaled_mm`` blockwise scaling accepts.
    """
    import torch

    m, k = x.shape
    groups = x.float().reshape(m, k // BLOCK, BLOCK)
    scale = ue8m0_scale(groups.abs().amax(dim=2))
    q = (groups / scale[:, :, None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q.reshape(m, k), scale.t().contiguous().t()
