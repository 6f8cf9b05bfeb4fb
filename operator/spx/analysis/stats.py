"""spx's one statistics module: the quantile, the percentile bootstrap, and per-candidate sample statistics.

- :func:`quantile`: linear interpolation between order statistics with the sample minimum and maximum as the
  0th and 100th percentiles (Hyndman & Fan 1996 type 7, the default of NumPy's ``percentile`` and of R's
  ``quantile``); :func:`quartiles` are its 0.25/0.5/0.75 points (``statistics.quantiles(method="inclusive")``
  computes the same). A single sample is its own median and both of its quartiles.
- :func:`bootstrap`: the percentile bootstrap (Efron & Tibshirani 1993, ch. 13) of any statistic of one or
  several samples, *paired* (one index draw applied to every sample: sample ``i`` of each comes from the same
  round ``i``, so a drift shared by a round stays paired) or *independent* (one draw per sample, in the
  samples' order). Every interval of ``spx.analysis`` comes from it: :data:`RESAMPLES` resamples at
  :data:`LEVEL` unless the caller asks for another level (the step A/B's sequential looks,
  :mod:`spx.analysis.step`). :func:`resample_indices` yields the draws themselves, for a caller that computes
  several statistics on the same draws (the step A/B's joint bootstrap over lengths).
  Deterministic: ``random.Random(seed)``; the draw of a sample of ``n`` is ``rng.choices(range(n), k=n)``.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from spx.api.result import CandidateStats

#: Bootstrap resamples of every interval (one count for every caller). 2000: the step A/B's intervals are
#: taken at 1 − 0.05/K (K looks, e.g. 0.99), whose tails need ≥ 10 resamples each; on the committed dense
#: H200 humming sweep the speed-up intervals' ends move by at most 0.13 % between 500 and 4000 resamples.
RESAMPLES = 2000
#: Two-sided coverage of an interval unless a caller asks for another.
LEVEL = 0.95


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q``-quantile (``0 ≤ q ≤ 1``) of ``values``, type 7 (module docstring); any order, any unit.

    Raises:
        ValueError: no values, or ``q`` outside [0, 1].
    """
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values: at least one is needed")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1], got {q}")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Interval:
    """A statistic (``value``) and its percentile-bootstrap interval ``low ≤ value ≤ high``, in the samples' unit."""

    value: float
    low: float
    high: float

    def covers(self, x: float, tolerance: float = 0.0) -> bool:
        """True when ``[low − tolerance, high + tolerance]`` contains ``x``."""
        return self.low - tolerance <= x <= self.high + tolerance


def _check_level(level: float, resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def resample_indices(sizes: Sequence[int], *, seed: int, resamples: int = RESAMPLES) -> Iterator[list[list[int]]]:
    """``resamples`` draws, each one index list per size: ``rng.choices(range(n), k=n)`` in ``sizes``' order.

    A paired bootstrap passes one size (the rounds) and applies its list to every sample.

    Raises:
        ValueError: ``resamples < 1`` or a size < 1.
    """
    if resamples < 1 or any(n < 1 for n in sizes):
        raise ValueError(f"need resamples >= 1 and sizes >= 1, got {resamples} and {list(sizes)[:8]}")
    rng = random.Random(seed)
    ranges = [range(n) for n in sizes]
    for _ in range(resamples):
        yield [rng.choices(r, k=len(r)) for r in ranges]


def percentile_interval(value: float, replicates: Iterable[float], level: float = LEVEL) -> Interval:
    """The percentile interval of bootstrap ``replicates`` at two-sided ``level`` (type-7 quantiles at
    ``(1 − level)/2`` and ``(1 + level)/2``), widened to contain ``value`` (the statistic on the sample).

    Raises:
        ValueError: no replicates or a level outside (0, 1).
    """
    _check_level(level, 1)
    xs = sorted(replicates)
    alpha = (1.0 - level) / 2.0
    low, high = quantile(xs, alpha), quantile(xs, 1.0 - alpha)
    return Interval(value, min(low, value), max(high, value))


def bootstrap(samples: Sequence[Sequence[float]], statistic: Callable[..., float], *, paired: bool,
              level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """Percentile bootstrap of ``statistic(*samples)`` (module docstring).

    Args:
        samples: one or more samples (any unit); paired samples must have one length.
        statistic: called with one sequence per sample (resampled), returns a float.
        paired: one draw of indices applied to every sample (rounds), else one draw per sample.
        level: two-sided confidence level in (0, 1).
        resamples: bootstrap resamples (≥ 1).
        seed: of the draws (same inputs and seed → same interval).

    Returns:
        :class:`Interval`: ``value`` = the statistic on the samples, the interval widened to contain it.

    Raises:
        ValueError: no sample, an empty sample, paired samples of different lengths, a level outside (0, 1)
            or ``resamples < 1``.
    """
    _check_level(level, resamples)
    if not samples or any(len(s) == 0 for s in samples):
        raise ValueError("the bootstrap needs at least one non-empty sample")
    if paired and len({len(s) for s in samples}) != 1:
        raise ValueError(f"paired samples must have one length, got {[len(s) for s in samples]}")
    value = statistic(*samples)
    sizes = [len(samples[0])] if paired else [len(s) for s in samples]
    reps: list[float] = []
    for draw in resample_indices(sizes, seed=seed, resamples=resamples):
        idxs = [draw[0]] * len(samples) if paired else draw
        reps.append(statistic(*([s[i] for i in idx] for s, idx in zip(samples, idxs, strict=True))))
    return percentile_interval(value, reps, level)


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

    Method: :func:`quantile` at 0.25 and 0.75 and the median (type-7 linear interpolation, see the
    module docstring); one sample gives ``(x, x, x)``.

    Raises:
        ValueError: on an empty sequence or a negative / non-finite sample.
    """
    values = sorted(_checked(samples_us))
    return quantile(values, 0.25), statistics.median(values), quantile(values, 0.75)


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
