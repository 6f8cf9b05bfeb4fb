"""The input-projection stage of DeepSeek-V4.1's attention: spec section and result document.

vLLM 0.33's ``DeepseekV4Attention._run_parallel_input_projections``
(``vllm/models/deepseek_v41/attention.py``) runs, per layer:

- ``fused_wqa_wkv`` (the projection spx measures; split by token from
  ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS``) on the current stream;
- in KV-source layers the compressor's ``kv_score = torch.mm(h, fused_wkv_wgate.weight.T,
  out_dtype=torch.float32)`` (bf16, unquantized; ``[head_dim, head_dim]`` = 2 × 512 outputs when the
  compress ratio > 1, else 512: ``vllm/models/deepseek_v41/compressor.py``);
- in index-source layers the indexer's ``weights_proj`` (bf16 ``ReplicatedLinear``, hidden → n_head
  = 32);
- the two light GEMMs through ``execute_in_parallel`` (``vllm/utils/multi_stream_utils.py``): on
  auxiliary streams while ``num_tokens <= VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD`` (1024), sequentially
  above.

DeepSeek-V4.1 (40 layers) has four kinds (:data:`V41_LAYER_KINDS`): plain (32 layers), KV-source
with a 2 × 512 compressor and the indexer (layers 2, 8, 14), KV-source with a 512 compressor and the
indexer (layer 20), indexer-only (24, 28, 32, 36).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from spx.api.base import CamelModel
from spx.vocabulary import (
    ExecutionMode,
    GatherSource,
    ResolvedDevice,
    ResolvedGemmBackend,
    ResolvedTimer,
    StageStreams,
)

#: The indexer's heads (``weights_proj`` output size) in DeepSeek-V4.1.
V41_INDEXER_HEADS = 32
#: The compressor's output width with compress ratio > 1 (``[head_dim, head_dim]``, head_dim 512).
V41_COMPRESSOR_WIDTH = 1024
_KV_SOURCE = (2, 8, 14)
_HALF = (20,)
_INDEXER_ONLY = (24, 28, 32, 36)
V41_NUM_LAYERS = 40


class LayerKindSpec(CamelModel):
    """One kind of attention layer: which layers, and the light GEMMs beside ``fused_wqa_wkv``.

    ``compressor_output_size`` 0: no compressor; ``indexer_heads`` 0: no indexer.
    """

    name: str = Field(min_length=1, max_length=63)
    """Name of the kind (plain, kv-source, kv-source-half, indexer-only)."""
    layers: list[int] = Field(min_length=1, max_length=1024)
    """Layer indices of this kind."""
    compressor_output_size: int = Field(default=0, ge=0, le=65536)
    """Output width of the compressor's fp32-output torch.mm (0: none)."""
    indexer_heads: int = Field(default=0, ge=0, le=4096)
    """Output width of the indexer's bf16 weights_proj (0: none)."""


def v41_layer_kinds() -> list[LayerKindSpec]:
    """DeepSeek-V4.1's four layer kinds over its 40 layers (``vllm/models/deepseek_v41/``: compressor.py, attention.py)."""
    special = set(_KV_SOURCE + _HALF + _INDEXER_ONLY)
    return [
        LayerKindSpec(name="plain", layers=[i for i in range(V41_NUM_LAYERS) if i not in special]),
        LayerKindSpec(name="kv-source", layers=list(_KV_SOURCE), compressor_output_size=V41_COMPRESSOR_WIDTH,
                      indexer_heads=V41_INDEXER_HEADS),
        LayerKindSpec(name="kv-source-half", layers=list(_HALF), compressor_output_size=V41_COMPRESSOR_WIDTH // 2,
                      indexer_heads=V41_INDEXER_HEADS),
        LayerKindSpec(name="indexer-only", layers=list(_INDEXER_ONLY), indexer_heads=V41_INDEXER_HEADS),
    ]


class StageSpec(CamelModel):
    """Time the whole input-projection stage per layer kind (``spx stage``; module docstring).

    ``tokens`` default to the sweep's; ``multi_stream_threshold`` is
    ``VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD``; ``chunk_tokens`` the prefill chunk whose per-chunk
    total over all layers is reported (vLLM's default ``max_num_batched_tokens`` 8192).
    """

    layer_kinds: list[LayerKindSpec] = Field(default_factory=v41_layer_kinds, min_length=1, max_length=16)
    """Layer kinds; default: DeepSeek-V4.1's four (plain 32, kv-source 3, kv-source-half 1, indexer-only 4)."""
    tokens: list[int] | None = Field(default=None, min_length=1, max_length=64)
    """Token counts; unset: sweep.tokens."""
    multi_stream_threshold: int = Field(default=1024, ge=0, le=1 << 20)
    """VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD: light GEMMs on auxiliary streams at or below, sequential above."""
    chunk_tokens: int = Field(default=8192, ge=1, le=1 << 20)
    """Prefill chunk (tokens) whose total over all layers is reported."""

    @model_validator(mode="after")
    def _distinct_layers(self) -> StageSpec:
        seen: dict[int, str] = {}
        for kind in self.layer_kinds:
            for layer in kind.layers:
                if layer in seen:
                    raise ValueError(f"stage.layerKinds: layer {layer} is in both {seen[layer]!r} and {kind.name!r}; "
                                     "give each layer one kind")
                seen[layer] = kind.name
        return self


class StageTimes(CamelModel):
    """One candidate of one layer kind at one token count: medians in µs per layer."""

    gpu_us: float = Field(ge=0)
    """GPU span (first kernel start → last kernel end, all streams): the GPU-bound time."""
    host_us: float | None = Field(default=None, ge=0)
    """Host issue time with the GPU kept busy: the host-bound regime's time."""
    host_bound_us: float | None = Field(default=None, ge=0)
    """Deprecated, no longer written: median of max(host, GPU span), which describes no regime (the host-bound regime uses hostUs); kept so older stage.json files load."""
    modelled_gather_us: float = Field(default=0.0, ge=0)
    """Modelled all-gather GPU time included in gpu_us (0: none or measured)."""
    modelled_gather_host_us: float = Field(default=0.0, ge=0)
    """Modelled all-gather host time included in host_us."""


class StageRow(CamelModel):
    """One layer kind at one token count: every candidate's times and how it ran."""

    kind: str
    layers: int = Field(ge=1)
    tokens: int = Field(gt=0)
    execution: ExecutionMode
    streams: StageStreams
    candidates: dict[str, StageTimes]


class StageResult(CamelModel):
    """``spx stage``'s document: rows per layer kind and token count (rank 0)."""

    schema_version: Literal["spx.dev/stage-result/v1"] = "spx.dev/stage-result/v1"
    gemm_backend: ResolvedGemmBackend
    gather_source: GatherSource
    device: ResolvedDevice
    timer: ResolvedTimer
    chunk_tokens: int
    rows: list[StageRow] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    host_cpu: str | None = None
