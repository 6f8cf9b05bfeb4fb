"""The step A/B through the operator (issue #28, requirement 2): the bench pod's ``{"kind": "step"}`` lines and
the termination message's bounded ``step`` section are read, summarised with the kernel's Δg/Δh, written to
``status.step`` and handed to the judgement, which lets the step decide where the kernel regimes disagree.

Pure: the pod's outputs are written with the real wire module (:mod:`spx.api.wire`) and the decision step is
driven by the scripted API server of ``world``.
"""

from __future__ import annotations

from typing import Any

import pytest

from spx.analysis.judge import judge
from spx.analysis.step import kernel_deltas
from spx.analysis.step import summarize as summarize_step
from spx.api import wire
from spx.api.loading import validate_spec
from spx.api.result import SUMMARY_MAX_BYTES, KernelResult, PointResult, ResultSummary
from spx.api.spec import ExperimentSpec
from spx.api.status import Environment
from spx.api.step import StepEffect, StepRequest, StepResult, StepServerRun, StepSpec, StepStatus
from spx.controller.decide import decision as dec
from spx.controller.decide.results import collect, read_step_log, read_vllm_log, step_status
from spx.controller.manifests.result_configmap import build_result_configmap, read_result_configmap
from spx_testing.specs import CPU_SPEC

from .world import NAME, ApiServer, _point, cond, condition, drive, job, observed, pod, running_status

T = 2048  # the gate threshold of CPU_SPEC
TP = 2


