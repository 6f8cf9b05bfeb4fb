"""The analysis entry point: bench result → points → crossover, threshold, verdict → ``KernelStatus``.

:func:`evaluate` judges a list of points; a whole run (complete or partial, with its serving and
accuracy gates) is judged by :func:`spx.analysis.judge.judge`, which the CLI (``spx run | report``)
and the operator call, so a local run and a cluster run are judged by the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from spx.analysis.band import V41_NUM_LAYERS, recommended_threshold, uncertainty, with_intervals
from spx.analysis.bounds import combine_bounds, has_host_times, host_bound_fields, host_bound_points
from spx.analysis.crossover import decided_from_quartiles, find_crossover, sorted_points, speedup
from spx.analysis.interval import point_interval
from spx.analysis.threshold import recommended_threshold_tokens
from spx.analysis.verdict import gate_verdict
from spx.api.gate import GateSpec
from spx.api.result import KernelResult, PointResult
from spx.api.status import BoundCrossover, GatherSource, KernelPoint, KernelStatus, Verdict


@dataclass(frozen=True)
class Evaluation:
    """Outcome of :func:`evaluate`: what goes into ``status.kernel``, ``status.verdict`` and
    ``status.verdictReasons``."""

    kernel: KernelStatus
    verdict: Verdict
    reasons: list[str]


def point_from_result(point: PointResult) -> KernelPoint:
    """Summarise one :class:`~spx.api.result.PointResult` as a :class:`~spx.api.status.KernelPoint`.

    Times are the candidates' stored medians (µs); ``speedup = replicated / split``; ``iqr_pct`` is
    the larger of the two candidates' ``iqr_pct``; ``decided`` compares the stored ``[q1, q3]``
    intervals (:func:`~spx.analysis.crossover.decided_from_quartiles`). ``gather_us``,
    ``rows_per_rank``, ``max_abs_error`` and ``execution`` are copied; with host samples the host
    medians and host-bound effective times are added (:func:`spx.analysis.bounds.host_bound_fields`).
    """
    rep, split = point.replicated, point.split
    return KernelPoint(
        **host_bound_fields(rep, split),  # type: ignore[arg-type]
        execution=point.execution,
        tokens=point.tokens,
        rows_per_rank=point.rows_per_rank,
        replicated_us=rep.median_us,
        split_us=split.median_us,
        gather_us=point.gather_us,
        speedup=speedup(rep.median_us, split.median_us),
        iqr_pct=max(rep.iqr_pct, split.iqr_pct),
        replicated_iqr_pct=rep.iqr_pct,
        split_iqr_pct=split.iqr_pct,
        max_abs_error=point.max_abs_error,
        decided=decided_from_quartiles(rep.q1_us, rep.q3_us, split.q1_us, split.q3_us),
    )


def points_from_result(result: KernelResult) -> list[KernelPoint]:
    """Every point of a result document as a ``KernelPoint`` (see :func:`point_from_result`), by tokens,
    with its speed-up intervals (``speedupLow/High[AnyPrior]``: :func:`spx.analysis.interval.point_interval`
    on the result's own spec: its gather prior, output width, dtype and TP).

    Raises:
        ValueError: on a repeated token count or a sample that is not finite and > 0.
    """
    points = sorted_points(point_from_result(p) for p in result.points)
    intervals = {p.tokens: point_interval(p, result.spec) for p in result.points}
    return with_intervals(points, intervals)


def points_with_reasons(result: KernelResult) -> list[KernelPoint]:
    """:func:`points_from_result` with each adaptively added point's ``added_because``.

    Raises:
        ValueError: see :func:`points_from_result`.
    """
    reasons = {p.tokens: p.added_because for p in result.points if p.added_because}
    return [p.model_copy(update={"added_because": reasons[p.tokens]}) if p.tokens in reasons else p
            for p in points_from_result(result)]


def evaluate(
    points: Iterable[KernelPoint],
    gate: GateSpec,
    gather_source: GatherSource,
    tensor_parallel_size: int,
    gemm_backend: str | None = None,
    timer: str | None = None,
    device: str | None = None,
    layers: int = V41_NUM_LAYERS,
) -> Evaluation:
    """Crossover, recommended threshold and gate verdict of a sweep.

    Args:
        points: the sweep (any order); ``speedup`` and ``decided`` are taken as given (build them with
            :func:`points_from_result`, :func:`spx.analysis.reference.parse_kernel_table` or, from
            medians and IQRs only, :func:`spx.analysis.crossover.with_decided_from_iqr`).
        gate: the experiment's gate; its ``threshold_rounding`` picks the recommended threshold's rule.
        gather_source: ``measured`` or ``modelled``.
        tensor_parallel_size: TP (≥ 1), for the ``next-multiple-of-tp`` rounding.
        gemm_backend, timer: copied into the status for the record.
        device: ``cpu`` marks a CPU smoke run: its speed verdict is reported as Inconclusive unless
            ``gate.allow_cpu_timings``.
        layers: of the model, for the stake per prefill chunk (:mod:`spx.analysis.band`).

    Returns:
        :class:`Evaluation` with ``kernel.points`` sorted by tokens, ``crossover_tokens`` (the log-log
        interpolated break-even, tokens), ``first_winning_tokens``, ``crossover_confidence`` (with the
        intervals, the bracket and the priors: :func:`spx.analysis.band.confidence`; the bracket's floor
        is TP), ``recommended_threshold_tokens`` (``gate.threshold_rule``), ``uncertainty`` (crossover
        interval, indifference band, stake), and the verdict with its reasons.

    Raises:
        ValueError: on a repeated token count or ``tensor_parallel_size < 1``.
    """
    if tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
    ordered = sorted_points(points)
    crossover = find_crossover(ordered, floor_tokens=tensor_parallel_size)
    be = crossover.break_even
    recommended = recommended_threshold(ordered, be.tokens if be else None, gate.threshold_rule,
                                        gate.threshold_rounding, tensor_parallel_size)
    confidence, unc = uncertainty(
        ordered, recommended_threshold_tokens=recommended, gate_threshold_tokens=gate.threshold_tokens,
        layers=layers, floor_tokens=tensor_parallel_size,
    )
    crossover = replace(crossover, confidence=confidence)
    outcome = gate_verdict(
        ordered, gate, gather_source, crossover=crossover, recommended_threshold_tokens=recommended,
        cpu_timings=device == "cpu",
    )
    host: BoundCrossover | None = None
    verdict, reasons = outcome.verdict, list(outcome.reasons)
    if has_host_times(ordered):
        host_pts = host_bound_points(ordered)
        host_x = find_crossover(host_pts)
        host_be = host_x.break_even
        host_rec = (recommended_threshold_tokens(host_be.tokens, gate.threshold_rounding, tensor_parallel_size)
                    if host_be else None)
        host_outcome = gate_verdict(host_pts, gate, gather_source, crossover=host_x,
                                    recommended_threshold_tokens=host_rec, cpu_timings=device == "cpu")
        host = BoundCrossover(
            crossover_tokens=host_be.tokens if host_be else None,
            first_winning_tokens=host_x.first_winning_tokens,
            crossover_confidence=host_x.confidence,
            recommended_threshold_tokens=host_rec,
            verdict=host_outcome.verdict,
        )
        bounds = combine_bounds(outcome.verdict, host_outcome.verdict, recommended, host_rec, gate.threshold_tokens)
        verdict, rests_on = bounds.verdict, bounds.rests_on
        if verdict == outcome.verdict == host_outcome.verdict:
            reasons = [*outcome.reasons, *bounds.reasons]
        else:
            host_reasons = [f"host-bound: {r}" for r in host_outcome.reasons[:3]]
            reasons = [*bounds.reasons, *(f"GPU-bound: {r}" for r in outcome.reasons), *host_reasons]
    else:
        rests_on = combine_bounds(outcome.verdict, None, recommended, None, gate.threshold_tokens).rests_on
    kernel = KernelStatus(
        points=ordered,
        crossover_tokens=be.tokens if be else None,
        first_winning_tokens=crossover.first_winning_tokens,
        crossover_confidence=confidence,
        recommended_threshold_tokens=recommended,
        threshold_rounding=gate.threshold_rounding,
        gather_source=gather_source,
        gemm_backend=gemm_backend,
        timer=timer,
        host_bound=host,
        verdict_bound=rests_on,
        uncertainty=unc,
    )
    return Evaluation(kernel=kernel, verdict=verdict, reasons=reasons)
