"""Per-candidate sample statistics: median, quartiles and the relative interquartile range.

Quartiles use Python's ``statistics.quantiles(data, n=4, method="inclusive")``: linear interpolation
between order statistics with the sample minimum and maximum as the 0th and 100th percentiles
(Hyndman & Fan 1996 type 7, the default of NumPy's ``percentile`` and of R's ``quantile``). A single
sample is its own median and both of its quartiles.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from spx.api.result import CandidateStats


def _checked(samples_us: Iterable[float]) -> list[float]:
    values = [float(x) for x in samples_us]
    if not values:
        raise ValueError("no samples: at least one timing sample is needed")
    bad = [x for x in values if not math.isfinite(x) or x < 0]
    if bad:
        raise ValueError(f"timing samples must be finite and >= 0 µs, got {bad[:5]}")
    return values


def median(samples_us: Sequence[float]) -> float:
    """Median of timing samples (µs in, µs out).

    Raises:
        ValueError: on an empty sequence or a negative / non-finite sample.
    """
    return statistics.median(_checked(samples_us))


def quartiles(samples_us: Sequence[float]) -> tuple[float, float, float]:
    """``(q1, median, q3)`` of timing samples, in the samples' unit (µs).

    Method: ``statistics.quantiles(method="inclusive")`` (type-7 linear interpolation, see the
    module docstring); one sample gives ``(x, x, x)``.

    Raises:
        ValueError: on an empty sequence or a negative / non-finite sample.
    """
    values = _checked(samples_us)
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def iqr_pct(samples_us: Sequence[float]) -> float:
    """Relative spread ``(q3 − q1) / median × 100`` in percent (quartiles as in :func:`quartiles`).

    Raises:
        ValueError: on an empty sequence, a negative / non-finite sample, or a median of 0.
    """
    q1, q2, q3 = quartiles(samples_us)
    if q2 <= 0:
        raise ValueError("median is 0 µs: the relative spread is undefined")
    return (q3 - q1) / q2 * 100.0


def candidate_stats(samples_us: Sequence[float], kernels: Sequence[str] = ()) -> CandidateStats:
    """Summarise one candidate's samples at one token count as a :class:`~spx.api.result.CandidateStats`.

    Args:
        samples_us: per-sample time in µs (each the max over ranks), in measurement order; kept as is.
        kernels: kernel names the timer saw for this candidate (copied into the result).

    Returns:
        ``CandidateStats`` with ``median_us``, ``q1_us``, ``q3_us`` (µs) and ``iqr_pct`` (percent).

    Raises:
        ValueError: on an empty sequence, a negative / non-finite sample, or a median of 0.
    """
    values = _checked(samples_us)
    q1, q2, q3 = quartiles(values)
    return CandidateStats(
        samples_us=values,
        median_us=q2,
        q1_us=q1,
        q3_us=q3,
        iqr_pct=iqr_pct(values),
        kernels=list(kernels),
    )
