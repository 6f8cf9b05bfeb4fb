"""The step A/B's statistics: the looks of the stopping rule, each interval's level, and the joint bootstrap of
an arm's effect over lengths (method: :mod:`spx.analysis.step`). Pure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from spx.analysis.stats import LEVEL, RESAMPLES, Interval, percentile_interval, resample_indices
from spx.analysis.step_mix import MixWeights, expectation_weights
from spx.analysis.step_rounds import PairedRounds
from spx.api.step import StepArm, StepOutcome, StepResult, StepSpec, StepStatistic

#: Family-wise error of the gated interval over all looks (its simultaneous coverage is 1 − ALPHA).
ALPHA = 1.0 - LEVEL
#: Fewest usable rounds for a point.
MIN_ROUNDS = 5


def looks(step: StepSpec) -> int:
    """K: the looks of the stopping rule: at ``minRounds``, then every ``lookEvery`` rounds, the last at
    ``rounds`` (``1 + ⌈(rounds − minRounds) / lookEvery⌉``; 1 when ``minRounds ≥ rounds``)."""
    if step.min_rounds >= step.rounds:
        return 1
    return 1 + math.ceil((step.rounds - step.min_rounds) / step.look_every)


def interval_level(step: StepSpec) -> float:
    """Every interval's two-sided level, ``1 − α/K`` (Bonferroni over :func:`looks`)."""
    return 1.0 - ALPHA / looks(step)


def outcome(low: float, high: float) -> StepOutcome:
    """``gain`` when the interval lies below 0 (the arm shortens the step), ``loss`` above, else ``indifferent``."""
    return "gain" if high < 0 else "loss" if low > 0 else "indifferent"


def excludes_band(low: float, high: float, band: float) -> bool:
    """The interval contains neither ``−band`` nor ``+band`` (the stopping rule's "resolved")."""
    return not (low <= -band <= high) and not (low <= band <= high)


def _median(xs: Sequence[float]) -> float:
    """``statistics.median`` (the mean of the two middle values of an even count), without its overhead."""
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2.0


def _statistic(name: StepStatistic) -> Callable[[Sequence[float]], float]:
    return _median if name == "median" else statistics.fmean


@dataclass(frozen=True)
class ArmBoot:
    """One arm's effect per length (ms) and the joint bootstrap replicates of every length's effect."""

    arm: StepArm
    values: dict[int, float]
    rounds: dict[int, int]
    replicates: list[dict[int, float]]

    def interval(self, weights: Mapping[int, float], level: float) -> Interval:
        """The interval of ``Σ weights[L] × effect(L)`` at ``level``."""
        value = sum(w * self.values[x] for x, w in weights.items())
        reps = (sum(w * r[x] for x, w in weights.items()) for r in self.replicates)
        return percentile_interval(value, reps, level)


def bootstrap_arm(paired: PairedRounds, arm: StepArm, statistic: StepStatistic, *, seed: int,
                  resamples: int = RESAMPLES) -> ArmBoot | None:
    """The joint bootstrap of one arm over every length with ≥ :data:`MIN_ROUNDS` usable rounds (None: none).

    Draws resample :attr:`PairedRounds.rounds` (every arm draws the same rounds for a seed); a length's
    replicate is its statistic over the drawn rounds usable at that length (its own value if none is).
    """
    by_len = {x: d for x, d in sorted(paired.diffs.get(arm, {}).items()) if len(d) >= MIN_ROUNDS}
    if not by_len or not paired.rounds:
        return None
    stat = _statistic(statistic)
    values = {x: stat(list(d.values())) for x, d in by_len.items()}
    cols = {x: [d.get(r) for r in paired.rounds] for x, d in by_len.items()}
    full = {x for x, col in cols.items() if None not in col}  # every round usable: a plain gather (fast path)
    reps: list[dict[int, float]] = []
    for (idx,) in resample_indices([len(paired.rounds)], seed=seed, resamples=resamples):
        pick = itemgetter(*idx)
        rep: dict[int, float] = {}
        for x, col in cols.items():
            xs = pick(col) if x in full else [v for i in idx if (v := col[i]) is not None]
            rep[x] = stat(xs) if xs else values[x]
        reps.append(rep)
    return ArmBoot(arm, values, {x: len(d) for x, d in by_len.items()}, reps)


def gated_interval(result: StepResult, boot: ArmBoot | None, level: float) -> tuple[MixWeights, Interval] | str:
    """The gated interval: the split's (``boot``) expected effect from the gate threshold over the batch mix, at
    ``level``, with its weights; or why there is none (a line)."""
    if boot is None:
        return "no split length has enough usable rounds yet"
    try:
        w = expectation_weights(list(boot.values), result.tensor_parallel_size, result.gate_threshold_tokens,
                                result.max_num_batched_tokens, result.step.batch_mix)
    except ValueError as err:
        return str(err)
    return w, boot.interval(w.coefficients, level)


