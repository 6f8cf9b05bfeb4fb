"""The one judgement with bench documents (spx.analysis.judge, issue #35): a step result is summarised once by the real
analysis (spx.analysis.step) against the kernel points, decides whatever the kernel regimes say, is refused when it
belongs to another experiment, is demoted by a serving A/B only with a resolved effect; a stage that stopped early
leaves no verdict; status.judgement holds the words every reader prints.

Step results are synthetic (benchmarks/step_power.synthetic_result: the power simulation's latency model, seeded),
so no verdict depends on a timing of this machine; the kernel points are the real analysis' inputs
(spx_testing.factories.point_result)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from spx.analysis import judge, local_status
from spx.analysis.bench_docs import RunIdentity
from spx.analysis.judge import BENCHES_PENDING, stop
from spx.api.result import KernelResult, PointResult
from spx.api.serving import ServingStatus
from spx.api.spec import ExperimentSpec, spec_hash
from spx.api.step import StepResult, StepSpec
from spx_testing.factories import point_result

ROOT = Path(__file__).resolve().parents[2]
_mod = importlib.util.spec_from_file_location("step_power", ROOT / "benchmarks" / "step_power.py")
assert _mod is not None and _mod.loader is not None
power = importlib.util.module_from_spec(_mod)
sys.modules["step_power"] = power
_mod.loader.exec_module(power)

SPEC = ExperimentSpec.model_validate({"sweep": {"tokens": [256, 1024, 2048, 4096, 8192]}})
LOSE = ([98, 99, 100, 101, 102], [118, 119, 120, 121, 122])  # split 1.2× slower, decided
WIN = ([148, 149, 150, 151, 152], [98, 99, 100, 101, 102])  # split 1.5× faster, decided
LENGTHS = [1024, 1025, 2048, 2049, 4096, 4097, 8191, 8192]


def kernel(win: bool) -> KernelResult:
    """Both regimes agree (no host samples: one regime): the split wins (``win``) or loses from 2048 on."""
    at = WIN if win else LOSE
    pts: list[PointResult] = [point_result(256, *LOSE), point_result(1024, *LOSE),
                              *(point_result(t, *at) for t in (2048, 4096, 8192))]
    return KernelResult(spec=SPEC, world_size=8, gemm_backend="torch-fp8", gather_backend="nccl",
                        gather_source="measured", timer="cupti", device="cuda", cuda_graphs=True, points=pts,
                        complete=True)


def step(effect_ms: float, *, experiment: str = "local", seed: int = 3) -> StepResult:
    """40 rounds of the one-server step A/B with the split's true effect ``effect_ms`` per step (noise 0.3 ms)."""
    st = StepSpec(rounds=40, min_rounds=40, look_every=40, seed=seed, pad_free=False)
    r = power.synthetic_result(power.Scenario("t", effect_ms, noise_ms=0.3), seed, rounds=40, spec=st, lengths=LENGTHS)
    return r.model_copy(update={"experiment": experiment})


@pytest.mark.parametrize(("kernel_wins", "effect", "verdict", "by"), [
    pytest.param(True, +1.3, "Fail", "step", id="regimes-pass-step-loss"),  # the gate-exit-0 case
    pytest.param(False, -1.3, "Pass", "step", id="regimes-fail-step-gain"),
    pytest.param(True, 0.0, "Inconclusive", "step", id="null-effect"),
])
def test_a_real_step_result_decides_whatever_the_kernel_says(kernel_wins: bool, effect: float, verdict: str,
                                                              by: str) -> None:
    j = judge(kernel(kernel_wins), SPEC, step=step(effect))
    assert j.step is not None and j.step.usable, j.step.unusable_reasons if j.step else None
    assert (j.verdict, j.kernel.decided_by if j.kernel else None) == (verdict, by)
    s = j.summary
    assert s is not None and s.decided_by == by and s.expected_effect is not None
    assert s.bottom_line is not None and "T = 2,048" in s.bottom_line and "2,049" in s.bottom_line
    assert s.recommended_threshold_tokens == j.step.recommended_threshold_tokens
    assert j.kernel is not None and j.kernel.recommended_threshold_tokens == (
        j.step.recommended_threshold_tokens or j.kernel.regimes[0].recommended_threshold_tokens)
    if verdict != "Inconclusive":
        assert s.notes and s.notes[0].startswith("note: the kernel sweep says otherwise")
    status = local_status(j, now="2026-01-01T00:00:00Z")
    assert status.judgement == s and status.verdict == verdict


