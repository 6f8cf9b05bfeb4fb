"""What-if: the seed PR author's scaling of the H20 kernel table to H100/H200.

Source: the vLLM change that splits DeepSeek-V4.1's ``fused_wqa_wkv`` (its author's "pessimistic"
estimate, quoted in ``tests/data/README.md``): on H100/H200 a replicated GEMM of M rows runs
6.7× faster than on H20 for M ≥ 1024 rows, 3.7× at 512 rows and 2× for M ≤ 256 rows; the all-gather
is no faster. The author put the break-even at about 1450 tokens and kept 2048, the next power of two.

Re-derivation (this module):

- The factor ``f(rows)`` between the anchors is linear in ``log2(rows)``: 256 → 2.0, 512 → 3.7,
  1024 → 6.7 (e.g. 384 rows → 2.99); constant outside [256, 1024].
- The H20 table gives split totals, not the gather alone. The shard GEMM at ``r = ceil(M/TP)`` rows
  (the padded token split) is taken as the replicated GEMM at ``r`` tokens, interpolated from the
  table's replicated column: piecewise log-log by default (a power law between neighbouring rows), or
  piecewise linear; below the smallest measured count it is held at that count's time (at a few rows
  the GEMM is bound by reading the weight: 6 and 12 tokens differ by 4 %).
- ``gather(M) = split_total(M) − shard(r)``.
- Predicted: ``replicated'(M) = rep(M) / f(M)``; ``split'(M) = shard(r) / f(r) + gather(M)``.
- The break-even is interpolated between the predicted last losing and first winning points
  (:func:`spx.analysis.crossover.break_even_tokens`, same interpolation choice) and rounded with the
  threshold rule (:mod:`spx.analysis.threshold`).

On the H20 table: log-log gives ≈ 1266 tokens, linear ≈ 1455 tokens (the author's ~1450 is
reproduced by linear interpolation throughout); both round to 2048. The scaled curve is not
monotonic (the split wins at 96 and 384 tokens, loses at 1024, wins from 2048 on) because the
factor jumps from 2× for the shard GEMMs to 6.7× for the replicated GEMM of ≥ 1024 rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from spx.analysis.crossover import (
    Interpolation,
    break_even_tokens,
    first_winning_tokens,
    median_point,
    sorted_points,
)
from spx.analysis.reference import parse_kernel_table
from spx.analysis.threshold import next_multiple, recommended_threshold_tokens
from spx.api.base import CamelModel
from spx.api.spec import ThresholdRounding
from spx.api.status import KernelPoint

#: (GEMM rows, H100/H200 speedup over H20) anchors of the seed author's scaling.
SEED_SCALING_ANCHORS: tuple[tuple[int, float], ...] = ((256, 2.0), (512, 3.7), (1024, 6.7))


def gemm_scaling_factor(rows: float, anchors: Sequence[tuple[int, float]] = SEED_SCALING_ANCHORS) -> float:
    """How much faster (×) a GEMM of ``rows`` rows runs on H100/H200 than on H20 (seed author's figures).

    Linear in ``log2(rows)`` between neighbouring anchors (``anchors`` sorted by rows), the first
    anchor's factor below it and the last one's above it.

    Raises:
        ValueError: when ``rows <= 0`` or ``anchors`` is empty.
    """
    if rows <= 0:
        raise ValueError(f"rows must be > 0, got {rows}")
    if not anchors:
        raise ValueError("no scaling anchors")
    if rows <= anchors[0][0]:
        return anchors[0][1]
    for (r0, f0), (r1, f1) in zip(anchors, anchors[1:], strict=False):
        if rows <= r1:
            return f0 + (f1 - f0) * math.log2(rows / r0) / math.log2(r1 / r0)
    return anchors[-1][1]


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
    if interpolation not in ("log-log", "linear"):
        raise ValueError(f"unknown interpolation {interpolation!r}; use 'log-log' or 'linear'")
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


class PredictedRow(CamelModel):
    """One token count of the what-if, with the intermediate quantities (times in µs, factors ×)."""

    model_config = CamelModel.model_config | {"frozen": True}

    tokens: int
    shard_rows: int
    h20_replicated_us: float
    h20_split_us: float
    h20_shard_gemm_us: float
    gather_us: float
    replicated_factor: float
    shard_factor: float
    replicated_us: float
    split_us: float
    speedup: float


class Prediction(CamelModel):
    """Result of :func:`predict_from_table`: predicted points, break-even, threshold and the method."""

    model_config = CamelModel.model_config | {"frozen": True}

    points: list[KernelPoint]
    rows: list[PredictedRow]
    first_winning_tokens: int | None
    break_even_tokens: float | None
    break_even_at_or_below_smallest_measured: bool = False
    recommended_threshold_tokens: int | None
    threshold_rounding: ThresholdRounding
    tensor_parallel_size: int = Field(ge=1)
    interpolation: Interpolation
    method: str


def predict_rows(
    points: Sequence[KernelPoint], tp: int = 8, interpolation: Interpolation = "log-log"
) -> list[PredictedRow]:
    """Scale an H20 sweep (split times = shard GEMM + all-gather) to H100/H200 (method: module docstring).

    Args:
        points: the H20 sweep, e.g. from :func:`spx.analysis.reference.parse_kernel_table`.
        tp: the TP size the table was measured at; every point's ``rows_per_rank`` must equal
            ``ceil(tokens / tp)``.
        interpolation: of the shard GEMM time from the replicated column (``log-log`` or ``linear``).

    Raises:
        ValueError: on no points, a repeated token count, ``tp < 1``, a ``rows_per_rank`` that does not
            match ``tp``, or a derived gather time below 0 (the table is then not shard + gather).
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    ordered = sorted_points(points)
    if not ordered:
        raise ValueError("no points to scale")
    xs = [float(p.tokens) for p in ordered]
    reps = [p.replicated_us for p in ordered]
    rows: list[PredictedRow] = []
    for p in ordered:
        shard_rows = next_multiple(p.tokens, tp) // tp
        if p.rows_per_rank != shard_rows:
            raise ValueError(
                f"{p.tokens} tokens: rows_per_rank {p.rows_per_rank} != ceil({p.tokens}/{tp}) = {shard_rows}; "
                f"the table was not measured at TP{tp}"
            )
        shard = interpolate_time(shard_rows, xs, reps, interpolation)
        gather = p.split_us - shard
        if gather < 0:
            raise ValueError(
                f"{p.tokens} tokens: split total {p.split_us} µs is below the interpolated shard GEMM {shard:.1f} µs; "
                "the split column is not shard GEMM + gather"
            )
        f_rep, f_shard = gemm_scaling_factor(p.tokens), gemm_scaling_factor(shard_rows)
        rep_new, split_new = p.replicated_us / f_rep, shard / f_shard + gather
        rows.append(
            PredictedRow(
                tokens=p.tokens,
                shard_rows=shard_rows,
                h20_replicated_us=p.replicated_us,
                h20_split_us=p.split_us,
                h20_shard_gemm_us=shard,
                gather_us=gather,
                replicated_factor=f_rep,
                shard_factor=f_shard,
                replicated_us=rep_new,
                split_us=split_new,
                speedup=rep_new / split_new,
            )
        )
    return rows


def rows_to_points(rows: Sequence[PredictedRow]) -> list[KernelPoint]:
    """Predicted rows as ``KernelPoint`` s (no spread: ``decided`` True, IQRs 0, no error check)."""
    return [median_point(r.tokens, r.shard_rows, r.replicated_us, r.split_us, r.gather_us) for r in rows]


def predict_from_table(
    csv_text: str,
    tp: int = 8,
    rounding: ThresholdRounding = "next-power-of-two",
    interpolation: Interpolation = "log-log",
) -> Prediction:
    """The seed author's H20 → H100/H200 what-if on a kernel table's text (format: :mod:`spx.analysis.reference`).

    Args:
        csv_text: the H20 table.
        tp: TP size the table was measured at (8 for the seed table).
        rounding: threshold rounding rule (:func:`spx.analysis.threshold.recommended_threshold_tokens`).
        interpolation: ``log-log`` (default) or ``linear``, for both the shard GEMM time and the
            break-even.

    Returns:
        :class:`Prediction` (``.points``, ``.rows``, ``.break_even_tokens``,
        ``.recommended_threshold_tokens``, ``.method``).

    Raises:
        ValueError: on a malformed table (see :func:`~spx.analysis.reference.parse_kernel_table`) or
            one not measured at ``tp`` (see :func:`predict_rows`).
    """
    rows = predict_rows(parse_kernel_table(csv_text), tp, interpolation)
    points = rows_to_points(rows)
    be = break_even_tokens(points, interpolation)
    anchors = ", ".join(f"{r} rows {f:g}×" for r, f in SEED_SCALING_ANCHORS)
    method = (
        f"Seed author's H20 → H100/H200 scaling: GEMM speedup factor f(rows) from anchors {anchors}, "
        "linear in log2(rows) between anchors and constant outside; the all-gather unchanged. "
        f"Shard GEMM at ceil(M/{tp}) rows = H20 replicated time at that many tokens, {interpolation} "
        "interpolation of the replicated column (held at the smallest row below the table); "
        "gather(M) = H20 split total(M) − shard GEMM. Predicted replicated = rep(M)/f(M); "
        f"predicted split = shard/f(ceil(M/{tp})) + gather(M). Break-even: {interpolation} interpolation "
        f"of speedup between the last losing and first winning predicted points; threshold: {rounding}."
    )
    return Prediction(
        points=points,
        rows=rows,
        first_winning_tokens=first_winning_tokens(points),
        break_even_tokens=be.tokens if be else None,
        break_even_at_or_below_smallest_measured=be.at_or_below_smallest_measured if be else False,
        recommended_threshold_tokens=recommended_threshold_tokens(be.tokens, rounding, tp) if be else None,
        threshold_rounding=rounding,
        tensor_parallel_size=tp,
        interpolation=interpolation,
        method=method,
    )
