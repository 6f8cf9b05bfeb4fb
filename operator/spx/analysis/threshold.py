"""Recommended split threshold (vLLM's ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS``) from a break-even.

vLLM splits a batch when ``num_tokens >= threshold``, so the recommended threshold is the smallest
allowed integer at or above the interpolated break-even:

- ``next-power-of-two``: the smallest ``2**k ≥ ceil(break_even)`` (how the seed PR chose 2048 from
  its ~1450-token estimate);
- ``next-multiple-of-tp``: the smallest multiple of the TP size ``≥ ceil(break_even)`` (no padding
  rows in the token split at the threshold);
- ``none``: ``ceil(break_even)``.
"""

from __future__ import annotations

import math

from spx.api.gate import ThresholdRounding
from spx.vocabulary import THRESHOLD_ROUNDINGS, one_of


def next_power_of_two(n: int) -> int:
    """Smallest power of two ``≥ n`` (``n`` itself when it is one).

    Raises:
        ValueError: when ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return 1 << (n - 1).bit_length()


def next_multiple(n: int, k: int) -> int:
    """Smallest multiple of ``k`` that is ``≥ n`` (``n ≥ 1``, ``k ≥ 1``).

    Raises:
        ValueError: when ``n < 1`` or ``k < 1``.
    """
    if n < 1 or k < 1:
        raise ValueError(f"need n >= 1 and k >= 1, got n={n}, k={k}")
    return -(-n // k) * k


def recommended_threshold_tokens(
    break_even_tokens: float, rounding: ThresholdRounding, tensor_parallel_size: int = 1
) -> int:
    """Threshold in tokens at or above ``break_even_tokens`` under a rounding rule (see module docstring).

    Args:
        break_even_tokens: interpolated break-even M (tokens, > 0, finite).
        rounding: ``next-power-of-two`` | ``next-multiple-of-tp`` | ``none``.
        tensor_parallel_size: TP (≥ 1), used by ``next-multiple-of-tp`` only.

    Raises:
        ValueError: on a non-finite or non-positive break-even, ``tensor_parallel_size < 1``, or an
            unknown rounding rule.
    """
    if not math.isfinite(break_even_tokens) or break_even_tokens <= 0:
        raise ValueError(f"break_even_tokens must be finite and > 0, got {break_even_tokens}")
    if tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
    n = math.ceil(break_even_tokens)
    if rounding == "next-power-of-two":
        return next_power_of_two(n)
    if rounding == "next-multiple-of-tp":
        return next_multiple(n, tensor_parallel_size)
    if rounding == "none":
        return n
    raise ValueError(f"unknown threshold rounding {rounding!r}; use {one_of(THRESHOLD_ROUNDINGS)}")
