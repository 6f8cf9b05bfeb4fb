"""The kernel verdict over both regimes, the step A/B and the deployment: which measurement decides.

Pure; table-tested in ``tests/unit/test_analysis_decide.py``. Inputs are the two regimes' gate outcomes
(:func:`spx.analysis.verdict.gate_verdict` on the GPU spans and on the host issue times,
:mod:`spx.analysis.regimes`), the step A/B's status (:class:`spx.api.step.StepStatus`) and the largest
batch the deployment forms. Rules, in order:

1. **correctness**: an output that differs is a Fail, whatever the speed (``decidedBy: correctness``).
2. **one regime** (no eager host times: an all-graph sweep or an old result): the GPU-bound verdict
   (``kernel``; ``none`` when it is Inconclusive).
3. **the regimes agree** on the speed verdict at and above ``gate.thresholdTokens`` (verdicts are
   compared, before the modelled-gather and CPU caps; never rounded thresholds): that verdict, capped as
   the kernel's (``kernel``; ``none`` when Inconclusive). A step A/B that contradicts it is noted in the
   reasons, not obeyed.
4. **the regimes disagree**: the step A/B at the gate threshold decides (``step``): **Pass** when every
   effect at ``T`` (and ``T + 1``, the pad path) is a gain beyond its interval (high end < 0), **Fail**
   when one is a loss beyond its interval (low end > 0), **Inconclusive** when an interval straddles 0.
   The step ran on the deployment with the real gather, so the modelled-gather cap does not apply; a
   step run on CPU never decides unless ``gate.allowCpuTimings``. Without a usable step measurement:
   **Inconclusive** (``none``), naming the next step (``spec.serving.step``, the command).
5. **deployment**: a Pass for a threshold above the largest batch the deployment forms
   (``max_num_batched_tokens``) is refused: the split never engages, the Pass is vacuous → **Fail**
   (``deployment``), saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spx.analysis.verdict import GateOutcome
from spx.api.gate import VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS, GateSpec
from spx.api.spec import ExperimentSpec
from spx.api.status import DecidedBy, Verdict
from spx.api.step import StepPoint as StepEffect  # CONTRACT STUB (session 9): h3 rewrites the step decision
from spx.api.step import StepStatus

MAX_BATCHED_FLAG = "--max-num-batched-tokens"


def max_num_batched_tokens(spec: ExperimentSpec) -> int:
    """The largest batch (tokens) the deployment forms.

    ``gate.maxNumBatchedTokens`` when set; else ``--max-num-batched-tokens N`` (or ``=N``) in
    ``spec.serving.extraArgs``; else vLLM's default for its OpenAI server on a GPU of >= 70 GiB
    (:data:`spx.api.gate.VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS`, 8192: ``vllm/engine/arg_utils.py``,
    ``EngineArgs.get_batch_defaults``).

    Raises:
        ValueError: the flag in ``extraArgs`` has no value or one that is not a positive integer.
    """
    if spec.gate.max_num_batched_tokens is not None:
        return spec.gate.max_num_batched_tokens
    args = list(spec.serving.extra_args) if spec.serving is not None else []
    for i, arg in enumerate(args):
        value: str | None = None
        if arg == MAX_BATCHED_FLAG:
            value = args[i + 1] if i + 1 < len(args) else ""
        elif arg.startswith(MAX_BATCHED_FLAG + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"spec.serving.extraArgs: {MAX_BATCHED_FLAG} needs a positive integer, got "
                                 f"{value[:40]!r}; e.g. [{MAX_BATCHED_FLAG}, '8192']")
            return int(value)
    return VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS


def next_step(threshold_tokens: int) -> str:
    """The exact next step when the regimes disagree and no step A/B decided (spec field and commands)."""
    return (f"measure the split's effect on the whole step at thresholdTokens {threshold_tokens}: set spec.serving.step "
            "(e.g. `step: {}`; it measures the gate threshold and any step.thresholds) and run "
            "`spx serving EXPERIMENT.yaml --out DIR` on the deployment's GPUs, or `kubectl apply -f EXPERIMENT.yaml` "
            "with it set for the operator's bench pod; then judge the folder again (`spx gate DIR`)")


@dataclass(frozen=True)
class Decision:
    """:func:`decide`'s outcome: the kernel verdict, which measurement decided it, reasons (deciding first)."""

    verdict: Verdict
    decided_by: DecidedBy
    reasons: tuple[str, ...]
    regimes_agree: bool | None = None
    next_step: str | None = None


def _ms(e: StepEffect) -> str:
    return (f"{e.effect_ms:+.3f} ms [{e.effect_low_ms:+.3f}, {e.effect_high_ms:+.3f}] per step "
            f"({e.per_layer_us:+.1f} µs per layer over {e.layers} layers) at {e.length} tokens ({e.role})")


