"""Which measurement decides: both kernel regimes, the step A/B, the deployment (spx.analysis.decide)."""

from __future__ import annotations

import pytest

from spx.analysis.decide import Decision, decide, max_num_batched_tokens, step_decision
from spx.analysis.summary import evaluate
from spx.analysis.verdict import GateOutcome
from spx.api import ExperimentSpec, GateSpec
from spx.api.status import KernelPoint
from spx.api.step import StepEffect, StepStatus

OK, NO, MAYBE = "Pass", "Fail", "Inconclusive"


def outcome(speed: str, verdict: str | None = None, *, wrong: bool = False) -> GateOutcome:
    return GateOutcome(verdict or speed, (f"{speed} reason",), speed, wrong)  # type: ignore[arg-type]


def effect(threshold: int, low: float, high: float, role: str = "split", layers: int = 40) -> StepEffect:
    mid = (low + high) / 2
    return StepEffect(threshold_tokens=threshold, role=role, length=threshold + (role == "pad"),  # type: ignore[arg-type]
                      base_length=threshold - 8, rounds=40, effect_ms=mid, effect_low_ms=low, effect_high_ms=high,
                      layers=layers, per_layer_us=mid * 1000 / layers, per_layer_low_us=low * 1000 / layers,
                      per_layer_high_us=high * 1000 / layers)


def step(*effects: StepEffect, cpu: bool = False) -> StepStatus:
    return StepStatus(effects=list(effects), complete=True, cpu_timings=cpu)


GATE = GateSpec()
GAIN = step(effect(2048, -2.4, -1.2), effect(2048, -2.0, -0.9, "pad"))
LOSS = step(effect(2048, -2.4, -1.2), effect(2048, 0.3, 1.1, "pad"))  # the pad path costs
NOISE = step(effect(2048, -2.4, -1.2), effect(2048, -0.4, 0.5, "pad"))


@pytest.mark.parametrize(
    ("gpu", "host", "step_", "verdict", "by"),
    [
        (outcome(NO, wrong=True), outcome(OK), GAIN, "Fail", "correctness"),  # no step lifts a wrong output
        (outcome(OK), None, None, "Pass", "kernel"),  # one regime (graph points or no host times)
        (outcome(MAYBE), None, GAIN, "Inconclusive", "none"),
        (outcome(OK), outcome(OK), None, "Pass", "kernel"),  # the regimes agree
        (outcome(NO), outcome(NO), GAIN, "Fail", "kernel"),  # agreeing regimes are not overruled
        (outcome(OK, MAYBE), outcome(OK, MAYBE), None, "Inconclusive", "none"),  # agree, capped (modelled gather)
        (outcome(OK), outcome(NO), None, "Inconclusive", "none"),  # disagree, no step: the next step is named
        (outcome(OK), outcome(NO), GAIN, "Pass", "step"),
        (outcome(OK), outcome(NO), LOSS, "Fail", "step"),
        (outcome(OK), outcome(NO), NOISE, "Inconclusive", "step"),
        (outcome(OK, MAYBE), outcome(NO, MAYBE), GAIN, "Pass", "step"),  # a step has the real gather: no cap
        (outcome(OK), outcome(MAYBE), GAIN, "Pass", "step"),  # an unresolved regime disagrees too
        (outcome(OK), outcome(NO), step(effect(4096, -3, -1)), "Inconclusive", "none"),  # not at the gate's T
        (outcome(OK), outcome(NO), step(*GAIN.effects, cpu=True), "Inconclusive", "none"),  # CPU never decides
    ],
)
def test_decide(gpu: GateOutcome, host: GateOutcome | None, step_: StepStatus | None, verdict: str, by: str) -> None:
    d = decide(gpu, host, GATE, step=step_)
    assert (d.verdict, d.decided_by) == (verdict, by)
    if by == "step":
        assert d.reasons[0].startswith("decided by the step A/B") and d.regimes_agree is False
    if by == "none" and host is not None and gpu.speed_verdict != host.speed_verdict:
        assert d.next_step is not None and "spec.serving.step" in d.next_step and "spx serving" in d.next_step
        assert "the kernel regimes disagree" in d.reasons[0]


def test_a_cpu_step_decides_when_cpu_timings_are_allowed() -> None:
    cpu = step(*GAIN.effects, cpu=True)
    assert step_decision(cpu, GATE)[0] is None
    assert step_decision(cpu, GateSpec(allowCpuTimings=True))[0] == "Pass"


def test_a_pass_above_the_largest_batch_is_refused_as_vacuous() -> None:
    gate = GateSpec(thresholdTokens=16384)
    d = decide(outcome(OK), outcome(OK), gate, max_batched_tokens=8192)
    assert (d.verdict, d.decided_by) == ("Fail", "deployment")
    assert "above the largest batch the deployment forms (max_num_batched_tokens 8192)" in d.reasons[0]
    assert "vacuous" in d.reasons[0]
    assert decide(outcome(OK), outcome(OK), gate, max_batched_tokens=16384).verdict == "Pass"  # at it: engages
    assert decide(outcome(NO), outcome(NO), gate, max_batched_tokens=8192) == Decision(
        "Fail", "kernel", ("decided by the kernel sweep: both regimes agree: Fail (GPU-bound (Δg): Fail; host-bound "
                           "(Δh): Fail)", "Fail reason"), True)  # (the host's reason is the GPU's: said once)


