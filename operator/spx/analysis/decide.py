"""The speed verdict: which measurement decides — correctness, the step A/B, the kernel regimes, the deployment.

Pure; table-tested in ``tests/unit/test_analysis_decide.py`` (one row per case of issue #35). Inputs are the
two regimes' gate outcomes (:func:`spx.analysis.verdict.gate_verdict` on the GPU spans and on the host issue
times, :mod:`spx.analysis.regimes`), the step A/B's status (:class:`spx.api.step.StepStatus`, summarised by
:func:`spx.analysis.step.summarize`) and the largest batch the deployment forms. Rules, in order:

1. **correctness**: an output that differs is a Fail, whatever the speed (``decidedBy: correctness``).
2. **a usable step A/B decides** (``step``), whatever the kernel regimes say (agree, disagree, both
   Inconclusive, capped by a modelled gather: the step ran with the real gather): its expected effect of
   splitting from ``gate.thresholdTokens`` over the batch sizes the deployment forms at and above it
   (:class:`~spx.api.step.StepExpectation`, arm ``split``: aligned and pad path weighted by the batch mix) is
   **Pass** when a gain beyond its interval (high end < 0), **Fail** when a loss beyond it (low end > 0),
   **Inconclusive** otherwise. A kernel regime that reaches the other verdict is noted in one line.
3. **nothing unusable decides**: a step that is not ``usable`` (a server that died or stopped early, an
   unconfirmed switch, a token count that differs, a calibration that failed or never ran, CPU without
   ``gate.allowCpuTimings``, another experiment's) decides nothing; its ``unusableReasons`` come first in
   the reasons, then the kernel decides as without a step.
4. **the kernel regimes**: one regime (no eager host times) → its verdict; both agree on the speed
   verdict → that verdict (capped as the kernel's: modelled gather, CPU); they disagree → **Inconclusive**,
   naming the step A/B as the next step.
5. **deployment**: a Pass for a threshold above the largest batch the deployment forms
   (``max_num_batched_tokens``) is refused: the split never engages, the Pass is vacuous → **Fail**
   (``deployment``). (Such a spec is refused up front; this catches a status of an older spec.)

The recommended threshold is the deciding measurement's (:attr:`Decision.recommended_threshold_tokens`): the
step curve's where the step decided, the larger of both regimes' where they agree (the split wins in both
from there), the GPU-bound regime's with one regime; none where nothing decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from spx.analysis.verdict import GateOutcome
from spx.api.gate import VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS, GateSpec
from spx.api.serving_args import MAX_NUM_BATCHED_TOKENS_FLAG, extra_arg_value
from spx.api.spec import ExperimentSpec
from spx.api.status import DecidedBy, RegimeSummary, Verdict
from spx.api.step import StepExpectation, StepPoint, StepStatus

#: The flag as ``spec.serving.extraArgs`` usually spells it (both spellings are read: :mod:`spx.api.serving_args`).
MAX_BATCHED_FLAG = MAX_NUM_BATCHED_TOKENS_FLAG


def max_num_batched_tokens(spec: ExperimentSpec) -> int:
    """The largest batch (tokens) the deployment forms.

    ``gate.maxNumBatchedTokens`` when set; else ``--max-num-batched-tokens`` in ``spec.serving.extraArgs``
    however vLLM's argument parser accepts it (``--max-num-batched-tokens N``, ``--max_num_batched_tokens N``,
    ``=N``: :func:`spx.api.serving_args.extra_arg_value`); else vLLM's default for its OpenAI server on a GPU of
    >= 70 GiB (:data:`spx.api.gate.VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS`, 8192: ``vllm/engine/arg_utils.py``,
    ``EngineArgs.get_batch_defaults``).

    Raises:
        ValueError: the flag in ``extraArgs`` has no value or one that is not a positive integer.
    """
    if spec.gate.max_num_batched_tokens is not None:
        return spec.gate.max_num_batched_tokens
    value = extra_arg_value(spec.serving.extra_args if spec.serving is not None else [], MAX_NUM_BATCHED_TOKENS_FLAG)
    if value is None:
        return VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"spec.serving.extraArgs: {MAX_BATCHED_FLAG} needs a positive integer, got "
                         f"{value[:40]!r}; e.g. [{MAX_BATCHED_FLAG}, '8192']")
    return int(value)


def next_step(threshold_tokens: int, max_batched_tokens: int | None = None) -> str:
    """The exact next step when no measurement decided (spec field and commands); never a threshold the
    deployment cannot reach (above ``max_batched_tokens``: then choosing one it reaches is the next step)."""
    if max_batched_tokens is not None and threshold_tokens > max_batched_tokens:
        return (f"choose gate.thresholdTokens at or below the deployment's largest batch ({max_batched_tokens:,} "
                "tokens, --max-num-batched-tokens) or raise --max-num-batched-tokens in spec.serving.extraArgs; "
                "then run again")
    return (f"measure the split's effect on the whole step at thresholdTokens {threshold_tokens}: set spec.serving.step "
            "(e.g. `step: {}`; it measures the gate threshold and any step.thresholds) and run "
            "`spx serving EXPERIMENT.yaml --out DIR` on the deployment's GPUs (into the kernel run's DIR to judge "
            "both together), or `kubectl apply -f EXPERIMENT.yaml` with it set for the operator's bench pod; then "
            "judge the folder again (`spx gate DIR`)")


@dataclass(frozen=True)
class Decision:
    """:func:`decide`'s outcome: the speed verdict, which measurement decided it, reasons (deciding first).

    Attributes:
        recommended_threshold_tokens: the deciding measurement's recommendation (tokens; module docstring).
        expectation: the step's expected effect at the gate threshold (arm ``split``) when the step decided.
        notes: one line per contradiction (a kernel regime against the deciding step).
    """

    verdict: Verdict
    decided_by: DecidedBy
    reasons: tuple[str, ...]
    regimes_agree: bool | None = None
    next_step: str | None = None
    recommended_threshold_tokens: int | None = None
    expectation: StepExpectation | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepVerdict:
    """What the step A/B says at the gate threshold (:func:`step_decision`): ``verdict`` ``None`` when it
    decides nothing (``reasons`` say why, first), else its verdict, reasons and expectation."""

    verdict: Verdict | None
    reasons: tuple[str, ...]
    next_step: str | None = None
    expectation: StepExpectation | None = None


def expectation_at(step: StepStatus, threshold_tokens: int, arm: str = "split") -> StepExpectation | None:
    """The step's expected effect of splitting from ``threshold_tokens`` (arm ``split``: vLLM's ``sp_shard``)."""
    return next((e for e in step.expectations if e.threshold_tokens == threshold_tokens and e.arm == arm), None)


def step_point(step: StepStatus, length: int, arm: str = "split") -> StepPoint | None:
    """The step's measured effect of ``arm`` at one length (``None``: not measured)."""
    return next((p for p in step.points if p.length == length and p.arm == arm), None)


