"""spx.analysis — pure functions from measured points to crossover, threshold and gate verdict.

Imports neither torch, kopf nor kubernetes and does no I/O. The entry point for a run is
:func:`judge` (``spx.analysis.judge.judge``: a result + serving/accuracy statuses → the status' kernel
section, verdict and reasons, partial runs capped; :func:`local_status` builds ``status.json`` from it);
:func:`evaluate` judges a bare list of points in both regimes; bench results become points with
:func:`points_from_result`. :func:`decide` says which measurement decides (both kernel regimes, the step
A/B, the deployment's largest batch); :mod:`spx.research.queue` models an eager step as a queue
(docs/kernel-benchmark.md, "Regimes").
"""

from spx.analysis.crossover import (
    BreakEven,
    Crossover,
    break_even_tokens,
    crossover_confidence,
    find_crossover,
    first_winning_tokens,
)
from spx.analysis.decide import Decision, decide, max_num_batched_tokens
from spx.analysis.judge import Judgement, judge, local_status
from spx.analysis.predict import Prediction, predict_from_table
from spx.analysis.reference import parse_kernel_table
from spx.analysis.rollout import combine_verdict
from spx.analysis.stats import candidate_stats
from spx.analysis.summary import Evaluation, evaluate, points_from_result
from spx.analysis.threshold import recommended_threshold_tokens
from spx.analysis.verdict import GateOutcome, gate_verdict

__all__ = [
    "BreakEven", "Crossover", "Decision", "Evaluation", "GateOutcome", "Prediction",
    "break_even_tokens", "candidate_stats", "combine_verdict", "crossover_confidence", "decide", "evaluate",
    "max_num_batched_tokens",
    "judge", "Judgement", "local_status",
    "find_crossover", "first_winning_tokens", "gate_verdict", "parse_kernel_table", "points_from_result",
    "predict_from_table", "recommended_threshold_tokens",
]