def test_a_step_that_contradicts_agreeing_regimes_is_noted_not_obeyed() -> None:
    d = decide(outcome(NO), outcome(NO), GATE, step=GAIN)
    assert (d.verdict, d.decided_by) == ("Fail", "kernel")
    assert any(r.startswith("note: the step A/B on the deployment says Pass") for r in d.reasons)
    assert not any(r.startswith("note:") for r in decide(outcome(OK), outcome(OK), GATE, step=GAIN).reasons)


def _serving(*extra: str) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"timeoutSeconds": 14400,
                                          "serving": {"model": "m", "extraArgs": list(extra)}})


def test_max_num_batched_tokens_from_the_gate_then_extra_args_then_vllm_default() -> None:
    assert max_num_batched_tokens(ExperimentSpec()) == 8192  # vllm/engine/arg_utils.py get_batch_defaults
    spec = ExperimentSpec.model_validate({"gate": {"maxNumBatchedTokens": 4096}})
    assert max_num_batched_tokens(spec) == 4096
    assert max_num_batched_tokens(_serving("--enforce-eager")) == 8192
    assert max_num_batched_tokens(_serving("--max-num-batched-tokens", "16384")) == 16384
    assert max_num_batched_tokens(_serving("--max-num-batched-tokens=2048")) == 2048
    with pytest.raises(ValueError, match="needs a positive integer, got 'lots'"):
        max_num_batched_tokens(_serving("--max-num-batched-tokens", "lots"))


# --- evaluate: both regimes from points with Δg and Δh -------------------------------------------------------


