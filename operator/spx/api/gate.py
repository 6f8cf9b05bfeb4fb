"""``spec.gate``: what a rollout needs from the measurement (threshold under test, speed and error bounds)."""

from __future__ import annotations

from pydantic import Field, StrictInt

from spx.api.base import CamelModel, FiniteFloat
from spx.vocabulary import ThresholdRounding as ThresholdRounding
from spx.vocabulary import ThresholdRule

#: vLLM ≥ 0.33 ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` (``vllm/models/deepseek_v41/attention.py``).
VLLM_DEFAULT_THRESHOLD_TOKENS = 2048

#: vLLM's default ``max_num_batched_tokens`` for its OpenAI-compatible server on a GPU of at least 70 GiB
#: that is not an A100 (H100, H200): ``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``
#: (``UsageContext.OPENAI_API_SERVER: 8192``; 2048 on smaller GPUs, 16384 for the offline ``LLM`` class).
#: No batch is larger, so a split threshold above it never engages.
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


class GateSpec(CamelModel):
    """What a rollout needs from the measurement.

    ``threshold_tokens`` is the deployed (or proposed) ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS``; the gate
    passes when the split candidate wins by at least ``min_speedup_at_or_above_threshold`` at every
    measured token count ≥ the threshold, and the split output matches the replicated one within
    ``max_abs_error``. A speed verdict that rests on a modelled gather, or on a CPU smoke run's
    timings, is reported as ``Inconclusive`` unless ``allow_modelled_gather`` /
    ``allow_cpu_timings`` is true (the latter exists for pipeline tests on machines without GPUs).
    """

    threshold_tokens: StrictInt = Field(default=VLLM_DEFAULT_THRESHOLD_TOKENS, gt=0, le=1 << 24)
    """The deployed or proposed _SHARD_FUSED_WQA_WKV_MIN_TOKENS (vLLM's default 2048) the gate judges."""
    min_speedup_at_or_above_threshold: FiniteFloat = Field(default=1.0, gt=0.0, le=100.0)
    """Smallest speedup (replicated / split time) the split must reach at every measured token count ≥ thresholdTokens."""
    max_abs_error: FiniteFloat = Field(default=0.05, ge=0.0)
    """Largest allowed max |split − replicated| over the outputs."""
    allow_modelled_gather: bool = False
    """Allow a Pass or Fail on speed that rests on a modelled all-gather (otherwise Inconclusive)."""
    allow_cpu_timings: bool = False
    """Allow a Pass or Fail on CPU timings (for pipeline tests on machines without GPUs; otherwise Inconclusive)."""
    threshold_rounding: ThresholdRounding = "next-power-of-two"
    """How the recommended threshold is rounded up from the crossover: next-power-of-two, next-multiple-of-tp or none."""
    max_num_batched_tokens: StrictInt | None = Field(default=None, gt=0, le=1 << 24)
    """The deployment's largest batch (vLLM --max-num-batched-tokens); unset: the value in spec.serving.extraArgs, else vLLM's default 8192. A Pass for a thresholdTokens above it is refused: the split would never engage."""
    threshold_rule: ThresholdRule = "break-even"
    """break-even (round the interpolated break-even up) or lower-bound (the smallest measured count from which the speedup's 95 % lower bound stays >= 1, then rounded)."""
