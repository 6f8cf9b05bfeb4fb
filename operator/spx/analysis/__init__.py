"""spx.analysis — pure functions from measured points to crossover, threshold and gate verdict.

Imports neither torch, kopf nor kubernetes and does no I/O. The entry point is :func:`evaluate`
(points → :class:`Evaluation` with ``kernel: KernelStatus``, ``verdict``, ``reasons``); bench results
become points with :func:`points_from_result`.
"""

from spx.analysis.crossover import (
    BreakEven,
    Crossover,
    break_even_tokens,
    crossover_confidence,
    find_crossover,
    first_winning_tokens,
)
from spx.analysis.predict import Prediction, predict_from_table
from spx.analysis.reference import parse_kernel_table
from spx.analysis.rollout import combine_verdict
from spx.analysis.stats import candidate_stats
from spx.analysis.summary import Evaluation, evaluate, evaluate_result, points_from_result
from spx.analysis.threshold import recommended_threshold_tokens
from spx.analysis.verdict import GateOutcome, gate_verdict

__all__ = [
    "BreakEven", "Crossover", "Evaluation", "GateOutcome", "Prediction",
    "break_even_tokens", "candidate_stats", "combine_verdict", "crossover_confidence", "evaluate", "evaluate_result",
    "find_crossover", "first_winning_tokens", "gate_verdict", "parse_kernel_table", "points_from_result",
    "predict_from_table", "recommended_threshold_tokens",
]