def effect_text(low: float, mid: float, high: float) -> str:
    """``-1.20 ms [-1.52, -0.91]`` (ms per step; negative: the split shortens it)."""
    return f"{mid:+.2f} ms [{low:+.2f}, {high:+.2f}]"


def _expectation_text(e: StepExpectation) -> str:
    pad = f"; {e.pad_path_share:.0%} of them on the pad path" if e.pad_path_share else ""
    return (f"expected effect of splitting from {e.threshold_tokens:,} tokens over the {e.mix} batch mix "
            f"{effect_text(e.effect_low_ms, e.effect_ms, e.effect_high_ms)} per step "
            f"({e.per_layer_us:+.1f} µs per layer{pad})")


def _at_t_and_t1(step: StepStatus, thr: int) -> str:
    parts = [f"at {length:,}: {effect_text(p.effect_low_ms, p.effect_ms, p.effect_high_ms)}"
             for length in (thr, thr + 1) if (p := step_point(step, length)) is not None]
    return f" ({'; '.join(parts)})" if parts else ""


def step_decision(step: StepStatus | None, gate: GateSpec, max_batched_tokens: int | None = None) -> StepVerdict:
    """What the step A/B says at ``gate.thresholdTokens`` (module rules 2 and 3)."""
    thr = gate.threshold_tokens
    if step is None:
        return StepVerdict(None, ("no step A/B measured",), next_step(thr, max_batched_tokens))
    if not step.usable or (step.cpu_timings and not gate.allow_cpu_timings):
        why = list(step.unusable_reasons) or ["it is not usable (no reason recorded)"]
        if step.cpu_timings and not gate.allow_cpu_timings and not any("CPU" in r for r in why):
            why.insert(0, "it ran on CPU: its effects prove the machinery, never a GPU's (gate.allowCpuTimings false)")
        return StepVerdict(None, tuple(f"the step A/B decides nothing: {r}" for r in why),
                           "fix what the first reason names and run the step A/B again (spec.serving.step); then "
                           "judge the folder again (`spx gate DIR`)")
    exp = expectation_at(step, thr)
    if exp is None:
        have = sorted({e.threshold_tokens for e in step.expectations if e.arm == "split"})
        return StepVerdict(None, (f"the step A/B decides nothing: it has no expected effect at thresholdTokens {thr} "
                                  f"(it has: {', '.join(map(str, have)) or 'none'})",), next_step(thr, max_batched_tokens))
    said = _expectation_text(exp) + _at_t_and_t1(step, thr)
    if exp.effect_high_ms < 0:
        return StepVerdict("Pass", (f"decided by the step A/B: the split shortens the step: {said}",), None, exp)
    if exp.effect_low_ms > 0:
        return StepVerdict("Fail", (f"decided by the step A/B: the split lengthens the step: {said}",), None, exp)
    return StepVerdict("Inconclusive", (f"decided by the step A/B: within the noise, neither a gain nor a loss: {said}",),
                       (f"more rounds of the step A/B (spec.serving.step.rounds; {step.rounds} used) narrow the "
                        "interval; if it still covers 0, the split's effect at this threshold is within the "
                        "deployment's noise"), exp)


