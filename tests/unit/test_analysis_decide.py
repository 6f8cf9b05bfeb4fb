"""Which measurement decides (spx.analysis.decide): every case of issue #35, as a matrix (kernel states × step states).

Matrix style as kopf's ``tests/causation``: every kernel state (correctness, one regime, both agree on Pass/Fail,
both Inconclusive, both capped by a modelled gather, disagreeing) is crossed with every step state (none, a usable
gain / loss / noise, an unusable one, a CPU one, one without an expectation at the gate threshold). The expected
cell follows from two rules: a usable step decides whatever the kernel says (correctness aside); anything else
leaves the kernel to decide, an unusable step's reason first. The StepStatus objects are synthetic (the step's
own analysis, spx.analysis.step, is tested in tests/unit/test_analysis_step.py).
"""

from __future__ import annotations

import pytest

from spx.analysis.decide import decide, max_num_batched_tokens, step_decision
from spx.analysis.summary import evaluate
from spx.analysis.verdict import GateOutcome
from spx.api import ExperimentSpec, GateSpec
from spx.api.status import KernelPoint
from spx.api.step import StepExpectation, StepPoint, StepStatus

OK, NO, MAYBE = "Pass", "Fail", "Inconclusive"
T = 2048
GATE = GateSpec()


def outcome(speed: str, verdict: str | None = None, *, wrong: bool = False) -> GateOutcome:
    return GateOutcome(verdict or speed, (f"{speed} reason",), speed, wrong)  # type: ignore[arg-type]


def point(length: int, low: float, high: float, arm: str = "split") -> StepPoint:
    mid = (low + high) / 2
    return StepPoint(arm=arm, length=length, aligned=length % 8 == 0, rounds=40, effect_ms=mid,  # type: ignore[arg-type]
                     effect_low_ms=low, effect_high_ms=high, per_layer_us=mid * 25, per_layer_low_us=low * 25,
                     per_layer_high_us=high * 25)


def expectation(low: float, high: float, threshold: int = T) -> StepExpectation:
    mid = (low + high) / 2
    return StepExpectation(threshold_tokens=threshold, arm="split", pad_path_share=0.875, effect_ms=mid,
                           effect_low_ms=low, effect_high_ms=high, per_layer_us=mid * 25, per_layer_low_us=low * 25,
                           per_layer_high_us=high * 25)


def step(low: float, high: float, *, usable: bool = True, why: tuple[str, ...] = (), cpu: bool = False,
         threshold: int = T, recommended: int | None = 4096) -> StepStatus:
    return StepStatus(points=[point(T, low, high), point(T + 1, low, high)], expectations=[expectation(low, high, threshold)],
                      recommended_threshold_tokens=recommended, usable=usable, unusable_reasons=list(why),
                      complete=usable, rounds=40, cpu_timings=cpu)


KERNEL = {  # name: (GPU-bound outcome, host-bound outcome or None, expected verdict and decidedBy without a step)
    "correctness": (outcome(NO, wrong=True), outcome(OK), (NO, "correctness")),
    "one regime Pass": (outcome(OK), None, (OK, "kernel")),
    "one regime Inconclusive": (outcome(MAYBE), None, (MAYBE, "none")),
    "agree Pass": (outcome(OK), outcome(OK), (OK, "kernel")),
    "agree Fail": (outcome(NO), outcome(NO), (NO, "kernel")),
    "both Inconclusive": (outcome(MAYBE), outcome(MAYBE), (MAYBE, "none")),
    "agree, modelled-gather cap": (outcome(OK, MAYBE), outcome(OK, MAYBE), (MAYBE, "none")),
    "disagree": (outcome(OK), outcome(NO), (MAYBE, "none")),
    "disagree, one capped": (outcome(OK, MAYBE), outcome(NO, MAYBE), (MAYBE, "none")),
}
STEP = {  # name: (status or None, the verdict it decides or None)
    "none": (None, None),
    "gain": (step(-1.52, -1.09), OK),
    "loss": (step(1.09, 1.52), NO),  # the issue's +1.30 ms [+1.09, +1.52] at 2048
    "noise": (step(-0.4, 0.5), MAYBE),
    "server died": (step(-1.52, -1.09, usable=False, why=("the server died after 10 of 40 rounds",)), None),
    "switch unconfirmed": (step(-1.52, -1.09, usable=False, why=("thresholdConfirmed false on 3 switches",)), None),
    "positive control failed": (step(-1.52, -1.09, usable=False, why=("the positive control never ran",)), None),
    "another experiment's": (step(1.09, 1.52, usable=False, why=("it belongs to experiment 'local'",)), None),
    "CPU without allowCpuTimings": (step(-1.52, -1.09, cpu=True), None),
    "no expectation at T": (step(-1.52, -1.09, threshold=4096), None),
}


