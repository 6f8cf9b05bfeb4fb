"""The all-gather contained in a kernel table (split = shard GEMM + all-gather), and its per-regime fit.

Source of the method: issue 9, requirement 5. H20, H100 and H200 SXM share NVLink4 (18 links,
900 GB/s bidirectional) and vLLM runs the same collectives on them (its custom all-gather while a
shard is ≤ 2 MiB, NCCL above: ``sp_all_gather``), so the seed's 8× H20 table
(``tokens,rows_per_rank,replicated_us,split_allgather_us,speedup``, :mod:`spx.analysis.reference`)
already measures the gather:

- shard GEMM at ``r = ceil(M/TP)`` rows = the table's replicated time at ``r`` tokens,
  interpolated (:func:`interpolate_time`; log-log by default: a power law between neighbouring rows);
  below the smallest count (6 tokens) it is held at that count's time: small GEMMs are bound by
  reading the weight (6 and 12 tokens differ by 4 %). Rows that are table counts (1024, 2048) are
  exact.
- ``gather(M) = split_total(M) − shard_GEMM(r)``; regime by the padded shard's bytes
  ``r · N · dtype_bytes`` (:meth:`spx.api.gather_model.GatherModelSpec.regime`).
- each regime is fitted to ``latency + (TP−1)/TP · bytes / busBW``
  (:func:`spx.analysis.gather_fit.fit_gather_model`, least squares); a regime with one size only gets
  its bandwidth fitted with the other regime's latency (:func:`~spx.analysis.gather_fit.fit_gather_bandwidth`).

On the seed table the NCCL regime has two points (8192 and 16384 tokens; the table has no 6144 row):
the two-parameter fit is then the line through them, residuals 0 by construction. Its checks are
external (docs/kernel-benchmark.md "Gather prior"). Pure: takes points, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spx.analysis.crossover import Interpolation, median_point, sorted_points
from spx.analysis.gather_fit import GatherFit, fit_gather_bandwidth, fit_gather_model
from spx.analysis.threshold import next_multiple
from spx.api.gather_model import CUSTOM_ALL_GATHER_MAX_SHARD_BYTES, GatherModelSpec, GatherRegime
from spx.api.status import KernelPoint
from spx.vocabulary import GATHER_REGIMES, INTERPOLATIONS

#: ``fused_wqa_wkv``'s output width (q_a 1280 + kv 512) and bf16 bytes: the seed table's gather shape.
SEED_OUTPUT_SIZE = 1792
SEED_DTYPE_BYTES = 2
REGIMES: tuple[GatherRegime, ...] = GATHER_REGIMES


def interpolate_time(x: float, xs: Sequence[float], ys: Sequence[float], interpolation: Interpolation) -> float:
    """Time (µs) at ``x`` tokens from a table ``(xs, ys)`` sorted by increasing ``xs``.

    ``"log-log"``: ``log y`` linear in ``log x`` between neighbours; ``"linear"``: ``y`` linear in ``x``.
    Below ``xs[0]`` the time is held at ``ys[0]``; an exact table row is returned as is.

    Raises:
        ValueError: when ``x`` is above ``xs[-1]`` (no extrapolation), the table is empty or its
            lengths differ, or the interpolation is unknown.
    """
    if not xs or len(xs) != len(ys):
        raise ValueError("need a non-empty table with as many times as token counts")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"unknown interpolation {interpolation!r}; use {' or '.join(repr(i) for i in INTERPOLATIONS)}")
    if x <= xs[0]:
        return ys[0]
    for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:], strict=False):
        if x == x1:
            return y1
        if x < x1:
            if interpolation == "log-log":
                return y0 * math.pow(y1 / y0, math.log(x / x0) / math.log(x1 / x0))
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise ValueError(f"{x} tokens is above the table's largest count {xs[-1]}: not extrapolating")


@dataclass(frozen=True)
class DerivedGather:
    """The all-gather at one token count of a split sweep (times µs, sizes bytes).

    ``shard_gemm_held``: the shard's rows are below the table's smallest count, so its GEMM time is
    that count's (not interpolated).
    """

    tokens: int
    padded_tokens: int
    shard_rows: int
    shard_bytes: int
    total_bytes: int
    split_us: float
    shard_gemm_us: float
    shard_gemm_held: bool
    gather_us: float
    regime: GatherRegime


def derive_gather(
    points: Sequence[KernelPoint],
    tp: int = 8,
    interpolation: Interpolation = "log-log",
    output_size: int = SEED_OUTPUT_SIZE,
    dtype_bytes: int = SEED_DTYPE_BYTES,
    custom_max_shard_bytes: int = CUSTOM_ALL_GATHER_MAX_SHARD_BYTES,
) -> list[DerivedGather]:
    """The gather hidden in each point's split time (method: module docstring), sorted by tokens.

    Args:
        points: a sweep whose ``split_us`` is shard GEMM + all-gather (e.g. the H20 table).
        tp: the TP size it was measured at; every ``rows_per_rank`` must be ``ceil(tokens / tp)``.
        interpolation: of the shard GEMM time from the replicated column.
        output_size, dtype_bytes: the gathered output's width N and element size (bytes).
        custom_max_shard_bytes: vLLM's custom all-gather limit per shard (regime boundary).

    Raises:
        ValueError: no points, ``tp < 1``, a ``rows_per_rank`` that does not match ``tp``, or a split
            total below the interpolated shard GEMM (the table is then not shard + gather).
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    ordered = sorted_points(points)
    if not ordered:
        raise ValueError("no points to derive a gather from")
    xs, reps = [float(p.tokens) for p in ordered], [p.replicated_us for p in ordered]
    regimes = GatherModelSpec(custom_all_gather_max_shard_bytes=custom_max_shard_bytes)
    out: list[DerivedGather] = []
    for p in ordered:
        padded = next_multiple(p.tokens, tp)
        rows = padded // tp
        if p.rows_per_rank != rows:
            raise ValueError(
                f"{p.tokens} tokens: rows_per_rank {p.rows_per_rank} != ceil({p.tokens}/{tp}) = {rows}; "
                f"the table was not measured at TP{tp}"
            )
        shard = interpolate_time(rows, xs, reps, interpolation)
        gather = p.split_us - shard
        if gather < 0:
            raise ValueError(
                f"{p.tokens} tokens: split total {p.split_us} µs is below the interpolated shard GEMM {shard:.1f} µs; "
                "the split column is not shard GEMM + gather"
            )
        out.append(
            DerivedGather(
                tokens=p.tokens,
                padded_tokens=padded,
                shard_rows=rows,
                shard_bytes=rows * output_size * dtype_bytes,
                total_bytes=padded * output_size * dtype_bytes,
                split_us=p.split_us,
                shard_gemm_us=shard,
                shard_gemm_held=rows < xs[0],
                gather_us=gather,
                regime=regimes.regime(padded, output_size, dtype_bytes, tp),
            )
        )
    return out