def _regime_line(gpu: GateOutcome, host: GateOutcome | None) -> str:
    if host is None:
        return f"GPU-bound (Δg): {gpu.speed_verdict}"
    return f"GPU-bound (Δg): {gpu.speed_verdict}; host-bound (Δh): {host.speed_verdict}"


def decide(
    gpu: GateOutcome,
    host: GateOutcome | None,
    gate: GateSpec,
    *,
    step: StepStatus | None = None,
    max_batched_tokens: int | None = None,
    regimes: tuple[RegimeSummary | None, RegimeSummary | None] = (None, None),
) -> Decision:
    """The speed verdict over correctness, the step A/B, both kernel regimes and the deployment (module docstring).

    Args:
        gpu, host: the regimes' gate outcomes (``host`` ``None``: one regime).
        gate: the experiment's gate (threshold, CPU policy).
        step: ``status.step``, when the step A/B ran.
        max_batched_tokens: the largest batch the deployment forms (:func:`max_num_batched_tokens`);
            ``None``: not checked.
        regimes: the regimes' summaries (GPU-bound, host-bound) for the recommended threshold.
    """
    d = _decide_speed(gpu, host, gate, step, max_batched_tokens, regimes)
    thr = gate.threshold_tokens
    if d.verdict == "Pass" and max_batched_tokens is not None and thr > max_batched_tokens:
        why = (f"thresholdTokens {thr} is above the largest batch the deployment forms (max_num_batched_tokens "
               f"{max_batched_tokens}): the split never engages, so the Pass is vacuous; choose a threshold at or "
               f"below {max_batched_tokens} or raise --max-num-batched-tokens (gate.maxNumBatchedTokens, "
               "spec.serving.extraArgs)")
        return Decision("Fail", "deployment", (why, *d.reasons), d.regimes_agree, next_step(thr, max_batched_tokens),
                        None, d.expectation, d.notes)
    return d