@pytest.mark.parametrize("step_name", list(STEP))
@pytest.mark.parametrize("kernel_name", list(KERNEL))
def test_decision_matrix(kernel_name: str, step_name: str) -> None:
    gpu, host, (k_verdict, k_by) = KERNEL[kernel_name]
    status, s_verdict = STEP[step_name]
    d = decide(gpu, host, GATE, step=status, max_batched_tokens=8192)
    if kernel_name == "correctness":
        assert (d.verdict, d.decided_by) == (NO, "correctness")
    elif s_verdict is not None:  # a usable step decides, whatever the kernel regimes say
        assert (d.verdict, d.decided_by) == (s_verdict, "step")
        assert d.reasons[0].startswith("decided by the step A/B") and "expected effect of splitting from 2,048" in d.reasons[0]
        assert d.recommended_threshold_tokens == 4096  # the step curve's, never a kernel regime's
        assert d.expectation is not None and d.expectation.threshold_tokens == T
        contradicts = {o.speed_verdict for o in (gpu, host) if o is not None} & ({OK, NO} - {s_verdict})
        assert bool(d.notes) == bool(contradicts)  # one line where a kernel regime says otherwise
        assert all(n in d.reasons for n in d.notes)
    else:  # nothing unusable decides: the kernel does, the step's reason first
        assert (d.verdict, d.decided_by) == (k_verdict, k_by)
        if status is not None:
            assert d.reasons[0].startswith("the step A/B decides nothing: ")
        if status is None and host is not None and gpu.speed_verdict != host.speed_verdict:
            assert d.next_step is not None and "spec.serving.step" in d.next_step and "thresholdTokens 2048" in d.next_step


def test_a_cpu_step_decides_only_with_allow_cpu_timings() -> None:
    cpu = STEP["CPU without allowCpuTimings"][0]
    assert step_decision(cpu, GATE).verdict is None
    assert "ran on CPU" in step_decision(cpu, GATE).reasons[0]
    assert step_decision(cpu, GateSpec(allowCpuTimings=True)).verdict == OK


def test_a_pass_above_the_largest_batch_is_refused_as_vacuous() -> None:
    gate = GateSpec(thresholdTokens=16384)
    d = decide(outcome(OK), outcome(OK), gate, max_batched_tokens=8192)
    assert (d.verdict, d.decided_by) == ("Fail", "deployment")
    assert "above the largest batch the deployment forms (max_num_batched_tokens 8192)" in d.reasons[0]
    assert d.next_step is not None and "16384" not in d.next_step and "8,192" in d.next_step  # reachable only
    assert decide(outcome(OK), outcome(OK), gate, max_batched_tokens=16384).verdict == "Pass"  # at it: engages


def test_agreeing_regimes_recommend_the_larger_of_their_thresholds() -> None:
    from spx.api.status import RegimeSummary

    g = RegimeSummary(regime="gpu-bound", recommended_threshold_tokens=256, speed_verdict="Pass", verdict="Pass")
    h = RegimeSummary(regime="host-bound", recommended_threshold_tokens=2048, speed_verdict="Pass", verdict="Pass")
    assert decide(outcome(OK), outcome(OK), GATE, regimes=(g, h)).recommended_threshold_tokens == 2048
    assert decide(outcome(OK), outcome(NO), GATE, regimes=(g, h)).recommended_threshold_tokens is None  # none decided
    # a step Pass at 2048 recommends the step's figure, never the GPU-bound regime's 256
    assert decide(outcome(OK), outcome(OK), GATE, step=STEP["gain"][0], regimes=(g, h)).recommended_threshold_tokens == 4096


def _serving(*extra: str) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"timeoutSeconds": 14400,
                                          "serving": {"model": "m", "extraArgs": list(extra)}})


