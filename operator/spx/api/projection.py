"""``spec.projection`` and ``spec.parallelism``: the projection under test, its weight format, its TP split.

Defaults: DeepSeek-V4.1's ``fused_wqa_wkv`` (hidden 5120 → 1280 + 512, MXFP8 32×32 blocks) at TP8.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Final, Literal

from pydantic import Field, field_validator, model_validator

from spx.api.base import CamelModel
from spx.vocabulary import BF16, FP8_BLOCK128, MXFP8
from spx.vocabulary import WeightFormat as WeightFormat

ActivationDtype = Literal["bfloat16", "float16", "float32"]

#: Block edge of the DeepSeek-V3-style FP8 block format (128×128 blocks, ``weight_block_size: [128, 128]``).
FP8_BLOCK = 128
#: Block edge of MXFP8 as the DeepSeek-V4.1 checkpoint stores it (32×32 blocks; OCP MX spec: 32 elements
#: share one E8M0 scale). vLLM 0.33: ``DeepseekV4FP8Config.get_quant_method`` routes ``[32, 32]`` blocks with
#: e8m0 scales to ``ModelOptLinearMethod`` (MXFP8), ``vllm/models/deepseek_v41/quant_config.py``.
MXFP8_BLOCK = 32

#: Weight format → block edge b (one power-of-two scale per b×b block; N and K must be multiples of b).
#: ``bf16`` has no blocks (``None``). The V4.1 default is ``mxfp8-block32-ue8m0``; ``fp8-block128-ue8m0``
#: is the DeepSeek-V3 / V3.1 layout (``weight_scale_inv`` per 128×128 block, ``scale_fmt: ue8m0``).
WEIGHT_FORMAT_BLOCK: Final[dict[WeightFormat, int | None]] = {MXFP8: MXFP8_BLOCK, FP8_BLOCK128: FP8_BLOCK, BF16: None}
#: The format of DeepSeek-V4.1's ``fused_wqa_wkv`` (and the default of :class:`ProjectionSpec`).
V41_WEIGHT_FORMAT: Final[WeightFormat] = MXFP8


def weight_block(weight_format: str) -> int | None:
    """Block edge of ``weight_format`` (32 or 128), ``None`` for ``bf16``.

    Raises:
        ValueError: an unknown format (lists the known ones).
    """
    if weight_format not in WEIGHT_FORMAT_BLOCK:
        raise ValueError(f"weightFormat {weight_format!r} is unknown; use one of {sorted(WEIGHT_FORMAT_BLOCK)}")
    return WEIGHT_FORMAT_BLOCK[weight_format]


class ProjectionSpec(CamelModel):
    """The projection under test: ``Y[M, N] = X[M, K] · Wᵀ`` with ``K = hidden_size``, ``N = sum(output_sizes)``.

    ``output_sizes`` are the merged column blocks (``fused_wqa_wkv``: q_a 1280 + kv 512 = 1792).
    ``weight_format`` (:data:`WEIGHT_FORMAT_BLOCK`): ``mxfp8-block32-ue8m0`` (default) is FP8 e4m3 with
    one power-of-two (UE8M0) scale per 32×32 block, as the DeepSeek-V4.1 checkpoint stores
    ``fused_wqa_wkv``; ``fp8-block128-ue8m0`` the same with 128×128 blocks (DeepSeek-V3-style
    checkpoints); ``bf16`` unquantized. K and every output size must be multiples of the block edge.
    """

    name: str = Field(default="fused_wqa_wkv", min_length=1, max_length=63)
    """Name of the projection in reports and metrics (default fused_wqa_wkv)."""
    hidden_size: int = Field(default=5120, gt=0, le=65536)
    """K, the input width (hidden size) of the projection."""
    output_sizes: list[Annotated[int, Field(gt=0, le=65536)]] = Field(
        default_factory=lambda: [1280, 512], min_length=1, max_length=16
    )
    """The merged output column blocks; N is their sum (fused_wqa_wkv: q_a 1280 + kv 512)."""
    weight_format: WeightFormat = V41_WEIGHT_FORMAT
    """Weight storage: mxfp8-block32-ue8m0 (default, DeepSeek-V4.1: FP8 e4m3, one UE8M0 power-of-two scale per 32×32 block), fp8-block128-ue8m0 (DeepSeek-V3-style 128×128 blocks) or bf16; K and every output size must be multiples of the block edge."""
    activation_dtype: ActivationDtype = "bfloat16"
    """dtype of the activations X and the output Y."""

    @field_validator("name")
    @classmethod
    def _printable_name(cls, v: str) -> str:
        """The name is printed in reports and plots and is a metric label: no control or format characters
        (a newline, an escape sequence or a bidi override would forge or hide what a reader sees)."""
        bad = sorted({c for c in v if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")})
        if bad:
            shown = ", ".join(f"U+{ord(c):04X}" for c in bad[:5])
            raise ValueError(f"must hold printable characters only, got {shown}; use letters, digits, '_', '-' or '.'")
        return v

    @field_validator("output_sizes")
    @classmethod
    def _positive_outputs(cls, v: list[int]) -> list[int]:
        bad = [n for n in v if n <= 0]
        if bad:
            raise ValueError(f"every output size must be > 0, got {bad}")
        return v

    @model_validator(mode="after")
    def _block_aligned(self) -> ProjectionSpec:
        block = WEIGHT_FORMAT_BLOCK[self.weight_format]
        if block is None:
            return self
        others = ", ".join(f"{f} ({b})" for f, b in WEIGHT_FORMAT_BLOCK.items() if b and f != self.weight_format)
        if self.hidden_size % block:
            raise ValueError(
                f"hiddenSize={self.hidden_size} is not a multiple of {block}, the block size of weightFormat "
                f"{self.weight_format}; use a multiple of {block}, or weightFormat {others} or bf16"
            )
        bad = [n for n in self.output_sizes if n % block]
        if bad:
            raise ValueError(
                f"outputSizes {bad[:8]}{' …' if len(bad) > 8 else ''} are not multiples of {block}, the block size "
                f"of weightFormat {self.weight_format}; use multiples of {block}, or weightFormat {others} or bf16"
            )
        return self

    @property
    def output_size(self) -> int:
        """N, the merged output width (sum of ``output_sizes``)."""
        return sum(self.output_sizes)


class ParallelismSpec(CamelModel):
    """Tensor parallelism: the number of ranks the token dimension is split over."""

    tensor_parallel_size: int = Field(default=8, ge=1, le=64)
    """TP, the number of ranks; the split candidate gives each rank ceil(M/TP) token rows, then all-gathers the output."""
