"""Weights and activations in DeepSeek-V3/V4's FP8 block format (e4m3, 128×128 blocks, UE8M0 scales).

Format source: DeepSeek-V3 technical report §3.3 (fine-grained quantization: 1×128 activation tiles,
128×128 weight blocks) and the V3.1/V4 checkpoints' ``weight_scale_inv`` with ``scale_fmt: ue8m0``
(power-of-two scales). Dequantised value = fp8 value × scale. All functions run on CPU or CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

FP8_E4M3_MAX = 448.0  # largest finite float8_e4m3fn (OCP FP8 spec)
BLOCK = 128


def ue8m0_scale(amax: torch.Tensor) -> torch.Tensor:
    """Smallest power of two ``s`` with ``amax / s ≤ 448`` (UE8M0: 8-bit exponent, no mantissa).

    ``amax`` float32 of any shape; returns float32 of the same shape, exact powers of two; an all-zero
    block gets scale 1.
    """
    import torch

    safe = torch.clamp(amax.float(), min=torch.finfo(torch.float32).tiny)
    scale = torch.exp2(torch.ceil(torch.log2(safe / FP8_E4M3_MAX)))
    return torch.where(amax > 0, scale, torch.ones_like(scale))


@dataclass
class Fp8BlockWeight:
    """A ``[N, K]`` weight as the checkpoint stores it.

    ``weight``: float8_e4m3fn ``[N, K]``; ``scale``: float32 ``[N/128, K/128]`` powers of two
    (``weight_scale_inv`` in DeepSeek checkpoints).
    """

    weight: torch.Tensor
    scale: torch.Tensor

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """``[N, K]`` tensor of ``dtype``: every element × its block's scale."""
        s = self.scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
        return (self.weight.float() * s).to(dtype)


def quantize_weight_fp8_block(w: torch.Tensor) -> Fp8BlockWeight:
    """Quantise a float ``[N, K]`` weight (N, K multiples of 128) to FP8 e4m3 128×128 blocks with UE8M0 scales.

    Raises:
        ValueError: if N or K is not a multiple of 128.
    """
    import torch

    n, k = w.shape
    if n % BLOCK or k % BLOCK:
        raise ValueError(f"weight shape {tuple(w.shape)} is not a multiple of {BLOCK} in both dims")
    blocks = w.float().reshape(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = ue8m0_scale(amax)
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return Fp8BlockWeight(weight=q.reshape(n, k).to(torch.float8_e4m3fn), scale=scale.contiguous())


def random_fp8_block_weight(
    n: int, k: int, device: torch.device, generator: torch.Generator, std: float | None = None
) -> Fp8BlockWeight:
    """A random ``[N, K]`` weight in the checkpoint's format.

    Drawn as N(0, std²) with ``std = 1/sqrt(K)`` by default (a Linear's init scale), then quantised, so
    the blocks get realistic, varied power-of-two scales.
    """
    import torch

    std = std if std is not None else k**-0.5
    w = torch.randn(n, k, generator=generator, device=device, dtype=torch.float32) * std
    return quantize_weight_fp8_block(w)


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