def test_max_num_batched_tokens_from_the_gate_then_extra_args_then_vllm_default() -> None:
    assert max_num_batched_tokens(ExperimentSpec()) == 8192  # vllm/engine/arg_utils.py get_batch_defaults
    spec = ExperimentSpec.model_validate({"gate": {"maxNumBatchedTokens": 4096}})
    assert max_num_batched_tokens(spec) == 4096
    assert max_num_batched_tokens(_serving("--enforce-eager")) == 8192
    assert max_num_batched_tokens(_serving("--max-num-batched-tokens", "16384")) == 16384
    assert max_num_batched_tokens(_serving("--max-num-batched-tokens=4096")) == 4096
    assert max_num_batched_tokens(_serving("--max_num_batched_tokens", "4096")) == 4096  # as vLLM's parser reads it
    assert max_num_batched_tokens(_serving("--max_num_batched_tokens=4096")) == 4096


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
    with_step = evaluate(pts, GATE, "measured", 8, device="cuda", step=STEP["gain"][0])
    assert (with_step.verdict, with_step.kernel.decided_by) == ("Pass", "step")
    assert with_step.kernel.recommended_threshold_tokens == 4096  # the step curve's


def test_agreeing_regimes_pass_and_a_step_loss_fails() -> None:
    """The issue's first case end to end through evaluate: both regimes Pass, the step loses → Fail by the step."""
    pts = two_regimes([512, 1024, 2048, 4096, 8192], host_wins_from=1024)
    assert evaluate(pts, GATE, "measured", 8, device="cuda").verdict == "Pass"
    ev = evaluate(pts, GATE, "measured", 8, device="cuda", step=STEP["loss"][0], max_batched_tokens=8192)
    assert (ev.verdict, ev.kernel.decided_by) == ("Fail", "step")
    assert any(r.startswith("note: the kernel sweep says otherwise") for r in ev.reasons)


def test_a_loss_only_above_the_largest_batch_decides_nothing() -> None:
    """A loss at 16384 tokens, a batch a deployment of max_num_batched_tokens 8192 never forms, is not gated."""
    pts = two_regimes([1024, 2048, 4096, 8192, 16384], host_wins_from=1024)
    lossy = pts[-1].model_copy(update={"replicated_us": 100.0, "split_us": 130.0, "speedup": 100 / 130,
                                       "speedup_low": 0.75, "speedup_high": 0.79, "gpu_delta_us": 30.0,
                                       "gpu_delta_low_us": 29.0, "gpu_delta_high_us": 31.0,
                                       "split_host_us": 100.0, "host_delta_us": 30.0, "host_delta_low_us": 26.0,
                                       "host_delta_high_us": 34.0})
    ev = evaluate([*pts[:-1], lossy], GATE, "measured", 8, device="cuda", max_batched_tokens=8192)
    assert ev.verdict == "Pass"
    assert evaluate([*pts[:-1], lossy], GATE, "measured", 8, device="cuda", max_batched_tokens=16384).verdict == "Fail"


def test_off_alignment_points_are_gated() -> None:
    """T + 1 (the pad copy) costs: the gate checks it like any count at or above T."""
    pts = two_regimes([1024, 2048, 2049, 4097, 8192], host_wins_from=1024)
    pad = pts[2].model_copy(update={"replicated_us": 100.0, "split_us": 110.0, "speedup": 100 / 110,
                                    "speedup_low": 0.89, "speedup_high": 0.93, "added_because": "off-alignment"})
    ev = evaluate([*pts[:2], pad, *pts[3:]], GATE, "measured", 8, device="cuda")
    assert ev.kernel.regimes[0].speed_verdict == "Fail"
    assert any("at 2049 tokens the speedup is 0.91×" in r for r in ev.kernel.regimes[0].reasons)


def test_agreeing_capped_regimes_say_so_and_repeat_no_reason() -> None:
    gpu = GateOutcome("Inconclusive", ("CPU smoke run: capped", "slow at 2048"), "Fail")  # (the cap's reason first)
    host = GateOutcome("Inconclusive", ("CPU smoke run: capped", "slow at 2048 (host)"), "Fail")
    d = decide(gpu, host, GATE)
    assert (d.verdict, d.decided_by) == ("Inconclusive", "none")
    # (the cap's own reason says "reported as Inconclusive": the head does not say it again, issue 37)
    assert d.reasons[0] == ("both regimes agree on the speeds (GPU-bound (Δg): Fail; host-bound (Δh): Fail): "
                            "CPU smoke run: capped")
    assert d.reasons[1:] == ("slow at 2048", "host-bound: slow at 2048 (host)")
