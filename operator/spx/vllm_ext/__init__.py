"""What runs inside vLLM's own processes (API server, engine core, every TP worker).

- :mod:`spx.vllm_ext.plugin`: the ``vllm.general_plugins`` entry point ``spx_shard_threshold`` (sets the
  split threshold from ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` at startup; the serving A/B's arms);
- :mod:`spx.vllm_ext.worker`: the worker extension (``--worker-extension-cls spx.vllm_ext.worker.SplitSwitch``)
  the one-server step A/B switches the split with, per request, over ``POST /collective_rpc``;
- :mod:`spx.vllm_ext.shard`: the pad-free shard the extension swaps in for vLLM's ``sp_shard``.

A layer of its own (pyproject's import contract): it imports only the standard library, :mod:`spx.vocabulary`
and, lazily inside functions, torch and vLLM; nothing of spx imports it (vLLM loads it by name).
"""
