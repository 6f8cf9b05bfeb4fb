"""Fit the all-gather model ``t(M) = latency + (TP − 1)/TP · bytes(M) / bus_bandwidth`` to measurements.

Used to replace :class:`spx.api.gather_model.GatherModelSpec`'s priors with a fit (issue "Measure the
crossover on 8× H200"; the H20-calibrated prior of :mod:`spx.analysis.gather_prior`): ordinary least
squares of time (µs) on ``x = (TP − 1)/TP · bytes`` gives the intercept (latency, µs) and the slope
(µs per byte = 1e6 / bus bandwidth in B/s), the nccl-tests ``busbw`` convention (NVIDIA/nccl-tests
``doc/PERFORMANCE.md``). With the latency known, :func:`fit_gather_bandwidth` fits the slope alone.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GatherFit:
    """Fitted model: ``latency_us`` (µs), ``bus_bandwidth_gbps`` (GB/s, 10⁹ B/s) and the fit's residuals.

    ``residuals_us[i]`` = measured − modelled time (µs) of the i-th input point, in input order;
    ``max_rel_residual`` = the largest ``|residual| / measured``. ``free_parameters`` is 2 for
    :func:`fit_gather_model`, 1 for :func:`fit_gather_bandwidth`: with ``points == free_parameters``
    the line passes through every point and its residuals are 0 by construction (they test nothing).
    """

    latency_us: float
    bus_bandwidth_gbps: float
    max_rel_residual: float
    points: int
    residuals_us: tuple[float, ...] = ()
    free_parameters: int = 2

    def predicted_us(self, total_bytes: float, tensor_parallel_size: int) -> float:
        """Modelled time (µs) of gathering ``total_bytes`` (the whole output) over TP ranks."""
        tp = tensor_parallel_size
        return self.latency_us + (tp - 1) / tp * total_bytes / (self.bus_bandwidth_gbps * 1e3)


def _check(total_bytes: Sequence[int], times_us: Sequence[float], tensor_parallel_size: int) -> list[float]:
    if len(total_bytes) != len(times_us):
        raise ValueError(f"{len(total_bytes)} sizes but {len(times_us)} times")
    if tensor_parallel_size < 2:
        raise ValueError(f"an all-gather needs TP >= 2, got {tensor_parallel_size}")
    return [(tensor_parallel_size - 1) / tensor_parallel_size * b for b in total_bytes]


def _result(xs: list[float], times_us: Sequence[float], latency: float, slope: float, free: int) -> GatherFit:
    residuals = tuple(y - (latency + slope * x) for x, y in zip(xs, times_us, strict=True))
    rel = [abs(r) / y for r, y in zip(residuals, times_us, strict=True) if y > 0]
    return GatherFit(
        latency_us=latency,
        bus_bandwidth_gbps=1e6 / slope / 1e9,
        max_rel_residual=max(rel) if rel else 0.0,
        points=len(xs),
        residuals_us=residuals,
        free_parameters=free,
    )


def fit_gather_model(total_bytes: Sequence[int], times_us: Sequence[float], tensor_parallel_size: int) -> GatherFit:
    """Least-squares fit of latency and bus bandwidth to measured all-gather times.

    Args:
        total_bytes: bytes of the gathered output ``[M_pad, N]`` per measurement.
        times_us: the measured all-gather time (µs) for each.
        tensor_parallel_size: TP ≥ 2 (ranks taking part).

    Returns:
        :class:`GatherFit`; a negative intercept is reported as latency 0 (residuals are those of
        the unclamped line).

    Raises:
        ValueError: fewer than two distinct sizes, mismatched lengths, TP < 2, or a fit with a
            non-positive slope (time not growing with bytes: the sizes are latency-bound only).
    """
    xs = _check(total_bytes, times_us, tensor_parallel_size)
    if len(set(xs)) < 2:
        raise ValueError("need at least two distinct message sizes to fit latency and bandwidth")
    n = len(xs)
    mx, my = sum(xs) / n, sum(times_us) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, times_us, strict=True)) / sxx
    if slope <= 0:
        raise ValueError("all-gather time does not grow with message size: extend the sweep to larger sizes")
    intercept = my - slope * mx
    fit = _result(xs, times_us, intercept, slope, free=2)
    return GatherFit(max(0.0, intercept), fit.bus_bandwidth_gbps, fit.max_rel_residual, n, fit.residuals_us, 2)


def fit_gather_bandwidth(
    total_bytes: Sequence[int], times_us: Sequence[float], tensor_parallel_size: int, latency_us: float
) -> GatherFit:
    """Least-squares fit of the bus bandwidth alone, the latency held at ``latency_us`` (µs).

    For a regime with too few sizes to fit two parameters (one size): the slope minimising
    ``Σ (t − latency − slope · x)²`` is ``Σ x (t − latency) / Σ x²``.

    Raises:
        ValueError: no points, mismatched lengths, TP < 2, a negative latency, or times that do not
            exceed the latency (no bandwidth term left to fit).
    """
    xs = _check(total_bytes, times_us, tensor_parallel_size)
    if not xs or not any(xs):
        raise ValueError("need at least one non-empty message size to fit a bandwidth")
    if latency_us < 0:
        raise ValueError(f"latency_us must be >= 0, got {latency_us}")
    slope = sum(x * (y - latency_us) for x, y in zip(xs, times_us, strict=True)) / sum(x * x for x in xs)
    if slope <= 0:
        raise ValueError(f"the times do not exceed the held latency {latency_us} µs: no bandwidth to fit")
    return _result(xs, times_us, latency_us, slope, free=1)