def spec(*, allow_cpu: bool = False) -> ExperimentSpec:
    """CPU_SPEC with a step A/B (no serving points) and, optionally, CPU timings allowed to decide."""
    body: dict[str, Any] = {**CPU_SPEC, "gate": {"thresholdTokens": T, "allowCpuTimings": allow_cpu},
                            "serving": {"model": "m", "points": [], "step": {"rounds": 10, "warmupRounds": 0}},
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


def _server(name: str, role: str, threshold: str, added_ms: float, rounds: int = 10) -> StepServerRun:
    """A server whose requests at T and T + 1 take ``added_ms`` more than its base's (plus their tokens' own
    0.5 / 0.6 ms); a per-round drift moves every length of a round alike."""
    reqs = []
    for r in range(rounds):
        drift = (r * 7) % 5 * 0.3
        for order, (role_, n, extra) in enumerate((("base", T - TP, 0.0), ("split", T, 0.5 + added_ms),
                                                   ("pad", T + 1, 0.6 + added_ms))):
            reqs.append(StepRequest(threshold_tokens=T, round=r, order=order, role=role_, length=n,  # type: ignore[arg-type]
                                    prompt_tokens=n, latency_ms=30.0 + drift + extra))
    return StepServerRun(name=name, role=role, threshold=threshold,  # type: ignore[arg-type]
                         threshold_tokens=None if role == "control" else T, requests=reqs)


def step_result(added_ms: float = 2.0, device: str = "cpu") -> StepResult:
    """The step A/B's document: the treated server's step is ``added_ms`` longer at T and T + 1 (a loss)."""
    return StepResult(experiment=NAME, step=StepSpec(rounds=10, warmup_rounds=0), tensor_parallel_size=TP,
                      thresholds=[T], device=device, complete=True,
                      servers=[_server("control", "control", "off", 0.0), _server(f"treated-T{T}", "treated", str(T),
                                                                                     added_ms)])


def outputs(s: ExperimentSpec, step: StepResult | None, *, log_step: bool = True) -> tuple[str, str]:
    """(log, termination message) of ``spx run --serving --jsonl``: the kernel's lines, the step lines (a first
    one after the control server, the whole document last), and the summary with the pod's step status."""
    kr = kernel(s)
    lines = [wire.line("point", p.to_wire()) for p in kr.points] + [wire.line("result", kr.to_wire())]
    status = None
    if step is not None:
        if log_step:
            first = step.model_copy(update={"servers": step.servers[:1], "complete": False})
            lines += [wire.line("step", first.to_wire()), wire.line("step", step.to_wire())]
        status = summarize_step(step, kernel_deltas(judge(kr, s).kernel))
    from spx.analysis import points_from_result

    return "".join(lines), wire.build_summary(kr, points_from_result(kr), step=status)


def decide(s: ExperimentSpec, log: str | None, message: str) -> tuple[Any, list[dec.Plan]]:
    o = observed(spec=s, status=running_status(), jobs=[job(cond("Complete"))],
                 pods=[pod("Succeeded", exit_code=0, message=message)])
    final, decisions = drive(o, ApiServer(log=log, message=message))
    return final.status, decisions


# Reading the pod's step lines ------------------------------------------------------------------------------


def test_the_last_valid_step_line_wins_and_broken_ones_are_problems() -> None:
    whole = step_result()
    first = whole.model_copy(update={"servers": whole.servers[:1], "complete": False})
    log = "".join([wire.line("step", first.to_wire()), "[spx serving] step A/B: control done\n",
                   wire.line("step", whole.to_wire()),
                   '{"kind":"step","step":{"schemaVersion":"spx.dev/step-res'])  # cut off: the earlier one stands
    found, problems = read_step_log(log)
    assert found == whole and problems == []
    assert read_vllm_log(log) == (None, None, [])  # the serving/accuracy reader is not told of step lines
    _, problems = read_step_log('{"kind": "step", "step": {"servers": 3}}\n')
    assert len(problems) == 1 and 'the {"kind": "step"} line(s): invalid document' in problems[0]
    assert read_step_log(None) == (None, [])
    assert collect(None, log).step_result == whole


def test_status_step_is_the_operators_summary_of_the_log_else_the_pods() -> None:
    """From the log: summarised with the kernel's Δg/Δh at each length (the regime is judged against them);
    with the log lost: the pod's bounded section from the termination message."""
    s = spec()
    log, message = outputs(s, step_result())
    collected = collect(message, log)
    kernel_status = judge(kernel(s), s).kernel
    own = step_status(collected, kernel_status, summarize_step, kernel_deltas)
    assert own is not None and [(e.role, e.outcome) for e in own.effects] == [("split", "loss"), ("pad", "loss")]
    split = own.effects[0]
    assert split.effect_ms == pytest.approx(2.0) and split.per_layer_us == pytest.approx(50.0)
    assert split.kernel_gpu_us == pytest.approx(31.528 - 44.96) and split.kernel_host_us == pytest.approx(30.0)
    fallback = step_status(collect(message, None), kernel_status, summarize_step, kernel_deltas)
    assert fallback is not None and fallback.effects[0].effect_ms == pytest.approx(2.0)
    assert step_status(collect(None, None), kernel_status, summarize_step, kernel_deltas) is None


# The decision ----------------------------------------------------------------------------------------------

LOSS_AT_T = "decided by the step A/B: the split lengthens the step beyond its interval: +2.000 ms"


@pytest.mark.parametrize(("allow_cpu", "channel", "verdict", "decided_by", "first_reason"), [
    (True, "log", "Fail", "step", LOSS_AT_T),
    (True, "termination message", "Fail", "step", LOSS_AT_T),
    (False, "log", "Inconclusive", "none", "the kernel regimes disagree at and above thresholdTokens 2048"),
    (True, "none", "Inconclusive", "none", "the kernel regimes disagree at and above thresholdTokens 2048"),
], ids=["cpu-allowed-from-the-log", "cpu-allowed-log-lost", "cpu-not-allowed", "no-step-result"])
def test_the_step_decides_a_cluster_run_where_the_kernel_regimes_disagree(
        allow_cpu: bool, channel: str, verdict: str, decided_by: str, first_reason: str) -> None:
    """The kernel regimes disagree at 2048 (GPU-bound Pass, host-bound Fail); the step A/B measured a 2 ms loss
    at T and T + 1. It decides (Fail, ``decidedBy: step``) when CPU timings may decide — read from the log or,
    the log lost, from the summary; a CPU step without ``allowCpuTimings`` says why it did not decide; no step
    result is a named problem and the verdict names the next step."""
    s = spec(allow_cpu=allow_cpu)
    step = None if channel == "none" else step_result()
    log, message = outputs(s, step)
    status, decisions = decide(s, None if channel == "termination message" else log, message)
    assert (status.verdict, status.kernel.decided_by) == (verdict, decided_by)
    assert status.verdict_reasons[0].startswith(first_reason), status.verdict_reasons
    assert [r.speed_verdict for r in status.kernel.regimes] == ["Pass", "Fail"]
    assert condition(status, "Decided")[1] == verdict
    if step is None:
        assert status.step is None and "spec.serving.step" in (status.kernel.next_step or "")
        problems = next(a for a in decisions[-1].before if isinstance(a, dec.StoreResult)).manifest["data"]["problems.txt"]
        assert "the step A/B left no result" in problems
        return
    assert status.step is not None and [(e.threshold_tokens, e.role, e.outcome) for e in status.step.effects] == [
        (T, "split", "loss"), (T, "pad", "loss")]
    assert status.step.cpu_timings and status.step.effects[0].kernel_host_us == pytest.approx(30.0)
    if not allow_cpu:
        assert any("the step A/B ran on CPU" in r for r in status.verdict_reasons)
        assert "spec.serving.step" in (status.kernel.next_step or "")
    stores = [a for d in decisions for a in d.before if isinstance(a, dec.StoreResult)]
    stored = read_result_configmap(stores[-1].manifest, "step-result.json")
    if channel == "log":  # every request kept in the result ConfigMap
        assert StepResult.model_validate(stored) == step
    else:
        assert stored is None


# Bounds: the termination message and status.step -----------------------------------------------------------


def _effect(t: int, role: str, low: float = 0.4, high: float = 1.6) -> StepEffect:
    return StepEffect(threshold_tokens=t, role=role, length=t + (role == "pad"), base_length=t - 8,  # type: ignore[arg-type]
                      rounds=40, control_rounds=40, effect_ms=(low + high) / 2 + 1e-9, effect_low_ms=low,
                      effect_high_ms=high, layers=40, per_layer_us=(low + high) * 12.5 + 1 / 3,
                      per_layer_low_us=low * 25 + 1 / 7, per_layer_high_us=high * 25 + 1 / 9, kernel_gpu_us=-20.123456789,
                      kernel_host_us=41.987654321, server=f"treated-T{t}", regime="host-bound", outcome="loss")


def big_step() -> StepStatus:
    """Eight thresholds besides the gate's, both lengths each, a positive control and hundreds of refused rounds:
    a status.step of tens of KiB."""
    thresholds = [T, 1024, 1536, 3072, 4096, 6144, 8192, 12288, 16384]
    effects = [_effect(t, role) for t in thresholds for role in ("split", "pad")]
    positives = [_effect(T, "split", -0.1, 0.2).model_copy(update={"outcome": "indifferent", "server": "pc"}),
                 _effect(T, "pad", 3.0, 4.0).model_copy(update={"server": "pc"})]
    failures = [f"treated-T{t} T={t} round {r} split ({t} tokens): request failed: {'x' * 150}"
                for t in thresholds for r in range(40)]
    return StepStatus(effects=effects, positive_controls=positives, failures=failures, complete=False,
                      reasons=[f"the split at T={e.threshold_tokens}: {'y' * 250}" for e in effects])


def test_status_step_fits_its_budget_dropping_detail_in_the_declared_order() -> None:
    step = big_step()
    assert len(wire.dumps(step.to_wire()).encode()) > 4 * wire.STEP_STATUS_MAX_BYTES
    levels = wire.step_levels(step, T)
    sizes = [len(wire.dumps(level.to_wire()).encode()) for level in levels]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)  # each level smaller
    fitted = wire.fit_step(step, threshold_tokens=T)
    assert len(wire.dumps(fitted.to_wire()).encode()) <= wire.STEP_STATUS_MAX_BYTES
    # what decides survives every level: the gate threshold's effects (outcome, interval sign), cpuTimings, complete
    for level in levels:
        at_t = [e for e in level.effects if e.threshold_tokens == T]
        assert [(e.role, e.outcome) for e in at_t] == [("split", "loss"), ("pad", "loss")]
        assert all(e.effect_low_ms > 0 for e in at_t) and level.complete is False
    smallest = levels[-1]
    assert {e.threshold_tokens for e in smallest.effects} == {T} and smallest.positive_controls == []
    assert smallest.failures == [f"{len(step.failures)} failure(s); the first: {step.failures[0][:119]}…"]
    assert smallest.reasons[0].startswith(f"shortened to fit ({len(step.reasons)} reason(s); 1 positive-control "
                                          f"effect(s) at T; 16 effect(s) at thresholds other than the gate's {T}")
    # a small status.step is kept whole (figures to 6 significant digits)
    small = StepStatus(effects=[_effect(T, "split")], complete=True, reasons=["ok"])
    assert wire.fit_step(small, threshold_tokens=T).effects[0].kernel_host_us == 41.9877


def test_the_termination_message_keeps_the_gate_thresholds_step_effects_within_4096_bytes() -> None:
    s = spec()
    kr = kernel(s)
    from spx.analysis import points_from_result

    text = wire.build_summary(kr, points_from_result(kr), step=big_step())
    assert len(text.encode()) <= SUMMARY_MAX_BYTES
    summary = ResultSummary.model_validate_json(text)
    assert summary.step is not None and [e.threshold_tokens for e in summary.step.effects] == [T, T]
    assert [p.tokens for p in summary.points] == [8, 128, 2048]  # every kernel point kept
    small = StepStatus(effects=[_effect(T, "split")], complete=True)
    whole = ResultSummary.model_validate_json(wire.build_summary(kr, points_from_result(kr), step=small)).step
    assert whole is not None and whole.effects[0].outcome == "loss" and whole.complete


def test_the_configmap_keeps_the_step_document() -> None:
    doc = step_result().to_wire()
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
