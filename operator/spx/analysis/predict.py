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
- ``gather(M) = split_total(M) − shard(r)`` (:func:`spx.analysis.gather_prior.derive_gather`).
- Predicted: ``replicated'(M) = rep(M) / f(M)``; ``split'(M) = shard(r) / f(r) + gather(M)``. With a
  ``gather_model`` (``spx predict --gather h20-calibrated|datasheet``) ``gather(M)`` is that model's
  at ``[M_pad, 1792]`` bf16 instead (h20-calibrated: ≈ 1642 tokens linear, ≈ 1715 log-log).
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

from spx.analysis.band import recommended_threshold, uncertainty
from spx.analysis.crossover import (
    Interpolation,
    break_even_tokens,
    first_winning_tokens,
    median_point,
    sorted_points,
)
from spx.analysis.gather_prior import SEED_DTYPE_BYTES, SEED_OUTPUT_SIZE, derive_gather
from spx.analysis.gather_prior import interpolate_time as interpolate_time  # re-exported (its former home)
from spx.analysis.interval import point_interval
from spx.analysis.reference import parse_kernel_table
from spx.analysis.remodel import remodel_gather
from spx.analysis.summary import points_from_result
from spx.api.base import CamelModel
from spx.api.gate import VLLM_DEFAULT_THRESHOLD_TOKENS, ThresholdRounding
from spx.api.gather_model import GatherModelSpec
from spx.api.result import KernelResult
from spx.api.status import CrossoverConfidence, CrossoverUncertainty, KernelPoint
from spx.vocabulary import ThresholdRule

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


class PredictedRow(CamelModel):
    """One token count of the what-if, with the intermediate quantities (times in µs, factors ×).

    ``h20_gather_us`` is the gather derived from the H20 table; ``gather_us`` the one the prediction
    used (the same, or a :class:`~spx.api.gather_model.GatherModelSpec`'s).
    """

    model_config = CamelModel.model_config | {"frozen": True}

    tokens: int
    shard_rows: int
    h20_replicated_us: float
    h20_split_us: float
    h20_shard_gemm_us: float
    h20_gather_us: float
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
    crossover_confidence: CrossoverConfidence = "none"
    uncertainty: CrossoverUncertainty | None = None


