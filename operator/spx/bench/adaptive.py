"""The sweep: the listed counts, the gate threshold's off-alignment counts (``sweep.offAlignment``), then
the counts the refinement planner asks for (``sweep.refine``).

The loop is the bench's only stateful part of refinement; the decision is
:func:`spx.analysis.refine.plan_refinement` (pure). Only rank 0 holds the points (each sample is
already the max over ranks), so rank 0 plans and the plan is broadcast: every rank then measures the
same counts in the same order, which the collective calls inside a measurement require. Each added
point is measured exactly like a listed one and carries ``addedBecause``; the points come back sorted by
tokens (strictly increasing: a count is never measured twice).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spx.analysis.band import with_intervals
from spx.analysis.interval import point_interval
from spx.analysis.refine import PlannedPoint, off_alignment_counts, plan_refinement
from spx.analysis.regimes import HOST_BOUND, has_host_regime, regime_points
from spx.analysis.summary import point_from_result
from spx.api.result import PointResult
from spx.api.spec import ExperimentSpec
from spx.api.sweep import RefineSpec

#: Measures the given counts on every rank; returns the points on rank 0 and ``None`` on the others.
Measure = Callable[[list[int]], "list[PointResult] | None"]
#: Rank 0's plan (``[(tokens, reason)]``) in, the same plan out on every rank.
Broadcast = Callable[["list[tuple[int, str]] | None"], "list[tuple[int, str]]"]


def next_counts(points: Sequence[PointResult], spec: ExperimentSpec, refine: RefineSpec, budget: int) -> list[tuple[int, str]]:
    """Rank 0's plan for the next round: ``[(tokens, reason)]``, at most ``budget`` counts (pure).

    The points get their speed-up intervals (:func:`spx.analysis.interval.point_interval`) and Δg/Δh
    before planning; the planner is given the gate threshold and, with eager host times, the host-bound
    regime's points (where the decision is: :func:`spx.analysis.refine.plan_refinement`).
    """
    if budget < 1:
        return []
    kernel_points = with_intervals([point_from_result(p, spec) for p in points],
                                   {p.tokens: point_interval(p, spec) for p in points})
    host = regime_points(kernel_points, HOST_BOUND) if has_host_regime(kernel_points) else None
    plan = plan_refinement(kernel_points, spec.parallelism.tensor_parallel_size,
                           bracket_rel=refine.bracket_relative, floor_tokens=refine.floor_tokens,
                           max_new=min(refine.points_per_round, budget), bounds=refine.bounds,
                           gate_threshold=spec.gate.threshold_tokens, host_points=host)
    return [(p.tokens, p.reason) for p in plan.points]


def adaptive_sweep(
    spec: ExperimentSpec,
    measure: Measure,
    broadcast: Broadcast,
    on_point: Callable[[PointResult], None] | None = None,
) -> list[PointResult] | None:
    """Run ``spec.sweep.tokens``, the off-alignment counts (``spec.sweep.offAlignment``), then refine
    (``spec.sweep.refine``, when set) round by round.

    Args:
        spec: the experiment.
        measure: one count at a time (``measure([tokens])``), on every rank.
        broadcast: rank 0's plan to every rank (identity on one process).
        on_point: called on rank 0 with each point as soon as it is measured (added ones carry their
            ``added_because``).

    Returns:
        Rank 0: every point, sorted by tokens. Other ranks: ``None``.

    Raises:
        Whatever ``measure`` raises.
    """
    refine = spec.sweep.refine
    points: list[PointResult] | None = None

    def run(tokens: int, reason: str | None) -> None:
        nonlocal points
        got = measure([tokens])
        if got is None:
            return
        points = points if points is not None else []
        for p in got:
            p = p.model_copy(update={"added_because": reason}) if reason else p
            points.append(p)
            if on_point is not None:
                on_point(p)

    for t in spec.sweep.tokens:
        run(t, None)
    for extra in planned_extra(spec):
        run(extra.tokens, extra.reason)
    added = rounds = 0
    while refine is not None and rounds < refine.max_rounds:
        rounds += 1
        plan = next_counts(points, spec, refine, refine.max_added_points - added) if points is not None else None
        agreed = broadcast(plan)
        if not agreed:
            break
        for tokens, reason in agreed:
            run(tokens, reason)
        added += len(agreed)
    return sorted(points, key=lambda p: p.tokens) if points is not None else None


def planned_extra(spec: ExperimentSpec) -> list[PlannedPoint]:
    """The counts measured after the listed ones and before refinement: the gate threshold's off-alignment
    counts when ``sweep.offAlignment`` (:func:`spx.analysis.refine.off_alignment_counts`)."""
    if not spec.sweep.off_alignment:
        return []
    return off_alignment_counts(spec.sweep.tokens, spec.gate.threshold_tokens)


def torch_broadcast(rank: int, distributed: bool) -> Broadcast:
    """A :data:`Broadcast` over the default ``torch.distributed`` group (rank 0 is the source)."""

    def broadcast(plan: list[tuple[int, str]] | None) -> list[tuple[int, str]]:
        if not distributed:
            return list(plan or [])
        import torch.distributed as dist

        box: list[Any] = [plan if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return [(int(t), str(r)) for t, r in (box[0] or [])]

    return broadcast
