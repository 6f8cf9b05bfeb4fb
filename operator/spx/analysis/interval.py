"""Per-point confidence intervals of the speed-up: the samples' bootstrap and the modelled gather's uncertainty.

Measurement (:func:`bootstrap_speedup`): the bench times both candidates in every *round* (they
alternate within a round, which goes first alternates too: :func:`spx.bench.timing.alternating`), and
the result document keeps every sample in measurement order, so sample ``i`` of ``replicated`` and
sample ``i`` of ``split`` come from the same round. Rounds are resampled with replacement (a paired
bootstrap, Efron & Tibshirani 1993, ch. 13; percentile interval) and the statistic is the one the
status reports, ``median(replicated) / median(split)``: a drift shared by both candidates of a round
(clocks, a neighbour's load) stays paired instead of widening the interval. When the two candidates do
not have the same number of samples they are resampled independently. The interval is widened to
contain the reported point estimate. Deterministic: a fixed seed. The bootstrap is spx's one
(:func:`spx.analysis.stats.bootstrap`).

Modelled gather (:func:`gather_band_us`): with fewer GPUs than TP the split sample is ``shard GEMM +
modelled gather`` (:mod:`spx.bench.kernel`). The gather is then known only as well as its prior:

- the H20-calibrated prior's own standard error: the custom-all-gather regime is a least-squares
  line through 9 points (:mod:`spx.analysis.gather_prior`); its prediction standard error at ``x``
  bytes is ``s · sqrt(1/n + (x − x̄)² / Sxx)`` (ordinary least squares), taken at ``z = 1.96`` (95 %).
  The NCCL regime is the line through its 2 points (no residual degree of freedom): it is given the
  custom regime's residual standard deviation ``s`` as a stated stand-in;
- the spread between priors: the datasheet prior's gather (10 µs + 360 GB/s).

The band is the hull of ``h20 ± z·se`` and the datasheet gather; the split time moves by the band's
distance from the gather in the samples, the replicated time not at all. Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spx.analysis.gather_prior import GatherPriorFit
from spx.analysis.stats import LEVEL, RESAMPLES, bootstrap
from spx.api.gather_model import GatherModelSpec, GatherRegime
from spx.api.result import PointResult
from spx.api.spec import ExperimentSpec

#: Two-sided 95 % normal quantile (the prior's standard errors are turned into a 95 % band with it).
Z95 = 1.959963984540054
#: Bootstrap resamples and level per point: spx's one count and level (:mod:`spx.analysis.stats`).
DEFAULT_RESAMPLES = RESAMPLES
DEFAULT_LEVEL = LEVEL
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

#: The H20-calibrated prior's custom-regime least-squares fit, for its prediction standard error:
#: (points n, residual standard deviation s in µs, mean x̄ in bytes, Sxx in bytes²), x = (TP−1)/TP ·
#: gathered bytes. Computed by :func:`spx.analysis.gather_prior.fit_h20_gather_prior` on the seed's
#: 8× H20 table (log-log shard interpolation); ``tests/unit/test_analysis_interval.py`` re-fits the
#: shipped table and checks these.
H20_CUSTOM_FIT_STATS: tuple[int, float, float, float] = (9, 3.454, 2.6984e6, 1.52599e14)


def regime_fit_stats(fit: GatherPriorFit, regime: GatherRegime = "custom") -> tuple[int, float, float, float]:
    """``(n, s µs, x̄ bytes, Sxx bytes²)`` of one regime of a gather-prior fit (for :func:`h20_gather_se_us`).

    ``s = sqrt(Σ residual² / (n − 2))`` (ordinary least squares, 2 parameters), ``x = (TP−1)/TP · bytes``.

    Raises:
        ValueError: the regime has fewer than 3 points (no residual degree of freedom).
    """
    ds = [d for d in fit.derived if d.regime == regime]
    if len(ds) < 3:
        raise ValueError(f"{regime} regime: {len(ds)} point(s); a standard error needs at least 3")
    tp = fit.tensor_parallel_size
    xs = [(tp - 1) / tp * d.total_bytes for d in ds]
    n = len(xs)
    mean_x = sum(xs) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    s = math.sqrt(sum(r * r for r in fit.regimes[regime].fit.residuals_us) / (n - 2))
    return n, s, mean_x, sxx


@dataclass(frozen=True)
class SpeedupInterval:
    """A speed-up (dimensionless, replicated / split) and its interval ``low ≤ value ≤ high``."""

    value: float
    low: float
    high: float

    def overlaps_one(self) -> bool:
        """True when the interval contains 1.0 (the split may win or lose)."""
        return self.low <= 1.0 <= self.high


def bootstrap_speedup(
    replicated_us: Sequence[float],
    split_us: Sequence[float],
    *,
    level: float = DEFAULT_LEVEL,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> SpeedupInterval:
    """Paired-round percentile bootstrap of ``median(replicated) / median(split)`` (method: module docstring).

    Args:
        replicated_us, split_us: per-sample µs (each the max over ranks) in measurement order; paired
            by index when the lengths are equal.
        level: two-sided confidence level in (0, 1).
        resamples: bootstrap resamples (≥ 1).
        seed: of the resampling (same inputs and seed → same interval).

    Returns:
        :class:`SpeedupInterval`; one sample each gives a zero-width interval.

    Raises:
        ValueError: an empty sample list, a sample that is not finite and > 0, a level outside (0, 1)
            or ``resamples < 1``.
    """
    for name, values in (("replicated_us", replicated_us), ("split_us", split_us)):
        if not values:
            raise ValueError(f"{name}: no samples; the bootstrap needs at least one per candidate")
        bad = [v for v in values if not (math.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"{name}: samples must be finite and > 0 µs, got {bad[:5]}")
    iv = bootstrap([replicated_us, split_us], lambda r, s: statistics.median(r) / statistics.median(s),
                   paired=len(replicated_us) == len(split_us), level=level, resamples=resamples, seed=seed)
    return SpeedupInterval(iv.value, iv.low, iv.high)


@dataclass(frozen=True)
class DeltaInterval:
    """A difference ``split − replicated`` in µs (negative: the split is shorter) and its interval ``low ≤ value ≤ high``."""

    value: float
    low: float
    high: float

    def straddles_zero(self) -> bool:
        """True when the interval contains 0 (the split may be shorter or longer)."""
        return self.low <= 0.0 <= self.high


def bootstrap_difference(
    replicated_us: Sequence[float],
    split_us: Sequence[float],
    *,
    level: float = DEFAULT_LEVEL,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> DeltaInterval:
    """Paired-round percentile bootstrap of ``median(split) − median(replicated)`` (µs; method: module docstring).

    The Δg of a point (GPU spans) or its Δh (host issue times): sample ``i`` of both candidates comes from
    round ``i`` and rounds are resampled together; unequal lengths are resampled independently. The
    interval is widened to contain the point estimate. Deterministic for a given ``seed``.

    Args:
        replicated_us, split_us: per-sample µs (finite, ≥ 0: a host timer may read 0) in measurement order.
        level: two-sided confidence level in (0, 1).
        resamples: bootstrap resamples (≥ 1).
        seed: of the resampling.

    Raises:
        ValueError: an empty sample list, a sample that is not finite and ≥ 0, a level outside (0, 1) or
            ``resamples < 1``.
    """
    for name, values in (("replicated_us", replicated_us), ("split_us", split_us)):
        if not values:
            raise ValueError(f"{name}: no samples; the bootstrap needs at least one per candidate")
        bad = [v for v in values if not (math.isfinite(v) and v >= 0)]
        if bad:
            raise ValueError(f"{name}: samples must be finite and >= 0 µs, got {bad[:5]}")
    iv = bootstrap([replicated_us, split_us], lambda r, s: statistics.median(s) - statistics.median(r),
                   paired=len(replicated_us) == len(split_us), level=level, resamples=resamples, seed=seed)
    return DeltaInterval(iv.value, iv.low, iv.high)


def h20_gather_se_us(padded_tokens: int, output_size: int, dtype_bytes: int, tp: int,
                     stats: tuple[int, float, float, float] = H20_CUSTOM_FIT_STATS) -> float:
    """Standard error (µs) of the H20-calibrated prior's gather at ``[padded_tokens, output_size]``.

    Custom regime: ``s · sqrt(1/n + (x − x̄)² / Sxx)`` with ``x = (TP−1)/TP · bytes`` and the fit's
    ``stats = (n, s, x̄, Sxx)`` (:data:`H20_CUSTOM_FIT_STATS`); the NCCL regime (an exact 2-point line)
    gets ``s`` (module docstring). ``tp < 2`` has no gather: 0.

    Raises:
        ValueError: ``padded_tokens < 0`` or a non-positive ``output_size`` / ``dtype_bytes``.
    """
    if padded_tokens < 0 or output_size < 1 or dtype_bytes < 1:
        raise ValueError(f"need padded_tokens >= 0, output_size >= 1, dtype_bytes >= 1; got "
                         f"{padded_tokens}, {output_size}, {dtype_bytes}")
    if tp < 2:
        return 0.0
    n, s, mean_x, sxx = stats
    regime = GatherModelSpec().regime(padded_tokens, output_size, dtype_bytes, tp)
    if regime != "custom":
        return s
    x = (tp - 1) / tp * padded_tokens * output_size * dtype_bytes
    return s * math.sqrt(1.0 / n + (x - mean_x) ** 2 / sxx)


@dataclass(frozen=True)
class GatherBand:
    """The modelled gather at one point (µs): what the samples carry and the band it may lie in."""

    used_us: float
    low_us: float
    high_us: float
    own_low_us: float
    own_high_us: float


def gather_band_us(padded_tokens: int, output_size: int, dtype_bytes: int, tp: int,
                   used: GatherModelSpec, z: float = Z95) -> GatherBand:
    """The band of a modelled gather (µs): ``used``'s own uncertainty and the hull over both priors.

    ``own``: for the H20-calibrated prior (no explicit latency/bandwidth) ``gather ± z·se``
    (:func:`h20_gather_se_us`); other priors have no fit, so no own width. The hull adds the other
    prior's gather (h20-calibrated ± z·se, datasheet). Low ends are clamped at 0.

    Raises:
        ValueError: see :func:`h20_gather_se_us`.
    """
    g = used.gather_us(padded_tokens, output_size, dtype_bytes, tp)
    se = h20_gather_se_us(padded_tokens, output_size, dtype_bytes, tp)
    fitted = used.prior == "h20-calibrated" and used.latency_us is None and used.bus_bandwidth_gbps is None
    own_lo, own_hi = (g - z * se, g + z * se) if fitted else (g, g)
    h20 = GatherModelSpec(prior="h20-calibrated").gather_us(padded_tokens, output_size, dtype_bytes, tp)
    sheet = GatherModelSpec(prior="datasheet").gather_us(padded_tokens, output_size, dtype_bytes, tp)
    lo = min(own_lo, h20 - z * se, sheet)
    hi = max(own_hi, h20 + z * se, sheet)
    return GatherBand(g, max(0.0, lo), hi, max(0.0, own_lo), own_hi)


@dataclass(frozen=True)
class PointInterval:
    """The intervals of one point's speed-up.

    Attributes:
        tokens: M.
        measured: the samples' bootstrap (:func:`bootstrap_speedup`).
        own: ``measured`` widened by the used prior's own uncertainty (== ``measured`` for a measured
            gather): the interval the crossover and its confidence use.
        any_prior: ``own`` widened to every prior spx ships: the interval the indifference band uses.
        gather: the modelled gather's band, ``None`` for a measured gather.
    """

    tokens: int
    measured: SpeedupInterval
    own: SpeedupInterval
    any_prior: SpeedupInterval
    gather: GatherBand | None = None


def _shift(iv: SpeedupInterval, split_median_us: float, slower_us: float, faster_us: float) -> SpeedupInterval:
    """``iv`` with the split time moved by ``+slower_us`` (low end) and ``−faster_us`` (high end)."""
    low = iv.low * split_median_us / (split_median_us + slower_us)
    denom = split_median_us - faster_us
    high = iv.high * split_median_us / denom if denom > 0 else math.inf
    return SpeedupInterval(iv.value, min(low, iv.low), max(high, iv.high))


def point_interval(point: PointResult, spec: ExperimentSpec, *, level: float = DEFAULT_LEVEL,
                   resamples: int = DEFAULT_RESAMPLES) -> PointInterval:
    """The intervals of one result point (method: module docstring).

    A point without samples (an old summary), or with a sample that is not finite and > 0 (a host
    timer's 0 µs), gets the zero-width interval of its medians. The gather band is used only when
    ``point.gather_source == "modelled"`` and ``point.gather_us`` is set.

    Raises:
        ValueError: a level or resample count :func:`bootstrap_speedup` refuses.
    """
    rep, split = point.replicated, point.split
    usable = all(math.isfinite(v) and v > 0 for v in (*rep.samples_us, *split.samples_us))
    if rep.samples_us and split.samples_us and usable:
        measured = bootstrap_speedup(rep.samples_us, split.samples_us, level=level, resamples=resamples,
                                     seed=point.tokens)
    else:
        v = rep.median_us / split.median_us
        measured = SpeedupInterval(v, v, v)
    tp = spec.parallelism.tensor_parallel_size
    if point.gather_source != "modelled" or point.gather_us is None or tp < 2:
        return PointInterval(point.tokens, measured, measured, measured)
    band = gather_band_us(point.padded_tokens, spec.projection.output_size,
                          DTYPE_BYTES.get(spec.projection.activation_dtype, 2), tp, spec.kernel.gather_model)
    g, med = point.gather_us, split.median_us
    own = _shift(measured, med, max(0.0, band.own_high_us - g), max(0.0, g - band.own_low_us))
    anyp = _shift(measured, med, max(0.0, band.high_us - g), max(0.0, g - band.low_us))
    return PointInterval(point.tokens, measured, own, anyp, band)