def predict_rows(
    points: Sequence[KernelPoint],
    tp: int = 8,
    interpolation: Interpolation = "log-log",
    gather_model: GatherModelSpec | None = None,
) -> list[PredictedRow]:
    """Scale an H20 sweep (split times = shard GEMM + all-gather) to H100/H200 (method: module docstring).

    Args:
        points: the H20 sweep, e.g. from :func:`spx.analysis.reference.parse_kernel_table`.
        tp: the TP size the table was measured at; every point's ``rows_per_rank`` must equal
            ``ceil(tokens / tp)``.
        interpolation: of the shard GEMM time from the replicated column (``log-log`` or ``linear``).
        gather_model: ``None`` (the seed author's method): each point's gather is the one derived
            from the H20 table (:func:`spx.analysis.gather_prior.derive_gather`). Otherwise the gather
            is this model's at the padded ``[M_pad, 1792]`` bf16 output (e.g. the H20-calibrated or
            the datasheet prior of :class:`~spx.api.gather_model.GatherModelSpec`).

    Raises:
        ValueError: on no points, a repeated token count, ``tp < 1``, a ``rows_per_rank`` that does not
            match ``tp``, or a derived gather time below 0 (the table is then not shard + gather).
    """
    ordered = sorted_points(points)
    reps = {p.tokens: p.replicated_us for p in ordered}
    rows: list[PredictedRow] = []
    for d in derive_gather(ordered, tp, interpolation):
        gather = d.gather_us
        if gather_model is not None:
            gather = gather_model.gather_us(d.padded_tokens, SEED_OUTPUT_SIZE, SEED_DTYPE_BYTES, tp)
        f_rep, f_shard = gemm_scaling_factor(d.tokens), gemm_scaling_factor(d.shard_rows)
        rep_new, split_new = reps[d.tokens] / f_rep, d.shard_gemm_us / f_shard + gather
        rows.append(
            PredictedRow(
                tokens=d.tokens,
                shard_rows=d.shard_rows,
                h20_replicated_us=reps[d.tokens],
                h20_split_us=d.split_us,
                h20_shard_gemm_us=d.shard_gemm_us,
                h20_gather_us=d.gather_us,
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
    gather_model: GatherModelSpec | None = None,
) -> Prediction:
    """The seed author's H20 → H100/H200 what-if on a kernel table's text (format: :mod:`spx.analysis.reference`).

    Args:
        csv_text: the H20 table.
        tp: TP size the table was measured at (8 for the seed table).
        rounding: threshold rounding rule (:func:`spx.analysis.threshold.recommended_threshold_tokens`).
        interpolation: ``log-log`` (default) or ``linear``, for both the shard GEMM time and the
            break-even.
        gather_model: ``None`` (default, the seed author's method): the gather derived from the
            table, unchanged. Otherwise that model's gather (:func:`predict_rows`).

    Returns:
        :class:`Prediction` (``.points``, ``.rows``, ``.break_even_tokens``,
        ``.recommended_threshold_tokens``, ``.method``).

    Raises:
        ValueError: on a malformed table (see :func:`~spx.analysis.reference.parse_kernel_table`) or
            one not measured at ``tp`` (see :func:`predict_rows`).
    """
    rows = predict_rows(parse_kernel_table(csv_text), tp, interpolation, gather_model)
    anchors = ", ".join(f"{r} rows {f:g}×" for r, f in SEED_SCALING_ANCHORS)
    gather_text = (
        "the all-gather unchanged (the H20 gather)" if gather_model is None
        else f"the all-gather modelled at [M_pad, {SEED_OUTPUT_SIZE}] bf16, {gather_model.describe()}"
    )
    method = (
        f"Seed author's H20 → H100/H200 scaling: GEMM speedup factor f(rows) from anchors {anchors}, "
        f"linear in log2(rows) between anchors and constant outside; {gather_text}. "
        f"Shard GEMM at ceil(M/{tp}) rows = H20 replicated time at that many tokens, {interpolation} "
        "interpolation of the replicated column (held at the smallest row below the table); "
        "H20 gather(M) = H20 split total(M) − shard GEMM. Predicted replicated = rep(M)/f(M); "
        f"predicted split = shard/f(ceil(M/{tp})) + gather(M). Break-even: {interpolation} interpolation "
        f"of speedup between the last losing and first winning predicted points; threshold: {rounding}."
    )
    return _prediction(rows, tp, rounding, interpolation, method)


def predict_with_measured(
    csv_text: str,
    measured: KernelResult,
    tp: int = 8,
    rounding: ThresholdRounding = "next-power-of-two",
    interpolation: Interpolation = "log-log",
) -> Prediction:
    """H20 table → this GPU with **measured** GEMM times instead of the seed author's scaling factors.

    The all-gather is the one inside the H20 table (derived point by point,
    :func:`spx.analysis.gather_prior.derive_gather`: same NVLink4 and vLLM gather path on H20, H100
    and H200); the GEMMs are ``measured``'s, typically a one-GPU run of the same projection with the
    kernel vLLM runs (``spx run ... --gemm-backend humming``): replicated = its replicated median at M,
    shard = its measured shard GEMM (``shardGemmUs``, the ``ceil(M/TP)``-row GEMM) at M. Only token
    counts present in both sweeps are predicted. ``replicated_factor`` / ``shard_factor`` of each row
    are then the measured H20 → this-GPU speedups.

    Raises:
        ValueError: a malformed table, ``measured`` without shard GEMM times (a run whose gather was
            measured: use its own result instead), a different TP, or fewer than two common token counts.
    """
    if measured.spec.parallelism.tensor_parallel_size != tp:
        mtp = measured.spec.parallelism.tensor_parallel_size
        raise ValueError(f"the measured run is TP{mtp}, the table TP{tp}: its shard GEMMs are split {mtp} ways, the "
                         f"table's {tp}; measure at TP{tp} (spec.parallelism.tensorParallelSize: {tp}, one GPU is "
                         f"enough: the gather is modelled), or give a table measured at TP{mtp} (CSV --tp {mtp})")
    mine = {p.tokens: p for p in measured.points if p.shard_gemm_us is not None}
    if not mine:
        raise ValueError("the measured run has no shard GEMM times (shardGemmUs): it must be a run with a modelled gather")
    h20 = sorted_points(parse_kernel_table(csv_text))
    derived = [d for d in derive_gather(h20, tp, interpolation) if d.tokens in mine]
    if len(derived) < 2:
        raise ValueError(f"fewer than two token counts in both sweeps (measured: {sorted(mine)[:20]})")
    reps = {p.tokens: p.replicated_us for p in h20}
    rows: list[PredictedRow] = []
    for d in derived:
        point = mine[d.tokens]
        rep_new, shard_new = point.replicated.median_us, float(point.shard_gemm_us or 0.0)
        split_new = shard_new + d.gather_us
        rows.append(PredictedRow(
            tokens=d.tokens, shard_rows=d.shard_rows, h20_replicated_us=reps[d.tokens], h20_split_us=d.split_us,
            h20_shard_gemm_us=d.shard_gemm_us, h20_gather_us=d.gather_us, gather_us=d.gather_us,
            replicated_factor=reps[d.tokens] / rep_new, shard_factor=d.shard_gemm_us / shard_new,
            replicated_us=rep_new, split_us=split_new, speedup=rep_new / split_new,
        ))
    gpu = measured.environment.gpu or measured.device
    intervals = {p.tokens: point_interval(p, measured.spec).measured for p in measured.points if p.tokens in mine}
    points: list[KernelPoint] = []
    for row in rows:
        iv, kp = intervals[row.tokens], median_point(row.tokens, row.shard_rows, row.replicated_us, row.split_us,
                                                      row.gather_us)
        lo, hi = row.speedup * iv.low / iv.value, row.speedup * iv.high / iv.value
        points.append(kp.model_copy(update={"speedup_low": lo, "speedup_high": hi,
                                               "speedup_low_any_prior": lo, "speedup_high_any_prior": hi}))
    method = (
        f"H20 table's all-gather (split total − shard GEMM, shard at ceil(M/{tp}) rows, {interpolation} "
        f"interpolation of the H20 replicated column) + GEMMs measured on {gpu} with {measured.gemm_backend} "
        f"(replicated median, measured shard GEMM); break-even: {interpolation} interpolation; threshold: {rounding}. "
        "Speed-up intervals: the measured samples' paired bootstrap, as a relative width (the H20 gather is "
        "a table value without a standard error)."
    )
    return _prediction(rows, tp, rounding, interpolation, method, points)


def predict_remodelled(
    measured: KernelResult,
    model: GatherModelSpec,
    rounding: ThresholdRounding | None = None,
    gate_threshold_tokens: int | None = None,
) -> Prediction:
    """A one-GPU run judged under a gather prior: the same points, intervals, crossover, threshold and band as
    ``spx report`` gives for that run's result re-modelled with ``model`` (:func:`spx.analysis.remodel.remodel_gather`;
    the result itself when ``model`` is the one it was measured with).

    The break-even is log-log interpolated; the threshold follows the run's ``spec.gate.thresholdRule``
    (:func:`spx.analysis.band.recommended_threshold`, as ``spx report``), rounded with ``rounding`` (default:
    the run's ``spec.gate.thresholdRounding``) at TP of the run; the stake is given at ``gate_threshold_tokens``
    (default: the run's ``spec.gate.thresholdTokens``). ``rows`` is empty (no H20 inputs are involved).

    Raises:
        ValueError: the result's gather was measured, a point cannot be analysed, or TP < 1.
    """
    same = measured.spec.kernel.gather_model == model
    result = measured if same else remodel_gather(measured, model)
    tp = result.spec.parallelism.tensor_parallel_size
    gate = measured.spec.gate
    rounding = gate.threshold_rounding if rounding is None else rounding
    points = points_from_result(result)
    gpu = measured.environment.gpu or measured.device
    method = (
        f"GEMMs measured on {gpu} with {measured.gemm_backend}; all-gather modelled with {model.describe()}. "
        "Break-even: log-log interpolation; speed-up intervals: paired bootstrap of the samples' rounds and the "
        f"gather prior's uncertainty (spx.analysis.interval); threshold: {gate.threshold_rule}, {rounding}. Same "
        "analysis as spx report."
    )
    stake_at = gate.threshold_tokens if gate_threshold_tokens is None else gate_threshold_tokens
    return _prediction([], tp, rounding, "log-log", method, points, stake_at, rule=gate.threshold_rule)


def _prediction(rows: Sequence[PredictedRow], tp: int, rounding: ThresholdRounding, interpolation: Interpolation,
                method: str, points: Sequence[KernelPoint] | None = None,
                gate_threshold_tokens: int = VLLM_DEFAULT_THRESHOLD_TOKENS,
                rule: ThresholdRule = "break-even") -> Prediction:
    """Predicted rows (or ``points``) → :class:`Prediction`: break-even (``interpolation``), threshold
    (``rule``, ``rounding``: :func:`spx.analysis.band.recommended_threshold`, the rule ``spx report`` applies),
    confidence and uncertainty (:func:`spx.analysis.band.uncertainty`, floor TP)."""
    pts = sorted_points(points) if points is not None else rows_to_points(rows)
    be = break_even_tokens(pts, interpolation)
    recommended = recommended_threshold(pts, be.tokens if be else None, rule, rounding, tp)
    confidence, unc = uncertainty(pts, recommended_threshold_tokens=recommended,
                                  gate_threshold_tokens=gate_threshold_tokens, floor_tokens=tp,
                                  interpolation=interpolation)
    return Prediction(
        points=pts,
        rows=list(rows),
        first_winning_tokens=first_winning_tokens(pts),
        break_even_tokens=be.tokens if be else None,
        break_even_at_or_below_smallest_measured=be.at_or_below_smallest_measured if be else False,
        recommended_threshold_tokens=recommended,
        threshold_rounding=rounding,
        tensor_parallel_size=tp,
        interpolation=interpolation,
        method=method,
        crossover_confidence=confidence,
        uncertainty=unc,
    )