@dataclass(frozen=True)
class RegimeFit:
    """One regime's fit: the points it used (``tokens``) and how it was fitted (``method``)."""

    regime: GatherRegime
    fit: GatherFit
    tokens: tuple[int, ...]
    method: str


@dataclass(frozen=True)
class GatherPriorFit:
    """Per-regime fit of a derived gather (:func:`fit_gather_prior`)."""

    regimes: Mapping[GatherRegime, RegimeFit]
    derived: tuple[DerivedGather, ...]
    tensor_parallel_size: int
    interpolation: Interpolation

    def modelled_us(self, d: DerivedGather) -> float:
        """The fit's time (µs) for a derived point, with its regime's parameters."""
        return self.regimes[d.regime].fit.predicted_us(d.total_bytes, self.tensor_parallel_size)

    def parameters(self) -> dict[GatherRegime, tuple[float, float]]:
        """``{regime: (latency µs, bus bandwidth GB/s)}``, the form of :data:`spx.api.gather_model.H20_GATHER_PRIOR`."""
        return {r: (f.fit.latency_us, f.fit.bus_bandwidth_gbps) for r, f in self.regimes.items()}


def fit_gather_prior(
    derived: Sequence[DerivedGather], tp: int = 8, interpolation: Interpolation = "log-log"
) -> GatherPriorFit:
    """Fit ``latency + (TP−1)/TP · bytes / busBW`` per regime to derived gathers.

    A regime with ≥ 2 sizes: least squares of both parameters (exact through 2 points). A regime
    with one size: its bandwidth by least squares with the other regime's fitted latency.

    Raises:
        ValueError: a regime without points, both regimes with one size, or a fit the data cannot
            support (see :func:`~spx.analysis.gather_fit.fit_gather_model`); the message names the regime.
    """
    by_regime = {r: [d for d in derived if d.regime == r] for r in REGIMES}
    for r, ds in by_regime.items():
        if not ds:
            raise ValueError(f"no {r} all-gather point in the table: cannot fit the {r} regime")
    fits: dict[GatherRegime, RegimeFit] = {}
    for r, ds in by_regime.items():
        if len({d.total_bytes for d in ds}) >= 2:
            try:
                fit = fit_gather_model([d.total_bytes for d in ds], [d.gather_us for d in ds], tp)
            except ValueError as exc:
                raise ValueError(f"{r} regime: {exc}") from None
            method = "least squares" if fit.points > 2 else "line through its two points (exact, 0 residuals)"
            fits[r] = RegimeFit(r, fit, tuple(d.tokens for d in ds), method)
    for r, ds in by_regime.items():
        if r in fits:
            continue
        other = next((f for o, f in fits.items() if o != r), None)
        if other is None:
            raise ValueError("each regime has a single size: need two sizes in one regime to fit a latency")
        fit = fit_gather_bandwidth([d.total_bytes for d in ds], [d.gather_us for d in ds], tp, other.fit.latency_us)
        fits[r] = RegimeFit(r, fit, tuple(d.tokens for d in ds), f"bandwidth only, latency of the {other.regime} regime")
    return GatherPriorFit({r: fits[r] for r in REGIMES}, tuple(derived), tp, interpolation)


