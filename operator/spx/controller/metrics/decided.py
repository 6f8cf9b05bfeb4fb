"""What decided an experiment's verdict, as series: the regimes' verdicts and crossovers, Δg/Δh per
point, the step A/B's curve and expected effect, and the deciding measurement's recommended threshold.

Everything is read from the status (:class:`spx.api.status.ExperimentStatus`): nothing is re-judged here
(issue #35: one judgement, in ``spx.analysis``; the metrics only read and format it). µs and ms of the
status become seconds. Label sets (docs/metrics.md "What decided"): ``regime`` ∈ :data:`KERNEL_REGIMES`,
``verdict`` ∈ :data:`VERDICTS`, ``delta`` ∈ {gpu, host}, ``bound`` ∈ :data:`BOUNDS`, ``arm`` ∈ the step's
arms (≤ 4 exported), ``length`` ∈ the step's lengths (≤ 64, ``spec.serving.step.lengths``), ``path`` ∈
{aligned, pad}, ``outcome`` ∈ {gain, loss, indifferent}, ``threshold`` ∈ the step's thresholds (≤ 9).
"""

from __future__ import annotations

from typing import Any

from spx.api.status import ExperimentStatus, KernelStatus
from spx.controller.metrics import registry as r

#: (collector, label values, value) of one exported series.
Series = tuple[Any, tuple[str, ...], float]
#: The ``bound`` label: the estimate and the two ends of its interval (the status's 95 % intervals).
BOUNDS = ("estimate", "low", "high")


def _judgement(status: ExperimentStatus) -> Any:
    """``status.judgement`` (issue #35: what the one judgement decided) where this status model has it, else None."""
    return getattr(status, "judgement", None)


def deciding_threshold(status: ExperimentStatus) -> int | None:
    """The recommended threshold of the measurement that decided, as the status holds it:
    ``status.judgement.recommendedThresholdTokens`` where the status has a judgement (issue #35); else by
    ``kernel.decidedBy``: the step A/B's ``step.recommendedThresholdTokens`` when the step decided, the
    kernel's ``kernel.recommendedThresholdTokens`` otherwise. None when the deciding measurement recommends none.

    Selection only, never a new judgement (issue #35 puts the recommendation in the status).
    """
    if (judgement := _judgement(status)) is not None:
        return judgement.recommended_threshold_tokens  # type: ignore[no-any-return]
    kernel = status.kernel or KernelStatus()
    if kernel.decided_by == "step":
        return getattr(status.step, "recommended_threshold_tokens", None)
    return kernel.recommended_threshold_tokens


def decided_by(status: ExperimentStatus) -> str:
    """What decided the verdict (``spx.vocabulary.DECIDED_BY``): ``status.judgement.decidedBy`` where the
    status has a judgement, else ``kernel.decidedBy``; "" when the status does not say."""
    judgement = _judgement(status)
    by = (judgement.decided_by if judgement is not None else None) or (status.kernel and status.kernel.decided_by)
    return str(by or "")


def _bounded(collector: Any, labels: tuple[str, ...], values: tuple[float | None, ...], scale: float) -> list[Series]:
    """One series per ``bound`` (estimate, low, high) whose value is set, scaled to base units."""
    return [(collector, (*labels, b), v * scale) for b, v in zip(BOUNDS, values, strict=True) if v is not None]


def regime_series(key: tuple[str, str], kernel: KernelStatus) -> list[Series]:
    """Each regime's verdict (1 the current one, 0 the others), crossover and recommended threshold."""
    out: list[Series] = []
    for g in kernel.regimes:
        if g.verdict is not None:
            out += [(r.REGIME_VERDICT, (*key, g.regime, v), 1.0 if v == g.verdict else 0.0) for v in r.VERDICTS]
        if g.crossover_tokens is not None:
            out.append((r.REGIME_CROSSOVER, (*key, g.regime), float(g.crossover_tokens)))
        if g.recommended_threshold_tokens is not None:
            out.append((r.REGIME_THRESHOLD, (*key, g.regime), float(g.recommended_threshold_tokens)))
    return out


def delta_series(key: tuple[str, str], kernel: KernelStatus) -> list[Series]:
    """Δg and Δh per measured token count with their 95 % intervals, seconds per call (one call per layer)."""
    out: list[Series] = []
    for p in kernel.points:
        tokens = str(int(p.tokens))
        out += _bounded(r.KERNEL_DELTA, (*key, tokens, "gpu"),
                        (p.gpu_delta_us, p.gpu_delta_low_us, p.gpu_delta_high_us), 1e-6)
        out += _bounded(r.KERNEL_DELTA, (*key, tokens, "host"),
                        (p.host_delta_us, p.host_delta_low_us, p.host_delta_high_us), 1e-6)
    return out


def _point_series(key: tuple[str, str], p: Any) -> list[Series]:
    """One point of the step curve (issue #34's StepPoint): its effect per step and per layer, and its outcome."""
    labels = (*key, str(p.arm), str(int(p.length)), "aligned" if p.aligned else "pad")
    return [
        *_bounded(r.STEP_EFFECT, labels, (p.effect_ms, p.effect_low_ms, p.effect_high_ms), 1e-3),
        *_bounded(r.STEP_EFFECT_PER_LAYER, labels, (p.per_layer_us, p.per_layer_low_us, p.per_layer_high_us), 1e-6),
        (r.STEP_OUTCOME, (*labels, str(p.outcome)), 1.0),
    ]


def step_series(key: tuple[str, str], step: Any) -> list[Series]:
    """The step A/B (status.step, the one-server curve of issue #34): effect per arm and
    length (per step and per layer, with its interval, and its outcome), the A/A and positive control the
    same way, the expected effect over the batch mix per threshold and arm, and whether the step may
    decide (``usable``). A step status without the curve (the per-threshold ``effects`` of the earlier
    contract) exports nothing."""
    if step is None or not hasattr(step, "points"):
        return []
    out: list[Series] = [(r.STEP_USABLE, key, 1.0 if step.usable else 0.0)]
    for p in (*step.points, *step.aa, *step.positive_control):
        out += _point_series(key, p)
    for e in step.expectations:
        labels = (*key, str(int(e.threshold_tokens)), str(e.arm))
        out += _bounded(r.STEP_EXPECTED, labels, (e.effect_ms, e.effect_low_ms, e.effect_high_ms), 1e-3)
        out += _bounded(r.STEP_EXPECTED_PER_LAYER, labels, (e.per_layer_us, e.per_layer_low_us, e.per_layer_high_us), 1e-6)
    if step.break_even_tokens is not None:
        out.append((r.STEP_BREAK_EVEN, key, float(step.break_even_tokens)))
    return out


def decided_series(key: tuple[str, str], status: ExperimentStatus) -> list[Series]:
    """Every "what decided" series of one experiment (module docstring)."""
    kernel = status.kernel or KernelStatus()
    return [*regime_series(key, kernel), *delta_series(key, kernel), *step_series(key, status.step)]
