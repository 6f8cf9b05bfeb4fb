"""A small test helper: a random FP8 block weight with the attributes ``spx.bench.weights.BlockFp8Weight``
has (``weight``, ``scale``, ``block``, ``row_scales_e8m0()``), so these tests do not depend on how that
class builds its weights. Values are random FP8 e4m3 numbers; scales random powers of two per block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BlockWeight:
    """``weight`` float8_e4m3fn ``[N, K]``; ``scale`` float32 ``[N/block, K/block]`` powers of two."""

    weight: torch.Tensor
    scale: torch.Tensor
    block: int

    def row_scales_e8m0(self) -> torch.Tensor:
        """uint8 ``[N, K/32]``: each row's scale per 32-column group as a UE8M0 byte (exponent + 127)."""
        per_row = self.scale.repeat_interleave(self.block, 0).repeat_interleave(self.block // 32, 1)
        return (torch.log2(per_row).to(torch.int32) + 127).to(torch.uint8)

    def dequantize(self) -> torch.Tensor:
        """float32 ``[N, K]``: every value × its block's scale (exact)."""
        s = self.scale.repeat_interleave(self.block, 0).repeat_interleave(self.block, 1)
        return self.weight.float() * s


def random_block_weight(n: int, k: int, block: int, seed: int = 0) -> BlockWeight:
    """Random ``[n, k]`` weight: e4m3 values of N(0, 4), block scales 2^e with e uniform in [-12, -6]."""
    gen = torch.Generator().manual_seed(seed)
    values = (torch.randn(n, k, generator=gen) * 2.0).clamp(-448, 448).to(torch.float8_e4m3fn)
    exps = torch.randint(-12, -5, (n // block, k // block), generator=gen)
    return BlockWeight(weight=values, scale=torch.exp2(exps.float()), block=block)