def _decide_speed(gpu: GateOutcome, host: GateOutcome | None, gate: GateSpec, step: StepStatus | None,
                  max_batched: int | None, regimes: tuple[RegimeSummary | None, RegimeSummary | None]) -> Decision:
    agree = None if host is None else gpu.speed_verdict == host.speed_verdict
    if gpu.correctness_failed or (host is not None and host.correctness_failed):
        return Decision("Fail", "correctness", gpu.reasons, agree)
    sv = step_decision(step, gate, max_batched)
    if sv.verdict is not None:
        assert step is not None
        against = [f"{name} {o.speed_verdict}" for name, o in (("GPU-bound (Δg)", gpu), ("host-bound (Δh)", host))
                   if o is not None and o.speed_verdict in ("Pass", "Fail") and o.speed_verdict != sv.verdict]
        notes = (f"note: the kernel sweep says otherwise ({'; '.join(against)}) where the step A/B says "
                 f"{sv.verdict}: the step decides (it measures the whole step with the real gather)",) if against else ()
        kernel = tuple(f"kernel: {r}" for r in (*gpu.reasons[:3], *(host.reasons[:3] if host else ())))
        return Decision(sv.verdict, "step", (*sv.reasons, *notes, f"kernel regimes: {_regime_line(gpu, host)}", *kernel),
                        agree, sv.next_step, step.recommended_threshold_tokens, sv.expectation, notes)
    unusable = sv.reasons if step is not None else ()
    d = _kernel(gpu, host, gate, max_batched, regimes)
    return Decision(d.verdict, d.decided_by, (*unusable, *d.reasons), d.regimes_agree,
                    sv.next_step if step is not None and d.decided_by == "none" else d.next_step,
                    d.recommended_threshold_tokens)


def _kernel(gpu: GateOutcome, host: GateOutcome | None, gate: GateSpec, max_batched: int | None,
            regimes: tuple[RegimeSummary | None, RegimeSummary | None]) -> Decision:
    """Module rule 4: the kernel regimes decide (one, or both agreeing), else nothing does."""
    g, h = regimes
    if host is None:
        by: DecidedBy = "kernel" if gpu.verdict != "Inconclusive" else "none"
        return Decision(gpu.verdict, by, gpu.reasons, None, None,
                        g.recommended_threshold_tokens if g is not None and by == "kernel" else None)
    if gpu.speed_verdict != host.speed_verdict:
        head = (f"the kernel regimes disagree at and above thresholdTokens {gate.threshold_tokens} "
                f"({_regime_line(gpu, host)}): the split's effect depends on whether the step is GPU- or host-bound; "
                "the step A/B decides")
        detail = (*(f"GPU-bound: {r}" for r in gpu.reasons[:4]), *(f"host-bound: {r}" for r in host.reasons[:4]))
        return Decision("Inconclusive", "none", (head, *detail), False, next_step(gate.threshold_tokens, max_batched))
    line = _regime_line(gpu, host)
    body: tuple[str, ...] = gpu.reasons
    if gpu.verdict != "Inconclusive":
        head = f"decided by the kernel sweep: both regimes agree: {gpu.verdict} ({line})"
    elif gpu.speed_verdict != "Inconclusive":  # capped: gate_verdict put the cap's reason first
        head = f"both regimes agree on the speeds ({line}): {gpu.reasons[0]}"  # (the cap's reason says "reported as")
        body = gpu.reasons[1:]
    else:
        head = f"neither regime decides the speed ({line})"
    own = [f"host-bound: {r}" for r in host.reasons if r not in gpu.reasons][:3]  # (the same line said once)
    by = "kernel" if gpu.verdict != "Inconclusive" else "none"
    recs = [r.recommended_threshold_tokens for r in (g, h) if r is not None]
    rec = max(recs) if by == "kernel" and len(recs) == 2 and None not in recs else None  # type: ignore[type-var]
    return Decision(gpu.verdict, by, (head, *body, *own), True, None, rec)