def step_decision(step: StepStatus | None, gate: GateSpec) -> tuple[Verdict | None, str, str | None]:
    """``(verdict, reason, next step)`` of the step A/B at ``gate.thresholdTokens`` (module rule 4).

    ``verdict`` ``None``: no usable step measurement (none, none at the gate threshold, a CPU run
    without ``allowCpuTimings``, or a positive control that ran and was not detected: the design could
    not see an effect it must see); the reason says why.
    """
    thr = gate.threshold_tokens
    if step is None:
        return None, "no step A/B measured", next_step(thr)
    if step.cpu_timings and not gate.allow_cpu_timings:
        return None, ("the step A/B ran on CPU: its effects prove the machinery, never the GPU's regime "
                      "(allowCpuTimings false)"), next_step(thr)
    effects = [e for e in step.effects if e.threshold_tokens == thr]
    if step.positive_controls and not any(e.effect_low_ms > 0 for e in step.positive_controls
                                          if e.threshold_tokens == thr):
        return None, ("the step A/B's positive control (one extra prefill step at thresholdTokens + 1) was not "
                      "detected: on this deployment the design cannot see an effect of that size, so its effects "
                      "decide nothing"), (
            "more rounds of the step A/B (spec.serving.step.rounds), or a quieter node; then judge again")
    if not effects:
        measured = sorted({e.threshold_tokens for e in step.effects})
        return None, (f"the step A/B measured no effect at thresholdTokens {thr} (measured: "
                      f"{', '.join(map(str, measured)) or 'none'})"), next_step(thr)
    losses = [e for e in effects if e.effect_low_ms > 0]
    straddle = [e for e in effects if e.effect_low_ms <= 0 <= e.effect_high_ms]
    if losses:
        return "Fail", "the split lengthens the step beyond its interval: " + "; ".join(map(_ms, losses)), None
    if straddle:
        rounds = max(e.rounds for e in effects)
        return "Inconclusive", ("the step effect's interval straddles 0: " + "; ".join(map(_ms, straddle))), (
            f"more rounds of the step A/B (spec.serving.step.rounds, {rounds} used) narrow the interval; if it still "
            "straddles 0, the split's effect on the step at this threshold is within the deployment's noise")
    return "Pass", "the split shortens the step beyond its interval: " + "; ".join(map(_ms, effects)), None


def _regime_line(gpu: GateOutcome, host: GateOutcome) -> str:
    return f"GPU-bound (Δg): {gpu.speed_verdict}; host-bound (Δh): {host.speed_verdict}"


def decide(
    gpu: GateOutcome,
    host: GateOutcome | None,
    gate: GateSpec,
    *,
    step: StepStatus | None = None,
    max_batched_tokens: int | None = None,
) -> Decision:
    """The kernel verdict over both regimes, the step A/B and the deployment (rules: module docstring).

    Args:
        gpu, host: the regimes' gate outcomes (``host`` ``None``: one regime).
        gate: the experiment's gate (threshold, CPU policy).
        step: ``status.step``, when the step A/B ran.
        max_batched_tokens: the largest batch the deployment forms (:func:`max_num_batched_tokens`);
            ``None``: not checked.
    """
    d = _decide_speed(gpu, host, gate, step)
    thr = gate.threshold_tokens
    if d.verdict == "Pass" and max_batched_tokens is not None and thr > max_batched_tokens:
        why = (f"thresholdTokens {thr} is above the largest batch the deployment forms (max_num_batched_tokens "
               f"{max_batched_tokens}): the split never engages, so the Pass is vacuous; choose a threshold at or "
               f"below {max_batched_tokens} or raise --max-num-batched-tokens (gate.maxNumBatchedTokens, "
               "spec.serving.extraArgs)")
        return Decision("Fail", "deployment", (why, *d.reasons), d.regimes_agree, d.next_step)
    return d


def _decide_speed(gpu: GateOutcome, host: GateOutcome | None, gate: GateSpec, step: StepStatus | None) -> Decision:
    if gpu.correctness_failed or (host is not None and host.correctness_failed):
        return Decision("Fail", "correctness", gpu.reasons)
    if host is None:
        return Decision(gpu.verdict, "kernel" if gpu.verdict != "Inconclusive" else "none", gpu.reasons)
    if gpu.speed_verdict == host.speed_verdict:
        return _agreeing(gpu, host, gate, step)
    head = (f"the kernel regimes disagree at and above thresholdTokens {gate.threshold_tokens} "
            f"({_regime_line(gpu, host)}): the split's effect depends on whether the step is GPU- or host-bound")
    detail = (*(f"GPU-bound: {r}" for r in gpu.reasons[:4]), *(f"host-bound: {r}" for r in host.reasons[:4]))
    verdict, why, then = step_decision(step, gate)
    if verdict is None:
        return Decision("Inconclusive", "none", (head, f"{why}: the step A/B decides; next: {then}", *detail),
                        False, then)
    return Decision(verdict, "step", (f"decided by the step A/B: {why}", head, *detail), False, then)


def _agreeing(gpu: GateOutcome, host: GateOutcome, gate: GateSpec, step: StepStatus | None) -> Decision:
    """Module rule 3: the regimes reach the same speed verdict; the head says what that decided."""
    line = _regime_line(gpu, host)
    body: Sequence[str] = gpu.reasons
    if gpu.verdict != "Inconclusive":
        head = f"decided by the kernel sweep: both regimes agree: {gpu.verdict} ({line})"
    elif gpu.speed_verdict != "Inconclusive":  # capped: gate_verdict put the cap's reason first
        head = f"both regimes agree on the speeds ({line}): {gpu.reasons[0]}"  # (the cap's reason says "reported as")
        body = gpu.reasons[1:]
    else:
        head = f"neither regime decides the speed ({line})"
    own = [f"host-bound: {r}" for r in host.reasons if r not in gpu.reasons][:3]  # (the same line said once)
    by: DecidedBy = "kernel" if gpu.verdict != "Inconclusive" else "none"
    return Decision(gpu.verdict, by, (head, *_step_note(step, gate, gpu.speed_verdict), *body, *own), True)


def _step_note(step: StepStatus | None, gate: GateSpec, kernel_speed: Verdict) -> tuple[str, ...]:
    """A note when a usable step A/B contradicts agreeing kernel regimes (it does not change the verdict: rule 3)."""
    verdict, why, _ = step_decision(step, gate)
    if verdict in (None, "Inconclusive") or verdict == kernel_speed:
        return ()
    return (f"note: the step A/B on the deployment says {verdict} ({why}) where both kernel regimes say "
            f"{kernel_speed}: the kernel verdict stands; check what the step adds (the real gather, pad, overlap)",)


