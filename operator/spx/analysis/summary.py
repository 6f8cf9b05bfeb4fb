"""The analysis entry point: bench result → points → crossover, threshold, verdict → ``KernelStatus``.

:func:`evaluate` judges a list of points; a whole run (complete or partial, with its serving and
accuracy gates) is judged by :func:`spx.analysis.judge.judge`, which the CLI (``spx run | report``)
and the operator call, so a local run and a cluster run are judged by the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from spx.analysis.band import V41_NUM_LAYERS, recommended_threshold, uncertainty, with_intervals
from spx.analysis.crossover import Crossover, decided_from_quartiles, find_crossover, sorted_points, speedup
from spx.analysis.decide import Decision, decide
from spx.analysis.interval import point_interval
from spx.analysis.kernel_mix import kernel_mix_expectations
from spx.analysis.regimes import GPU_BOUND, HOST_BOUND, has_host_regime, host_medians, point_deltas, regime_points
from spx.analysis.verdict import GateOutcome, gate_verdict
from spx.api.gate import GateSpec
from spx.api.result import KernelResult, PointResult
from spx.api.spec import ExperimentSpec
from spx.api.status import GatherSource, KernelPoint, KernelRegime, KernelStatus, RegimeSummary, Verdict
from spx.api.step import StepStatus


@dataclass(frozen=True)
class Evaluation:
    """Outcome of :func:`evaluate`: what goes into ``status.kernel``, ``status.verdict`` and
    ``status.verdictReasons``."""

    kernel: KernelStatus
    verdict: Verdict
    reasons: list[str]
    decision: Decision | None = None
    """What decided the speed verdict (:func:`spx.analysis.decide.decide`): recommendation, expectation, notes."""


def point_from_result(point: PointResult, spec: ExperimentSpec | None = None) -> KernelPoint:
    """Summarise one :class:`~spx.api.result.PointResult` as a :class:`~spx.api.status.KernelPoint`.

    Times are the candidates' stored medians (µs); ``speedup = replicated / split``; ``iqr_pct`` is
    the larger of the two candidates' ``iqr_pct``; ``decided`` compares the stored ``[q1, q3]``
    intervals (:func:`~spx.analysis.crossover.decided_from_quartiles`). ``gather_us``,
    ``rows_per_rank``, ``max_abs_error`` and ``execution`` are copied; Δg and, for an eager point with
    host samples, the host medians and Δh are added with their intervals
    (:func:`spx.analysis.regimes.point_deltas`; ``spec`` widens Δg by a modelled gather's band).
    """
    rep, split = point.replicated, point.split
    return KernelPoint(
        **host_medians(rep, split),  # type: ignore[arg-type]
        **point_deltas(point, spec),  # type: ignore[arg-type]
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
    points = sorted_points(point_from_result(p, result.spec) for p in result.points)
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


@dataclass(frozen=True)
class RegimeRun:
    """One regime's judgement of the sweep (:func:`judge_regime`)."""

    regime: KernelRegime
    points: list[KernelPoint]
    crossover: Crossover
    recommended: int | None
    outcome: GateOutcome

    def kernel_status(self, points: list[KernelPoint], gate: GateSpec, gather_source: GatherSource,
                      gemm_backend: str | None, timer: str | None) -> KernelStatus:
        """The status' kernel section with this regime at the top level (the GPU-bound one's)."""
        be = self.crossover.break_even
        return KernelStatus(
            points=points, crossover_tokens=be.tokens if be else None,
            first_winning_tokens=self.crossover.first_winning_tokens, crossover_confidence=self.crossover.confidence,
            recommended_threshold_tokens=self.recommended, threshold_rounding=gate.threshold_rounding,
            gather_source=gather_source, gemm_backend=gemm_backend, timer=timer,
        )

    def summary(self) -> RegimeSummary:
        """The status' :class:`~spx.api.status.RegimeSummary`."""
        be = self.crossover.break_even
        return RegimeSummary(
            regime=self.regime, crossover_tokens=be.tokens if be else None,
            first_winning_tokens=self.crossover.first_winning_tokens, crossover_confidence=self.crossover.confidence,
            recommended_threshold_tokens=self.recommended, speed_verdict=self.outcome.speed_verdict,
            verdict=self.outcome.verdict, reasons=[r[:500] for r in self.outcome.reasons[:8]],
        )


def judge_regime(regime: KernelRegime, points: list[KernelPoint], gate: GateSpec, gather_source: GatherSource,
                 tp: int, cpu: bool, advise_move: bool = True) -> RegimeRun:
    """Crossover (with its confidence), recommended threshold and gate outcome of one regime's points."""
    crossover = find_crossover(points, floor_tokens=tp)
    be = crossover.break_even
    recommended = recommended_threshold(points, be.tokens if be else None, gate.threshold_rule,
                                        gate.threshold_rounding, tp)  # the one rule, in either regime
    confidence, _ = uncertainty(points, recommended_threshold_tokens=recommended,
                                gate_threshold_tokens=gate.threshold_tokens, floor_tokens=tp)
    crossover = replace(crossover, confidence=confidence)
    outcome = gate_verdict(points, gate, gather_source, crossover=crossover, recommended_threshold_tokens=recommended,
                           cpu_timings=cpu, advise_move=advise_move)
    return RegimeRun(regime, points, crossover, recommended, outcome)


def evaluate(
    points: Iterable[KernelPoint],
    gate: GateSpec,
    gather_source: GatherSource,
    tensor_parallel_size: int,
    gemm_backend: str | None = None,
    timer: str | None = None,
    device: str | None = None,
    layers: int = V41_NUM_LAYERS,
    step: StepStatus | None = None,
    max_batched_tokens: int | None = None,
) -> Evaluation:
    """Crossover, recommended threshold and gate verdict of a sweep, in both regimes.

    Args:
        points: the sweep (any order); ``speedup``, its interval, Δg/Δh and ``decided`` are taken as
            given (build them with :func:`points_from_result`, :func:`spx.analysis.reference.parse_kernel_table`
            or, from medians and IQRs only, :func:`spx.analysis.crossover.with_decided_from_iqr`).
        gate: the experiment's gate; its ``threshold_rule`` and ``threshold_rounding`` apply to both regimes.
        gather_source: ``measured`` or ``modelled``.
        tensor_parallel_size: TP (≥ 1), for the ``next-multiple-of-tp`` rounding.
        gemm_backend, timer: copied into the status for the record.
        device: ``cpu`` marks a CPU smoke run: its speed verdict is reported as Inconclusive unless
            ``gate.allow_cpu_timings``.
        layers: of the model, for the stake per prefill chunk (:mod:`spx.analysis.band`).
        step: the step A/B's status: decides when the regimes disagree (:mod:`spx.analysis.decide`).
        max_batched_tokens: the largest batch the deployment forms (a Pass above it is refused; with it the
            expected Δ over the batch mix, :mod:`spx.analysis.kernel_mix`, is reported beside the aligned figures).

    Returns:
        :class:`Evaluation`: ``kernel`` with the GPU-bound regime at the top level (crossover in tokens,
        ``recommended_threshold_tokens``, ``uncertainty`` with both regimes' stake), ``regimes`` (both),
        ``decided_by``, ``next_step``; the verdict and its reasons (deciding first).

    Raises:
        ValueError: on a repeated token count or ``tensor_parallel_size < 1``.
    """
    if tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
    ordered, tp, cpu = sorted_points(points), tensor_parallel_size, device == "cpu"
    # batch sizes the deployment never forms decide nothing (issue #35): the gate sees counts up to its largest
    # (a threshold above the largest batch is the deployment rule's: spx.analysis.decide)
    m = max_batched_tokens if max_batched_tokens is not None and gate.threshold_tokens <= max_batched_tokens else None
    formed = [p for p in ordered if m is None or p.tokens <= m] or ordered
    gpu = judge_regime(GPU_BOUND, formed, gate, gather_source, tp, cpu)
    two = has_host_regime(formed)
    host = judge_regime(HOST_BOUND, regime_points(formed, HOST_BOUND), gate, gather_source, tp, cpu) if two else None
    if host is not None and host.outcome.speed_verdict != gpu.outcome.speed_verdict:  # no advice to move
        gpu = judge_regime(GPU_BOUND, formed, gate, gather_source, tp, cpu, advise_move=False)
        host = judge_regime(HOST_BOUND, host.points, gate, gather_source, tp, cpu, advise_move=False)
    decision = decide(gpu.outcome, host.outcome if host else None, gate, step=step,
                      max_batched_tokens=max_batched_tokens,
                      regimes=(gpu.summary(), host.summary() if host is not None else None))
    _, unc = uncertainty(ordered, recommended_threshold_tokens=gpu.recommended,
                         gate_threshold_tokens=gate.threshold_tokens, layers=layers, floor_tokens=tp, host=two)
    kernel = gpu.kernel_status(ordered, gate, gather_source, gemm_backend, timer).model_copy(update={
        "regimes": [r.summary() for r in (gpu, host) if r is not None], "regimes_agree": decision.regimes_agree,
        "decided_by": decision.decided_by, "next_step": decision.next_step,
        "max_num_batched_tokens": max_batched_tokens, "uncertainty": unc,
        "mix_expectations": kernel_mix_expectations(ordered, tp, gate.threshold_tokens, max_batched_tokens, host=two)})
    if decision.recommended_threshold_tokens is not None:  # the deciding measurement's (the step's, both regimes')
        kernel = kernel.model_copy(update={"recommended_threshold_tokens": decision.recommended_threshold_tokens})
    return Evaluation(kernel=kernel, verdict=decision.verdict, reasons=list(decision.reasons), decision=decision)
