"""The step A/B through the operator (issues #28 and #35): the bench pod's ``{"kind": "step"}`` lines and the
termination message's bounded ``step`` section are read and judged ONCE with the kernel points
(:func:`spx.controller.decide.finish.judge_collected` → :func:`spx.analysis.judge.judge`): a usable step decides,
whatever the kernel regimes say; a CPU step without ``allowCpuTimings`` decides nothing and says why first.

Pure: the pod's outputs are written with the real wire module (:mod:`spx.api.wire`) and the decision step is
driven by the scripted API server of ``world``. Step documents are synthetic (benchmarks/step_power.py's latency
model, seeded): no verdict depends on a timing of this machine.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from spx.analysis.judge import judge
from spx.api import wire
from spx.api.loading import validate_spec
from spx.api.result import KernelResult, PointResult
from spx.api.spec import ExperimentSpec, spec_hash
from spx.api.status import Environment
from spx.api.step import StepResult, StepSpec
from spx.controller.decide import decision as dec
from spx.controller.decide.results import collect, read_step_log, read_vllm_log
from spx.controller.manifests.result_configmap import build_result_configmap, read_result_configmap
from spx_testing.specs import CPU_SPEC

from .world import NAME, ApiServer, _point, cond, condition, drive, job, observed, pod, running_status

T = 2048  # the gate threshold of CPU_SPEC
TP = 2
ROOT = Path(__file__).resolve().parents[4]
_mod = importlib.util.spec_from_file_location("step_power", ROOT / "benchmarks" / "step_power.py")
assert _mod is not None and _mod.loader is not None
power = importlib.util.module_from_spec(_mod)
sys.modules["step_power"] = power  # (its dataclasses look their module up)
_mod.loader.exec_module(power)


def spec(*, allow_cpu: bool = False) -> ExperimentSpec:
    """CPU_SPEC with a step A/B (no serving points) and, optionally, CPU timings allowed to decide."""
    body: dict[str, Any] = {**CPU_SPEC, "gate": {"thresholdTokens": T, "allowCpuTimings": allow_cpu},
                            "serving": {"model": "m", "points": [], "step": {"rounds": 40, "warmupRounds": 0}},
                            "timeoutSeconds": 14400}
    return validate_spec(body)


def _eager(p: PointResult, extra_host_us: float = 30.0) -> PointResult:
    """``p`` timed eagerly, the split issuing ``extra_host_us`` later than the replicated GEMM in every round."""
    host = [70.0, 71.0, 72.0, 73.0, 74.0]
    return p.model_copy(update={
        "execution": "eager",
        "replicated": p.replicated.model_copy(update={"host_samples_us": host}),
        "split": p.split.model_copy(update={"host_samples_us": [h + extra_host_us for h in host]})})


def kernel(s: ExperimentSpec) -> KernelResult:
    """GPU-bound the split wins at 2048 (31.528 vs 44.96 µs: Pass); host-bound it issues 30 µs later (Fail)."""
    return KernelResult(experiment=NAME, spec=s, environment=Environment(gpu="cpu", device="cpu"), world_size=TP,
                        gemm_backend="torch-bf16", gather_backend="gloo", gather_source="measured", timer="host",
                        device="cpu", cuda_graphs=False, points=[_eager(_point(m)) for m in (8, 128, 2048)])


def step_result(s: ExperimentSpec, added_ms: float = 2.0, device: str = "cpu") -> StepResult:
    """The step A/B's document: the split's step ``added_ms`` longer than replicated (a loss), 40 rounds."""
    st = StepSpec(rounds=40, min_rounds=40, look_every=40, seed=5, pad_free=False)
    doc = power.synthetic_result(power.Scenario("t", added_ms, noise_ms=0.3), 5, rounds=40, spec=st,
                                 lengths=[1024, 1025, 2048, 2049, 4096, 4097])
    # (max_num_batched_tokens 4097: the curve reaches the deployment's largest batch, nothing is extrapolated)
    return doc.model_copy(update={"experiment": NAME, "spec_hash": spec_hash(s), "device": device,
                                  "max_num_batched_tokens": 4097})


def outputs(s: ExperimentSpec, step: StepResult | None, *, log_step: bool = True) -> tuple[str, str]:
    """(log, termination message) of ``spx run --serving --jsonl``: the kernel's lines, the step lines (a first one
    part-way, the whole document last), and the summary with the pod's step status (judged once, as the pod does)."""
    kr = kernel(s)
    lines = [wire.line("point", p.to_wire()) for p in kr.points] + [wire.line("result", kr.to_wire())]
    status = None
    if step is not None:
        if log_step:
            first = step.model_copy(update={"requests": step.requests[:10], "complete": False})
            lines += [wire.line("step", first.to_wire()), wire.line("step", step.to_wire())]
        status = judge(kr, s, step=step).step
    from spx.analysis import points_from_result

    return "".join(lines), wire.build_summary(kr, points_from_result(kr), step=status)


def decide(s: ExperimentSpec, log: str | None, message: str) -> tuple[Any, list[dec.Plan]]:
    o = observed(spec=s, status=running_status(), jobs=[job(cond("Complete"))],
                 pods=[pod("Succeeded", exit_code=0, message=message)])
    final, decisions = drive(o, ApiServer(log=log, message=message))
    return final.status, decisions