def fit_h20_gather_prior(
    points: Sequence[KernelPoint], tp: int = 8, interpolation: Interpolation = "log-log"
) -> GatherPriorFit:
    """Derive the gather from an H20-style table's points and fit it per regime (seed shape N = 1792, bf16).

    Raises:
        ValueError: see :func:`derive_gather` and :func:`fit_gather_prior`.
    """
    return fit_gather_prior(derive_gather(points, tp, interpolation), tp, interpolation)


def rounding_sensitivity(
    points: Sequence[KernelPoint], tp: int = 8, interpolation: Interpolation = "log-log", half_unit_us: float = 0.05
) -> dict[GatherRegime, tuple[float, float]]:
    """Worst-case change of each regime's (latency µs, bus bandwidth GB/s) from the table's rounding.

    Every replicated and split time of ``points`` is moved by ``half_unit_us`` (the seed table
    writes µs to 0.1) one at a time; the absolute parameter changes are summed (first order: the
    fit is linear in the times, the log-log interpolation nearly so at this step). A fitted value
    is known no better than this, which bounds the tolerance a test of it can honestly use.

    Raises:
        ValueError: see :func:`fit_h20_gather_prior`.
    """
    ordered = sorted_points(points)
    base = fit_h20_gather_prior(ordered, tp, interpolation).parameters()
    total = {r: [0.0, 0.0] for r in REGIMES}
    for i, p in enumerate(ordered):
        for field in ("replicated_us", "split_us"):
            rep = p.replicated_us + (half_unit_us if field == "replicated_us" else 0.0)
            split = p.split_us + (half_unit_us if field == "split_us" else 0.0)
            moved = [*ordered[:i], median_point(p.tokens, p.rows_per_rank, rep, split), *ordered[i + 1:]]
            params = fit_h20_gather_prior(moved, tp, interpolation).parameters()
            for r in REGIMES:
                total[r][0] += abs(params[r][0] - base[r][0])
                total[r][1] += abs(params[r][1] - base[r][1])
    return {r: (v[0], v[1]) for r, v in total.items()}
