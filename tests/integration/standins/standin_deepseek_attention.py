"""Stand-in for ``vllm.models.deepseek_v41.attention`` inside the stand-in ``vllm serve`` (the serving arms
need a GPU): only the module constant the spx plugin sets. The plugin against the real module of vLLM
0.33.0 is tested in ``tests/real_vllm/test_plugin.py``."""

_SHARD_FUSED_WQA_WKV_MIN_TOKENS = 2048
