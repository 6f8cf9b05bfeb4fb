"""Fit the all-gather model ``t(M) = latency + (TP − 1)/TP · bytes(M) / bus_bandwidth`` to measurements.

Used to replace :class:`spx.api.spec.GatherModelSpec`'s priors with a measured fit (issue "Measure the
crossover on 8× H200"): ordinary least squares of time (µs) on ``x = (TP − 1)/TP · bytes`` gives the
intercept (latency, µs) and the slope (µs per byte = 1e6 / bus bandwidth in B/s), the nccl-tests
``busbw`` convention (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GatherFit:
    """Fitted model: ``latency_us`` (µs), ``bus_bandwidth_gbps`` (GB/s, 10⁹ B/s), worst relative residual."""

    latency_us: float
    bus_bandwidth_gbps: float
    max_rel_residual: float
    points: int


def fit_gather_model(total_bytes: Sequence[int], times_us: Sequence[float], tensor_parallel_size: int) -> GatherFit:
    """Least-squares fit of latency and bus bandwidth to measured all-gather times.

    Args:
        total_bytes: bytes of the gathered output ``[M_pad, N]`` per measurement.
        times_us: the measured all-gather time (µs) for each.
        tensor_parallel_size: TP ≥ 2 (ranks taking part).

    Raises:
        ValueError: fewer than two distinct sizes, mismatched lengths, TP < 2, or a fit with a
            non-positive slope (time not growing with bytes: the sizes are latency-bound only).
    """
    if len(total_bytes) != len(times_us):
        raise ValueError(f"{len(total_bytes)} sizes but {len(times_us)} times")
    if tensor_parallel_size < 2:
        raise ValueError(f"an all-gather needs TP >= 2, got {tensor_parallel_size}")
    xs = [(tensor_parallel_size - 1) / tensor_parallel_size * b for b in total_bytes]
    if len(set(xs)) < 2:
        raise ValueError("need at least two distinct message sizes to fit latency and bandwidth")
    n = len(xs)
    mx, my = sum(xs) / n, sum(times_us) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, times_us, strict=True)) / sxx
    if slope <= 0:
        raise ValueError("all-gather time does not grow with message size: extend the sweep to larger sizes")
    intercept = my - slope * mx
    residuals = [abs(y - (intercept + slope * x)) / y for x, y in zip(xs, times_us, strict=True) if y > 0]
    return GatherFit(
        latency_us=max(0.0, intercept),
        bus_bandwidth_gbps=1e6 / slope / 1e9,
        max_rel_residual=max(residuals) if residuals else 0.0,
        points=n,
    )