def two_regimes(tokens: list[int], host_wins_from: int) -> list[KernelPoint]:
    """The GPU regime wins from 1024 tokens on (split 20 % shorter); the host regime loses (Δh = +30 µs) below
    ``host_wins_from`` and wins (Δh = −10 µs) from it on; all points eager with 95 % intervals."""
    pts = []
    for t in tokens:
        rep, split = (100.0, 80.0) if t >= 1024 else (80.0, 100.0)
        dh = 30.0 if t < host_wins_from else -10.0
        pts.append(KernelPoint(
            tokens=t, rows_per_rank=-(-t // 8), replicated_us=rep, split_us=split, speedup=rep / split,
            speedup_low=rep / split * 0.98, speedup_high=rep / split * 1.02, max_abs_error=0.001, execution="eager",
            gpu_delta_us=split - rep, gpu_delta_low_us=split - rep - 1, gpu_delta_high_us=split - rep + 1,
            replicated_host_us=70.0, split_host_us=70.0 + dh, host_delta_us=dh, host_delta_low_us=dh - 4,
            host_delta_high_us=dh + 4))
    return pts


def test_disagreeing_regimes_without_a_step_are_inconclusive_and_name_the_next_step() -> None:
    pts = two_regimes([512, 1024, 2048, 4096, 8192], host_wins_from=8192)
    ev = evaluate(pts, GATE, "measured", 8, device="cuda")
    gpu, host = ev.kernel.regimes
    assert (gpu.regime, gpu.speed_verdict, gpu.recommended_threshold_tokens) == ("gpu-bound", "Pass", 1024)
    assert (host.regime, host.speed_verdict, host.recommended_threshold_tokens) == ("host-bound", "Fail", 8192)
    assert ev.verdict == "Inconclusive" and ev.kernel.decided_by == "none" and ev.kernel.regimes_agree is False
    assert ev.kernel.next_step is not None and "spec.serving.step" in ev.kernel.next_step
    assert not any("leaves speedup on the table" in r for r in ev.reasons)  # no advice to move the threshold
    assert not any("take more samples" in r for r in ev.reasons)  # samples cannot settle a regime
    stake = {r.label: r for r in ev.kernel.uncertainty.stake}["gate threshold"]  # type: ignore[union-attr]
    assert stake.saving_us == pytest.approx(20.0) and stake.host_saving_us == pytest.approx(-30.0)
    assert stake.host_saving_ms_per_chunk == pytest.approx(-1.2) and stake.host_saving_low_us == pytest.approx(-34.0)
    with_step = evaluate(pts, GATE, "measured", 8, device="cuda", step=GAIN)
    assert (with_step.verdict, with_step.kernel.decided_by) == ("Pass", "step")


@pytest.mark.parametrize("rule", ["break-even", "lower-bound"])
@pytest.mark.parametrize("rounding", ["next-power-of-two", "next-multiple-of-tp", "none"])
def test_agreeing_regimes_decide_whatever_their_rounded_thresholds(rule: str, rounding: str) -> None:
    """A gate at 3072 (not a power of two): both regimes win from 3072 on, though their break-evens (and
    so their rounded recommended thresholds) differ; the verdicts are compared, never the thresholds."""
    pts = two_regimes([512, 1024, 2048, 3072, 3073, 6145, 8192], host_wins_from=3072)
    gate = GateSpec(thresholdTokens=3072, thresholdRule=rule, thresholdRounding=rounding)  # type: ignore[arg-type]
    ev = evaluate(pts, gate, "measured", 8, device="cuda", max_batched_tokens=8192)
    gpu, host = ev.kernel.regimes
    assert gpu.recommended_threshold_tokens != host.recommended_threshold_tokens
    assert (ev.verdict, ev.kernel.decided_by, ev.kernel.regimes_agree) == ("Pass", "kernel", True)
    if rule == "lower-bound":  # the host regime's interval wins from 3072 on: 3072 rounded
        assert host.recommended_threshold_tokens == (4096 if rounding == "next-power-of-two" else 3072)


def test_off_alignment_points_are_gated() -> None:
    """T + 1 (the pad copy) costs: the gate checks it like any count at or above T."""
    pts = two_regimes([1024, 2048, 2049, 4097, 8192], host_wins_from=1024)
    pad = pts[2].model_copy(update={"replicated_us": 100.0, "split_us": 110.0, "speedup": 100 / 110,
                                    "speedup_low": 0.89, "speedup_high": 0.93, "added_because": "off-alignment"})
    ev = evaluate([*pts[:2], pad, *pts[3:]], GATE, "measured", 8, device="cuda")
    assert ev.kernel.regimes[0].speed_verdict == "Fail"
    assert any("at 2049 tokens the speedup is 0.91×" in r for r in ev.kernel.regimes[0].reasons)


def test_agreeing_capped_regimes_say_so_and_repeat_no_reason() -> None:
    """Both regimes fail on speed on a CPU run (capped to Inconclusive): the head says the speeds agree and the
    verdict is capped, not "decided by the kernel"; a host-bound reason equal to a GPU-bound one is said once."""
    gpu = GateOutcome("Inconclusive", ("CPU smoke run: capped", "slow at 2048"), "Fail")  # (the cap's reason first)
    host = GateOutcome("Inconclusive", ("CPU smoke run: capped", "slow at 2048 (host)"), "Fail")
    d = decide(gpu, host, GATE)
    assert (d.verdict, d.decided_by) == ("Inconclusive", "none")
    # (the cap's own reason says "reported as Inconclusive": the head does not say it again, issue 37)
    assert d.reasons[0] == ("both regimes agree on the speeds (GPU-bound (Δg): Fail; host-bound (Δh): Fail): "
                            "CPU smoke run: capped")
    assert d.reasons[1:] == ("slow at 2048", "host-bound: slow at 2048 (host)")
    unresolved = decide(outcome(MAYBE), outcome(MAYBE), GATE)
    assert unresolved.reasons[0].startswith("neither regime decides the speed") and unresolved.decided_by == "none"


def test_the_stake_has_both_regimes_at_the_gate_threshold_and_at_vllms_2048() -> None:
    pts = two_regimes([512, 1024, 2048, 3072, 4096, 8192], host_wins_from=8192)
    ev = evaluate(pts, GateSpec(thresholdTokens=3072), "measured", 8, device="cuda")
    rows = {r.label: r for r in ev.kernel.uncertainty.stake}  # type: ignore[union-attr]
    assert {"gate threshold", "vLLM default"} <= set(rows)
    for label in ("gate threshold", "vLLM default"):
        row = rows[label]
        assert row.saving_ms_per_chunk == pytest.approx(20.0 * 40 / 1000)  # −Δg × 40 layers
        assert row.host_saving_ms_per_chunk == pytest.approx(-30.0 * 40 / 1000)  # −Δh × 40 layers
        assert row.host_saving_low_us == pytest.approx(-34.0) and row.host_saving_high_us == pytest.approx(-26.0)


def test_a_step_whose_positive_control_was_missed_decides_nothing() -> None:
    """A positive control (one extra prefill step at T + 1, StepSpec.positiveControl) that ran and came out
    indifferent shows the design could not see an effect it must see: its gains and losses decide nothing."""
    detected = StepStatus(effects=GAIN.effects, positive_controls=[effect(2048, 0.8, 2.1, "pad")], complete=True)
    missed = StepStatus(effects=GAIN.effects, positive_controls=[effect(2048, -0.4, 1.9, "pad")], complete=True)
    assert step_decision(detected, GATE)[0] == "Pass"
    verdict, why, nxt = step_decision(missed, GATE)
    assert verdict is None and "positive control" in why and "not detected" in why and nxt is not None
    d = decide(outcome(OK), outcome(NO), GATE, step=missed)
    assert (d.verdict, d.decided_by) == ("Inconclusive", "none")
