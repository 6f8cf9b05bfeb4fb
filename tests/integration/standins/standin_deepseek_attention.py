"""Stand-in for ``vllm.models.deepseek_v41.attention``: only the module constant the spx plugin sets."""

_SHARD_FUSED_WQA_WKV_MIN_TOKENS = 2048
