"""Specs spx cannot measure, refused up front (issue #35): what the deployment's servers would really run.

:func:`deployment_problems` is called by :class:`spx.api.spec.ExperimentSpec`'s validator with the spec's
``gate``, ``serving`` and whether it has ``accuracy`` (the pieces it checks, so this module does not import
the spec that calls it), so ``spx
validate``, ``spx run``, ``spx serving`` and the operator's admission all refuse the same specs (exit 3 in the
CLI), each problem naming the field and the fix:

- a TP the servers would not use: ``--tensor-parallel-size`` / ``--tensor_parallel_size`` / ``-tp`` in
  ``serving.extraArgs`` that is not a positive integer (vLLM refuses ``-1``);
- a gate or step threshold at or above the deployment's largest batch (``--max-num-batched-tokens`` however
  spelled, or ``gate.maxNumBatchedTokens``): the split would never engage at ``T + 1``, the pad path;
- a step A/B whose ``T + 1``-token request does not fit ``--max-model-len`` (prompt + one output token);
- a serving section with nothing to run (no serving points, no GSM8K, no step A/B).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spx.api.serving_args import (
    MAX_MODEL_LEN_FLAG,
    MAX_NUM_BATCHED_TOKENS_FLAG,
    TENSOR_PARALLEL_FLAGS,
    extra_arg_value,
)

if TYPE_CHECKING:
    from spx.api.gate import GateSpec
    from spx.api.serving import ServingSpec

#: vLLM's ``--max-model-len`` suffixes (``vllm/engine/arg_utils.py``, ``human_readable_int``): k = 1000, K = 1024.
_SCALE = {"k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}


def model_len(raw: str) -> int | None:
    """``--max-model-len``'s value as vLLM reads it (``4096``, ``32k``, ``1K``); ``None`` if not a length."""
    raw = raw.strip()
    scale = _SCALE.get(raw[-1:], 1)
    digits = raw[:-1] if scale != 1 else raw
    try:
        value = int(float(digits) * scale)
    except ValueError:
        return None
    return value if value > 0 else None


def _excerpt(value: str) -> str:
    return repr(value[:40])


def _tp_problems(args: list[str]) -> list[str]:
    raw = extra_arg_value(args, *TENSOR_PARALLEL_FLAGS)
    if raw is None or (raw.isdigit() and int(raw) >= 1):
        return []
    return [f"spec.serving.extraArgs: --tensor-parallel-size (or -tp, --tensor_parallel_size) is {_excerpt(raw)}, a "
            "TP vLLM would not use: give a positive integer (e.g. ['--tensor-parallel-size', '8']) or leave it out "
            "(spec.parallelism.tensorParallelSize is used)"]


def _batch_problems(gate: GateSpec, serving: ServingSpec | None, args: list[str]) -> list[str]:
    raw = extra_arg_value(args, MAX_NUM_BATCHED_TOKENS_FLAG)
    if raw is not None and not (raw.isdigit() and int(raw) >= 1):
        return [f"spec.serving.extraArgs: {MAX_NUM_BATCHED_TOKENS_FLAG} is {_excerpt(raw)}: give a positive integer, "
                f"e.g. ['{MAX_NUM_BATCHED_TOKENS_FLAG}', '8192']"]
    largest = gate.max_num_batched_tokens or (int(raw) if raw is not None else None)
    if largest is None and serving is None:
        return []  # a kernel-only spec that names no deployment: decide's deployment rule applies
    if largest is None:
        from spx.api.gate import VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS

        largest = VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    step = serving.step if serving is not None else None
    named = [("gate.thresholdTokens", gate.threshold_tokens),
             *(("serving.step.thresholds", t) for t in (step.thresholds if step is not None else []))]
    return [f"{field} {t} is at or above the largest batch the deployment forms ({largest}); choose a threshold below "
            f"{largest}, or raise {MAX_NUM_BATCHED_TOKENS_FLAG} in spec.serving.extraArgs (or gate.maxNumBatchedTokens; "
            f"vLLM's default is 8192): a batch of T + 1 = {t + 1} tokens never forms, so the split is never measured "
            "where it engages" for field, t in named if t >= largest]


def _model_len_problems(gate: GateSpec, serving: ServingSpec | None, args: list[str]) -> list[str]:
    step = serving.step if serving is not None else None
    raw = extra_arg_value(args, MAX_MODEL_LEN_FLAG)
    if step is None or raw is None or (limit := model_len(raw)) is None:
        return []
    named = [("gate.thresholdTokens", gate.threshold_tokens), *(("serving.step.thresholds", t) for t in step.thresholds)]
    return [f"{field} {t}: the step A/B sends a request of T + 1 = {t + 1} prompt tokens and one output token, above "
            f"{MAX_MODEL_LEN_FLAG} {limit} of spec.serving.extraArgs; choose a threshold below {limit - 1} or raise "
            f"{MAX_MODEL_LEN_FLAG}" for field, t in named if t + 2 > limit]


def _nothing_to_run(serving: ServingSpec | None, has_accuracy: bool) -> list[str]:
    s = serving
    if s is None or s.points or s.step is not None or has_accuracy:
        return []
    return ["spec.serving has nothing to run: no serving.points, no serving.step and no spec.accuracy; add serving "
            "points (leave points out for the seed's TTFT and throughput points), `step: {}` or spec.accuracy, or "
            "remove spec.serving"]


def deployment_problems(gate: GateSpec, serving: ServingSpec | None, has_accuracy: bool) -> list[str]:
    """Every reason a spec with this ``gate``, ``serving`` section and (``has_accuracy``) ``spec.accuracy`` cannot be
    measured on the deployment it describes (module docstring); empty: none. Raises nothing."""
    args = list(serving.extra_args) if serving is not None else []
    return [*_tp_problems(args), *_batch_problems(gate, serving, args), *_model_len_problems(gate, serving, args),
            *_nothing_to_run(serving, has_accuracy)]
