"""Step A/B specs that cannot be measured, refused up front (issue #35, requirement 4). Pure.

One rule each, shared by every place that applies it:

- **lengths above the batch limit** (:func:`lengths_above`): ``spx validate`` and the runner
  (``spx.serving.step.planned_result``) refuse a length above ``max_num_batched_tokens`` with the same words;
- **coverage** (:func:`coverage_problems`): the curve is never extrapolated, so the measured lengths of each class
  (aligned ``M % TP == 0``; off-aligned, ``sp_shard``'s pad path) must reach below the first and above the last
  batch size of that class the deployment forms from a threshold ``T`` up to ``max_num_batched_tokens`` (weighted by
  the batch mix, :func:`segments`). Validation refuses explicit ``step.lengths`` that do not; the analysis
  (``spx.analysis.step_mix.expectation_weights``) gives no expectation — so the step is unusable at ``T`` — when
  the lengths *measured* do not;
- the stopping rule's looks, the batch mix's weights and bounds, ``minRounds`` and compilation flags
  (:func:`step_problems`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from spx.api.step import BatchMixBucket, StepSpec

#: Most looks of the stopping rule, ``1 + ⌈(rounds − minRounds) / lookEvery⌉``: each interval is at level
#: ``1 − α/K`` (Bonferroni over the K looks, ``spx.analysis.step_stats``), so at K = 20 and α = 0.05 each interval is
#: already a 99.75 % one; more looks only widen every interval until none resolves.
MAX_LOOKS = 20

#: A piece of the batch-size distribution: integer sizes ``lo ≤ M ≤ hi``, each of weight ``density``.
Segment = tuple[int, int, float]

#: ``vllm serve`` flags that turn torch.compile on for the forward (``vllm/engine/arg_utils.py``): ``-O1``…``-O3``
#: (``-O N``, ``-O=N``), ``--compilation-config``/``-cc`` with a mode (or level) above 0, ``--no-enforce-eager``
#: (vLLM compiles by default; spx adds ``--enforce-eager`` only when no compilation flag is given).
_COMPILE_CONFIG_FLAGS = ("--compilation-config", "-cc")


def segments(threshold: int, max_batched: int, buckets: Sequence[BatchMixBucket] = ()) -> list[Segment]:
    """The batch-size distribution clipped to ``[threshold, max_batched]``.

    No buckets: one segment of density 1 (uniform). Buckets: sorted by ``le``; bucket ``i`` covers
    ``(le[i-1], le[i]]`` (the first from 1) with ``weight / width`` per size. Empty when nothing falls in range.
    """
    if not buckets:
        return [(threshold, max_batched, 1.0)] if threshold <= max_batched else []
    out: list[Segment] = []
    prev = 0
    for b in sorted(buckets, key=lambda b: b.le):
        lo, hi = max(prev + 1, threshold), min(b.le, max_batched)
        if b.weight > 0 and lo <= hi and b.le > prev:
            out.append((lo, hi, b.weight / (b.le - prev)))
        prev = max(prev, b.le)
    return out


def _class_span(segs: Sequence[Segment], tp: int, aligned: bool) -> tuple[int, int] | None:
    """The first and last batch size of one class (aligned, or off-aligned) carrying weight in ``segs``."""
    ends: list[int] = []
    for lo, hi, density in segs:
        if density <= 0 or (not aligned and tp == 1):
            continue
        if aligned:
            a, b = -(-lo // tp) * tp, hi // tp * tp
        else:
            a, b = (lo if lo % tp else lo + 1), (hi if hi % tp else hi - 1)
        if a <= b:
            ends += [a, b]
    return (min(ends), max(ends)) if ends else None


def coverage_problems(lengths: Sequence[int], tp: int, threshold: int, max_batched: int,
                      buckets: Sequence[BatchMixBucket] = ()) -> list[str]:
    """Why ``lengths`` (tokens) cannot give the expected effect from ``threshold`` without extrapolating (module
    docstring); empty: every class the deployment forms from ``threshold`` is bracketed by measured lengths."""
    segs = segments(threshold, max_batched, buckets)
    pts = sorted(set(lengths))
    out: list[str] = []
    for aligned, name in ((True, "aligned (M % TP == 0)"), (False, "off-aligned (the pad path, M % TP != 0)")):
        span = _class_span(segs, tp, aligned)
        if span is None:
            continue
        mine = [p for p in pts if (p % tp == 0) == aligned]
        first, last = span
        if mine and mine[0] <= first and mine[-1] >= last:
            continue
        out.append(f"the {name} lengths {mine[:8]} do not cover the batch sizes {first}…{last} of that class the "
                   f"deployment forms from T={threshold} up to max_num_batched_tokens {max_batched} at TP {tp}: the "
                   f"curve is never extrapolated; measure one ≤ {first} and one ≥ {last}")
    return out


def lengths_above(lengths: Sequence[int], most: int) -> str | None:
    """The refusal of step lengths above ``most`` (max_num_batched_tokens), or None."""
    above = [n for n in lengths if n > most]
    if not above:
        return None
    return (f"spec.serving.step.lengths: {above[:8]} exceed max_num_batched_tokens {most}: a longer prompt is chunked "
            f"over several steps, the deployment never forms such a batch; list lengths ≤ {most} or raise "
            "--max-num-batched-tokens in spec.serving.extraArgs")


def compile_flag(args: Sequence[str]) -> str | None:
    """The first ``serving.extraArgs`` flag that makes the step server's forward compiled (so the step A/B refuses
    every length: a compiled region keeps the branch of its trace), quoted as given; None when the forward runs
    eager (``--enforce-eager`` given, or no compilation flag: spx adds ``--enforce-eager``)."""
    if "--enforce-eager" in args:
        return None
    for i, a in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a == "--no-enforce-eager":
            return a
        if a.startswith("-O") and not a.startswith("--"):
            level = a[2:].lstrip("=") or nxt
            if level.isdigit() and int(level) > 0:
                return f"{a} {nxt}".strip() if a == "-O" else a
        name, _, value = a.partition("=")
        if name in _COMPILE_CONFIG_FLAGS:
            raw = value or nxt
            if _config_mode(raw) > 0:
                return f"{name} {raw[:60]}"
    return None


def _config_mode(raw: str) -> int:
    """The compilation mode of a ``--compilation-config`` value (``3`` or JSON with ``mode``/``level``); 0 if none."""
    if raw.strip().isdigit():
        return int(raw)
    try:
        doc = json.loads(raw)
    except ValueError:
        return 0
    mode = doc.get("mode", doc.get("level", 0)) if isinstance(doc, dict) else 0
    return mode if isinstance(mode, int) else 0


def _rounds_problems(step: StepSpec) -> list[str]:
    out = []
    if step.min_rounds > step.rounds:
        out.append(f"spec.serving.step.minRounds: {step.min_rounds} is above rounds {step.rounds}: the first look would "
                   f"come after the last round; set minRounds ≤ rounds (e.g. minRounds {min(40, step.rounds)})")
    looks = 1 + math.ceil(max(0, step.rounds - step.min_rounds) / step.look_every)
    if looks > MAX_LOOKS:
        out.append(f"spec.serving.step.lookEvery: {step.look_every} gives {looks} looks ((rounds {step.rounds} − "
                   f"minRounds {step.min_rounds}) / lookEvery + 1), more than {MAX_LOOKS}: each interval is at level "
                   f"1 − 0.05/{looks}, too wide to resolve anything; raise lookEvery to "
                   f"≥ {math.ceil((step.rounds - step.min_rounds) / (MAX_LOOKS - 1))} or lower rounds")
    return out


def _mix_problems(step: StepSpec, threshold: int, most: int) -> list[str]:
    mix = step.batch_mix
    if not mix:
        return []
    if all(b.weight == 0 for b in mix):
        return ["spec.serving.step.batchMix: every weight is 0: no batch size carries weight; give the counts of "
                "vllm:iteration_tokens_total per bucket, or leave batchMix out (every size equally likely)"]
    out = []
    high = sorted(b.le for b in mix if b.le > most and b.weight > 0)
    if high:
        out.append(f"spec.serving.step.batchMix: buckets with le {high[:8]} above max_num_batched_tokens {most} carry "
                   f"weight: the deployment never forms such a batch; cap le at {most} or raise "
                   "--max-num-batched-tokens")
    if not segments(threshold, most, mix):
        out.append(f"spec.serving.step.batchMix: no weight at or above the gate threshold {threshold}: nothing the "
                   "split would change is ever formed; give the buckets at and above it")
    return out


def step_problems(step: StepSpec | None, args: Sequence[str], tp: int, most: int, thresholds: Sequence[int]) -> list[str]:
    """Every reason the step A/B ``step`` cannot be measured (module docstring); empty: none.

    Args:
        step: ``spec.serving.step`` (None: no step A/B, no problem).
        args: ``spec.serving.extraArgs``.
        tp: the servers' TP.
        most: max_num_batched_tokens of the deployment (tokens).
        thresholds: the gate threshold first, then ``step.thresholds`` (tokens).
    """
    if step is None:
        return []
    out = [*_rounds_problems(step), *_mix_problems(step, thresholds[0], most)]
    if (flag := compile_flag(args)) is not None:
        out.append(f"spec.serving.extraArgs: {flag} compiles the forward (torch.compile): a compiled region keeps the "
                   "branch of its trace, so the step A/B would refuse every length and measure nothing; leave the "
                   "compilation flags out (spx adds --enforce-eager) or give -O0")
    if step.lengths:
        if (above := lengths_above(step.lengths, most)) is not None:
            out.append(above)
        kept = [n for n in step.lengths if n <= most]
        for t in thresholds:
            out += [f"spec.serving.step.lengths: {p}; or leave step.lengths out for the default curve"
                    for p in coverage_problems(kept, tp, t, most, step.batch_mix) if t < most]
    return list(dict.fromkeys(out))


def batch_limit(gate_max: int | None, args: Sequence[str]) -> int | None:
    """The largest batch the deployment forms, tokens: ``gate.maxNumBatchedTokens``, else ``--max-num-batched-tokens``
    of ``serving.extraArgs`` (however vLLM spells it), else vLLM's default 8192; None when the flag's value is not a
    positive integer (``spx.api.deployment`` refuses that). The same order as ``spx.analysis.decide``."""
    from spx.api.gate import VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    from spx.api.serving_args import MAX_NUM_BATCHED_TOKENS_FLAG, extra_arg_value

    if gate_max is not None:
        return gate_max
    raw = extra_arg_value(list(args), MAX_NUM_BATCHED_TOKENS_FLAG)
    if raw is None:
        return VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    return int(raw) if raw.isdigit() and int(raw) >= 1 else None