def test_a_step_result_of_another_experiment_is_refused_with_a_warning() -> None:
    identity = RunIdentity(experiment="quickstart", spec_hash=spec_hash(SPEC))
    j = judge(kernel(True), SPEC, step=step(+1.3, experiment="local"), identity=identity)
    assert (j.verdict, j.kernel.decided_by if j.kernel else None) == ("Pass", "kernel")  # the step decides nothing
    assert j.warnings and "step-result.json: not judged with this run" in j.warnings[0]
    assert "'local'" in j.warnings[0] and j.summary is not None and j.summary.refused == j.warnings
    other_spec = step(+1.3, experiment="quickstart").model_copy(update={"spec_hash": "sha256:0000000000000000"})
    assert judge(kernel(True), SPEC, step=other_spec, identity=identity).verdict == "Pass"


@pytest.mark.parametrize(("serving_passed", "verdict", "by"), [
    (None, "Fail", "step"),  # the serving A/B's noise never demotes (here: never lifts) the step's decision
    (False, "Fail", "step"),
    (True, "Fail", "step"),
])
def test_the_serving_ab_demotes_a_step_decision_only_with_a_resolved_effect(serving_passed: bool | None, verdict: str,
                                                                          by: str) -> None:
    serving = ServingStatus(gate_passed=serving_passed, reasons=["ttft_8k_c1: within the noise"])
    j = judge(kernel(True), SPEC, step=step(+1.3), serving=serving)
    assert (j.verdict, j.summary.decided_by if j.summary else None) == (verdict, by)
    gain = judge(kernel(False), SPEC, step=step(-1.3), serving=serving)
    expected = {None: ("Pass", "step"), False: ("Fail", "serving"), True: ("Pass", "step")}[serving_passed]
    assert (gain.verdict, gain.summary.decided_by if gain.summary else None) == expected


def test_benches_alone_a_step_loss_fails_whatever_the_serving_ab_says() -> None:
    """`spx serving --out NEWDIR` (no kernel result) with a step loss and a passing serving A/B: Fail, not exit 0."""
    serving = ServingStatus(gate_passed=True, reasons=["ttft_8k_c1: ok"])
    j = judge(None, SPEC, step=step(+1.3), serving=serving, benches_only=True)
    assert (j.verdict, j.summary.decided_by if j.summary else None) == ("Fail", "step")
    assert j.summary is not None and j.summary.bottom_line is not None and "2,048" in j.summary.bottom_line


def test_a_stage_that_stopped_early_leaves_no_verdict() -> None:
    j = judge(kernel(True), SPEC, stopped=["the vLLM benches were interrupted (SIGINT)"])
    assert (j.verdict, j.reason, j.measured_verdict) == (None, "BenchmarkFailed", "Pass")
    assert j.reasons[0].startswith("partial run: stopped early (the vLLM benches were interrupted (SIGINT))")
    status = local_status(j, now="2026-01-01T00:00:00Z")
    assert status.phase == "Failed" and status.verdict is None and status.judgement is not None
    assert status.judgement.stopped == ["the vLLM benches were interrupted (SIGINT)"]
    pending = stop(judge(kernel(True), SPEC), [BENCHES_PENDING])  # what spx run --serving writes while they run
    assert pending.verdict is None and pending.summary is not None and pending.summary.stopped == [BENCHES_PENDING]


def test_a_cpu_run_says_cpu_first_in_its_bottom_line() -> None:
    cpu = kernel(True).model_copy(update={"device": "cpu"})
    j = judge(cpu, SPEC)
    assert j.summary is not None and j.summary.cpu and j.summary.bottom_line is not None
    assert j.summary.bottom_line.startswith("CPU smoke run")
    assert not j.summary.cpu_timings_allowed