def test_the_last_valid_step_line_wins_and_broken_ones_are_problems() -> None:
    whole = step_result(spec())
    first = whole.model_copy(update={"requests": whole.requests[:10], "complete": False})
    log = "".join([wire.line("step", first.to_wire()), "[spx serving] step A/B: round 1 done\n",
                   wire.line("step", whole.to_wire()),
                   '{"kind":"step","step":{"schemaVersion":"spx.dev/step-res'])  # cut off: the earlier one stands
    found, problems = read_step_log(log)
    assert found == whole and problems == []
    assert read_vllm_log(log) == (None, None, [])  # the serving/accuracy reader is not told of step lines
    _, problems = read_step_log('{"kind": "step", "step": {"requests": 3}}\n')
    assert len(problems) == 1 and 'the {"kind": "step"} line(s): invalid document' in problems[0]
    assert read_step_log(None) == (None, [])
    assert collect(None, log).step_result == whole


@pytest.mark.parametrize(("allow_cpu", "channel", "verdict", "decided_by", "first_reason"), [
    (True, "log", "Fail", "step", "decided by the step A/B: the split lengthens the step"),
    (True, "termination message", "Fail", "step", "decided by the step A/B: the split lengthens the step"),
    (False, "log", "Inconclusive", "none", "the step A/B decides nothing: CPU server"),
    (True, "none", "Inconclusive", "none", "the kernel regimes disagree at and above thresholdTokens 2048"),
], ids=["cpu-allowed-from-the-log", "cpu-allowed-log-lost", "cpu-not-allowed", "no-step-result"])
def test_the_operator_judges_once_and_a_usable_step_decides(
        allow_cpu: bool, channel: str, verdict: str, decided_by: str, first_reason: str) -> None:
    """The kernel regimes disagree at 2048 (GPU-bound Pass, host-bound Fail); the step A/B measured a 2 ms loss.
    It decides (Fail, ``decidedBy: step``) when CPU timings may decide — read from the log or, the log lost, from
    the summary; a CPU step without ``allowCpuTimings`` says why first; no step result is a named problem and the
    verdict names the next step."""
    s = spec(allow_cpu=allow_cpu)
    step = None if channel == "none" else step_result(s)
    log, message = outputs(s, step)
    status, decisions = decide(s, None if channel == "termination message" else log, message)
    assert (status.verdict, status.kernel.decided_by) == (verdict, decided_by)
    assert status.verdict_reasons[0].startswith(first_reason), status.verdict_reasons
    assert [r.speed_verdict for r in status.kernel.regimes] == ["Pass", "Fail"]
    assert condition(status, "Decided")[1] == verdict
    assert status.judgement is not None and status.judgement.decided_by == decided_by
    if step is None:
        assert status.step is None and "spec.serving.step" in (status.judgement.next_step or "")
        problems = next(a for a in decisions[-1].before if isinstance(a, dec.StoreResult)).manifest["data"]["problems.txt"]
        assert "the step A/B left no result" in problems
        return
    assert status.step is not None and status.step.cpu_timings
    assert [e.outcome for e in status.step.expectations if e.threshold_tokens == T and e.arm == "split"] == ["loss"]
    stores = [a for d in decisions for a in d.before if isinstance(a, dec.StoreResult)]
    stored = read_result_configmap(stores[-1].manifest, "step-result.json")
    if channel == "log":  # every request kept in the result ConfigMap
        assert StepResult.model_validate(stored) == step
    else:
        assert stored is None


def test_the_configmap_keeps_the_step_document() -> None:
    doc = step_result(spec()).to_wire()
    cm = build_result_configmap(NAME, "ml", "uid-1", 1, step_result=doc)
    assert read_result_configmap(cm, "step-result.json") == doc


# The serving A/B of a CPU run, judged by the operator as spx run and spx serving judge it --------------------


def _serving_result(s: ExperimentSpec) -> Any:
    """Two servers per variant (a noise estimate), the split 10 % faster at a TTFT point whose batches engage
    the split (8192-token prompts, threshold 2048), measured on CPU (``device: cpu``)."""
    from spx.api.serving import ServingArmRun, ServingPointRun, ServingResult

    assert s.serving is not None
    arms = [ServingArmRun(name=n, variant=v, threshold="off" if v == "main" else str(T), state="Succeeded",
                          points=[ServingPointRun(point="ttft_8k_c1", metric="ttft", value=ms)])
            for n, v, ms in (("B1", "split", 90.0), ("A1", "main", 100.0), ("A2", "main", 100.5), ("B2", "split", 90.4))]
    return ServingResult(experiment=NAME, serving=s.serving, gate_threshold_tokens=T, arms=arms, complete=True,
                         device="cpu")


@pytest.mark.parametrize(("allow_cpu", "gate_passed"), [(False, None), (True, True)])
def test_the_operator_judges_a_cpu_serving_ab_with_the_gates_cpu_policy(allow_cpu: bool, gate_passed: bool | None) -> None:
    """A CPU serving A/B decides nothing unless ``gate.allowCpuTimings``: the operator summarises it with the
    spec's policy, as ``spx run --serving`` and ``spx serving`` do (it ignored the policy: always undecided)."""
    body = spec(allow_cpu=allow_cpu).to_wire()
    body["serving"] = {**body["serving"], "points": [{"name": "ttft_8k_c1", "inputLen": 8192, "outputLen": 1,
                                                      "concurrency": 1, "numPrompts": 8, "metric": "ttft"}]}
    body["serving"].pop("step")
    s = validate_spec(body)
    kr = kernel(s)
    from spx.analysis import points_from_result

    log = "".join([wire.line("point", p.to_wire()) for p in kr.points] + [wire.line("result", kr.to_wire()),
                                                                          wire.line("serving", _serving_result(s).to_wire())])
    status, _ = decide(s, log, wire.build_summary(kr, points_from_result(kr)))
    assert status.serving is not None and status.serving.gate_passed is gate_passed, status.serving.reasons
