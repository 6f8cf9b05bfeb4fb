"""The serving and accuracy sections through the pure parts: the spec rules for serving, the verdict over every gate, the bounded
summary, reading the vLLM benches' JSON lines, the Job and ConfigMap, and the metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from spx.analysis import combine_verdict, points_from_result
from spx.api import SUMMARY_MAX_BYTES, Environment, ExperimentSpec, KernelResult, ResultSummary
from spx.api.accuracy import AccuracyStatus
from spx.api.crd import CEL_RULES, build_crd
from spx.api.serving import ServingArmStatus, ServingArmValue, ServingPointStatus, ServingSpec, ServingStatus
from spx.api.spec import min_timeout_seconds
from spx.api.wire import build_summary
from spx.controller import metrics
from spx.controller.decide.results import collect, read_vllm_log, vllm_statuses
from spx.controller.manifests import job as k8s
from spx.controller.manifests import result_configmap as rcm
from spx_testing import factories

SERVING = {"model": "deepseek-ai/DeepSeek-V4.1"}


# Spec rules ------------------------------------------------------------------------------------------


def test_accuracy_needs_serving() -> None:
    with pytest.raises(ValidationError, match="spec.accuracy: runs GSM8K on the servers of spec.serving"):
        ExperimentSpec.model_validate({"accuracy": {}})
    assert ExperimentSpec.model_validate({"serving": SERVING, "accuracy": {}, "timeoutSeconds": 9600}).accuracy


@pytest.mark.parametrize(
    ("serving", "timeout", "ok"),
    [
        ({}, 3600, False),  # the default timeout is the kernel bench's: 4 arms × 2400 s do not fit
        ({}, 9599, False),
        ({}, 9600, True),
        ({"startupTimeoutSeconds": 600}, 2400, True),
        ({"arms": [{"name": "B", "variant": "split"}, {"name": "A", "variant": "main"}]}, 4800, True),
        ({"arms": [{"name": "B", "variant": "split"}, {"name": "A", "variant": "main"}]}, 4799, False),
        # the step A/B loads the model once, first, and its rounds (budgetSeconds) count too
        ({"startupTimeoutSeconds": 600, "step": {}}, 3000, True),
        ({"startupTimeoutSeconds": 600, "step": {}}, 2999, False),
        ({"startupTimeoutSeconds": 600, "step": {"budgetSeconds": 900}}, 3900, True),
        ({"startupTimeoutSeconds": 600, "step": {"budgetSeconds": 900}}, 3899, False),
        # the step A/B alone (no points, no GSM8K): the arms load nothing, one load + the rounds
        ({"startupTimeoutSeconds": 600, "points": [], "step": {"budgetSeconds": 900}}, 1500, True),
        ({"startupTimeoutSeconds": 600, "points": [], "step": {"budgetSeconds": 900}}, 1499, False),
    ],
)
def test_timeout_covers_every_arms_model_load(serving: dict[str, Any], timeout: int, ok: bool) -> None:
    raw = {"serving": {**SERVING, **serving}, "timeoutSeconds": timeout}
    if ok:
        spec = ExperimentSpec.model_validate(raw)
        assert spec.serving is not None and spec.timeout_seconds >= min_timeout_seconds(spec.serving)
        assert min_timeout_seconds(spec.serving) == timeout
    else:
        with pytest.raises(ValidationError, match=r"too short for spec.serving: .* set timeoutSeconds ≥"):
            ExperimentSpec.model_validate(raw)


def test_the_crd_carries_the_same_rules_as_cel() -> None:
    rules = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"]
    assert rules == CEL_RULES["spec"]
    text = " ".join(r["rule"] for r in rules)
    assert "!has(self.accuracy) || has(self.serving)" in text
    # the CRD carries no defaults, so the rule spells out the models (timeout 3600, 4 arms, 2400 s) and counts
    # the step A/B's one server and its budget as spx.api.spec.min_timeout_seconds does
    assert ": 3600) >= " in text and ": 4)) + " in text and ": 2400)" in text
    assert "(has(self.serving.step) ? 1 : 0)" in text and "self.serving.step.budgetSeconds" in text
    assert "size(self.serving.points) == 0 && !has(self.accuracy)" in text


# The verdict over every gate ----------------------------------------------------------------------------


def serving_status(passed: bool | None) -> ServingStatus:
    change = {True: -5.0, False: 4.0, None: None}[passed]
    reason = ("ttft_8k_c1: no ttft value for one variant; cannot compare" if passed is None
              else f"ttft_8k_c1: ttft change {change:+.2f}% split vs main (≤ +1.00% allowed TTFT regression): "
                   f"{'ok' if passed else 'FAIL'}")
    return ServingStatus(points=[ServingPointStatus(name="ttft_8k_c1", metric="ttft", unit="ms", change_pct=change,
                                                    passed=passed)], gate_passed=passed, reasons=[reason])


def accuracy_status(passed: bool | None) -> AccuracyStatus:
    reason = {True: "GSM8K: split 96.97% vs main 96.59% (drop -0.38 points, ≤ 1.00 allowed): ok",
              False: "GSM8K: split 90.00% vs main 96.59% (drop +6.59 points, ≤ 1.00 allowed): FAIL",
              None: "GSM8K: no finished split run; cannot compare"}[passed]
    return AccuracyStatus(gate_passed=passed, reasons=[reason], max_drop_points=1.0)


@pytest.mark.parametrize(
    ("kernel", "serving", "accuracy", "verdict", "first"),
    [
        ("Pass", "absent", "absent", "Pass", "kernel"),  # no vLLM sections: the kernel's verdict as it is
        ("Inconclusive", "absent", False, "Fail", "accuracy gate failed"),
        ("Pass", True, True, "Pass", "kernel"),
        ("Pass", False, True, "Fail", "serving A/B gate failed: ttft_8k_c1: ttft change +4.00%"),
        ("Pass", True, False, "Fail", "accuracy gate failed: GSM8K: split 90.00%"),
        ("Inconclusive", True, False, "Fail", "accuracy gate failed"),  # a failed gate beats an undecided one
        ("Pass", None, True, "Inconclusive", "serving A/B gate inconclusive: ttft_8k_c1: no ttft value"),
        ("Pass", True, None, "Inconclusive", "accuracy gate inconclusive: GSM8K: no finished split run"),
        ("Fail", True, True, "Fail", "kernel"),
        ("Inconclusive", True, True, "Inconclusive", "kernel"),
    ],
)
def test_serving_and_accuracy_gates_feed_the_verdict(
    kernel: str, serving: bool | None | str, accuracy: bool | None | str, verdict: str, first: str
) -> None:
    s = serving_status(serving) if serving != "absent" else None  # type: ignore[arg-type]
    a = accuracy_status(accuracy) if accuracy != "absent" else None  # type: ignore[arg-type]
    got, reasons = combine_verdict(kernel, ["kernel"], s, a)  # type: ignore[arg-type]
    assert got == verdict
    assert reasons[0].startswith(first), reasons
    assert "kernel" in reasons


# The bounded summary --------------------------------------------------------------------------------------


def kernel_result(tokens: list[int]) -> KernelResult:
    """The shared synthetic TP8 sweep, with a driver and vLLM version in its fingerprint."""
    env = Environment(gpu="NVIDIA H200", gpu_count=8, driver="580.1", vllm="0.33.0", device="cuda")
    return factories.kernel_result(tuple(tokens), environment=env)


def big_serving_status() -> ServingStatus:
    points = [
        ServingPointStatus(
            name=f"point_{i:02d}_isl_131072_osl_1024_c64", metric="output_throughput", unit="tok/s",
            values=[ServingArmValue(arm=f"arm{j}", variant="split" if j % 2 == 0 else "main", value=1234.567 + j)
                    for j in range(8)],
            main_mean=1235.0, split_mean=1240.0, change_pct=0.4, improvement_pct=0.4, passed=True)
        for i in range(16)
    ]
    return ServingStatus(
        arms=[ServingArmStatus(name=f"arm{j}", variant="split" if j % 2 == 0 else "main", threshold="2048",
                               state="Partial", message="x" * 300) for j in range(8)],
        points=points, complete=False, failures=[f"arm{j}/point_{j:02d}: " + "y" * 400 for j in range(20)],
        gate_passed=True, reasons=["r" * 300] * 20,
    )


def test_summary_fits_4_kib_shrinking_serving_detail_before_kernel_points() -> None:
    tokens = [6, 12, 24, 48, 96, 384, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384]
    result = kernel_result(tokens)
    points = points_from_result(result)
    accuracy = AccuracyStatus(main_pct=96.59, split_pct=96.97, drop_points=-0.38, max_drop_points=1.0,
                              gate_passed=True, reasons=["GSM8K: …: ok"])
    text = build_summary(result, points, serving=big_serving_status(), accuracy=accuracy)
    assert len(text.encode()) <= SUMMARY_MAX_BYTES
    summary = ResultSummary.model_validate_json(text)
    assert [p.tokens for p in summary.points] == tokens  # every kernel point kept
    assert summary.serving is not None and summary.serving.gate_passed is True
    assert summary.accuracy is not None and summary.accuracy.gate_passed is True
    assert summary.accuracy.max_drop_points == 1.0
    assert summary.environment.gpu == "NVIDIA H200"
    # a small serving section travels whole
    small = ServingStatus(points=[ServingPointStatus(name="ttft_8k_c1", metric="ttft", unit="ms", change_pct=-5.0,
                                                     passed=True)], gate_passed=True, reasons=["ok"])
    text = build_summary(kernel_result([6, 2048]), points_from_result(kernel_result([6, 2048])), serving=small)
    assert ResultSummary.model_validate_json(text).serving == small


def test_local_status_gets_the_vllm_sections_and_the_combined_verdict() -> None:
    from spx.analysis import judge
    from spx.runner.experiment import build_status

    result = kernel_result([6, 48, 384, 2048, 4096])
    status = build_status(result, judge(result, result.spec))
    assert status.verdict == "Pass"
    combined = build_status(result, judge(result, result.spec, serving=serving_status(True),
                                          accuracy=accuracy_status(False)))
    assert combined.verdict == "Fail" and combined.accuracy is not None and combined.serving is not None
    decided = next(c for c in combined.conditions if c.type == "Decided")
    assert decided.reason == "Fail" and decided.message.startswith("accuracy gate failed")


# Reading the pod's outputs ---------------------------------------------------------------------------------


def _serving_doc(value: float) -> dict[str, Any]:
    serving = ServingSpec.model_validate({**SERVING, "points": [], "arms": [
        {"name": "B1", "variant": "split"}, {"name": "A1", "variant": "main"}]})
    return {"schemaVersion": "spx.dev/serving-result/v1", "experiment": "x", "serving": serving.to_wire(),
            "gateThresholdTokens": 2048, "arms": [{"name": "B1", "variant": "split", "threshold": "2048",
                                                   "points": [{"point": "p", "metric": "ttft", "value": value}]}]}


def test_the_last_valid_serving_line_wins_and_broken_lines_are_problems() -> None:
    first, last = _serving_doc(1.0), _serving_doc(2.0)
    log = "\n".join([
        "spx run: kernel bench output",
        json.dumps({"kind": "serving", "serving": first}, separators=(",", ":")),
        "[spx serving] arm A1 …",
        json.dumps({"kind": "serving", "serving": last}, separators=(",", ":")),
        '{"kind":"serving","serving":{"schemaVersion":"spx.dev/serving-re',  # cut off: the earlier one stands
    ])
    serving, accuracy, problems = read_vllm_log(log)
    assert serving is not None and serving.arms[0].points[0].value == 2.0
    assert accuracy is None and problems == []
    _, _, problems = read_vllm_log('{"kind": "accuracy", "accuracy": {"runs": 3}}\n')
    assert len(problems) == 1 and 'the {"kind": "accuracy"} line(s): invalid document' in problems[0]
    assert read_vllm_log(None) == (None, None, [])


def test_statuses_come_from_the_log_else_from_the_summary() -> None:
    from spx.analysis.accuracy import summarize as summarize_accuracy
    from spx.analysis.serving import summarize as summarize_serving

    summary = ResultSummary(world_size=8, gemm_backend="torch-fp8", gather_source="measured", timer="cupti",
                            serving=ServingStatus(gate_passed=False, reasons=["from the pod"]))
    text = summary.model_dump_json(by_alias=True, exclude_none=True)
    only_summary = collect(text, None)
    serving, accuracy = vllm_statuses(only_summary, summarize_serving, summarize_accuracy)
    assert serving is not None and serving.reasons == ["from the pod"] and accuracy is None
    log = json.dumps({"kind": "serving", "serving": _serving_doc(3.0)}, separators=(",", ":"))
    serving, _ = vllm_statuses(collect(text, log), summarize_serving, summarize_accuracy)
    assert serving is not None and serving.reasons != ["from the pod"]  # the operator's own analysis


# The Job and the ConfigMap ---------------------------------------------------------------------------------


def _job(spec: ExperimentSpec) -> dict[str, Any]:
    return k8s.build_job("ab", "ml", "uid-1", 1, spec, "registry.example/spx-bench:1")


def test_the_job_runs_the_vllm_benches_after_the_kernel_and_mounts_the_weights() -> None:
    plain = _job(ExperimentSpec())
    assert "--serving" not in plain["spec"]["template"]["spec"]["containers"][0]["command"]
    spec = ExperimentSpec.model_validate({
        "serving": {**SERVING, "modelPvc": "weights", "modelPath": "/models/DeepSeek-V4.1"}, "timeoutSeconds": 14400})
    job = _job(spec)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:2] == ["spx", "run"] and container["command"][-1] == "--serving"
    assert job["spec"]["activeDeadlineSeconds"] == 14400
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["volumes"]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_the_configmap_keeps_the_vllm_documents() -> None:
    serving, accuracy = _serving_doc(1.0), {"schemaVersion": "spx.dev/accuracy-result/v1", "accuracy": {}, "runs": []}
    cm = rcm.build_result_configmap("ab", "ml", "uid-1", 1, serving_result=serving, accuracy_result=accuracy)
    assert rcm.read_result_configmap(cm, "serving-result.json") == serving
    assert rcm.read_result_configmap(cm, "accuracy-result.json") == accuracy
    assert rcm.read_result_configmap(cm) is None  # no kernel result in this one


# Metrics ---------------------------------------------------------------------------------------------------


def _samples(name: str, experiment: str = "ab") -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("namespace", "experiment"))): s.value
            for fam in metrics.REGISTRY.collect() for s in fam.samples
            if s.name == name and s.labels.get("experiment") == experiment}


def test_serving_and_accuracy_metrics_follow_the_status_in_base_units() -> None:
    metrics.reset()
    status = {
        "phase": "Succeeded", "verdict": "Fail",
        "serving": {"gatePassed": True, "points": [
            {"name": "ttft_8k_c1", "metric": "ttft", "unit": "ms", "mainMean": 100.0, "splitMean": 95.0,
             "changePct": -5.0},
            {"name": "8k_in_1k_out_c64", "metric": "output_throughput", "unit": "tok/s", "mainMean": 700.0,
             "changePct": None},
        ]},
        "accuracy": {"mainPct": 96.59, "splitPct": 96.97, "dropPoints": -0.38, "maxDropPoints": 1.0,
                     "gatePassed": True},
    }
    metrics.observe_experiment("ml", "ab", status)
    assert _samples("spx_serving_value") == {
        (("metric", "ttft"), ("point", "ttft_8k_c1"), ("variant", "main")): pytest.approx(0.100),
        (("metric", "ttft"), ("point", "ttft_8k_c1"), ("variant", "split")): pytest.approx(0.095),
        (("metric", "output_throughput"), ("point", "8k_in_1k_out_c64"), ("variant", "main")): 700.0,
    }
    assert _samples("spx_serving_change_ratio") == {(("metric", "ttft"), ("point", "ttft_8k_c1")): pytest.approx(-0.05)}
    assert _samples("spx_serving_gate_passed") == {(): 1.0}
    assert _samples("spx_accuracy_ratio") == {(("variant", "main"),): pytest.approx(0.9659),
                                              (("variant", "split"),): pytest.approx(0.9697)}
    assert _samples("spx_accuracy_drop_ratio") == {(): pytest.approx(-0.0038)}
    assert _samples("spx_accuracy_max_drop_ratio") == {(): pytest.approx(0.01)}
    # the gate turns undecided: its series goes; the experiment is deleted: every series goes
    metrics.observe_experiment("ml", "ab", {**status, "serving": {"gatePassed": None, "points": []}})
    assert _samples("spx_serving_gate_passed") == {} and _samples("spx_serving_value") == {}
    metrics.forget_experiment("ml", "ab")
    assert all(_samples(n) == {} for n in ("spx_accuracy_ratio", "spx_accuracy_drop_ratio",
                                           "spx_accuracy_max_drop_ratio"))


def test_promtool_accepts_the_serving_metrics(tmp_path: Any) -> None:
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package `prometheus`)")
    metrics.reset()
    metrics.observe_experiment("ml", "ab", {
        "phase": "Succeeded", "environment": {"gpu": "NVIDIA H200"},
        "kernel": {"points": [{"tokens": 2048, "replicatedUs": 30.0, "splitUs": 25.0, "speedup": 1.2}]},
        "serving": {"gatePassed": False, "points": [{"name": "p", "metric": "ttft", "mainMean": 1.0, "splitMean": 2.0,
                                                     "changePct": 100.0}]},
        "accuracy": {"mainPct": 90.0, "splitPct": 80.0, "dropPoints": 10.0, "maxDropPoints": 1.0},
    })
    out = subprocess.run([promtool, "check", "metrics"], input=metrics.exposition().decode(), capture_output=True,
                         text=True, check=False)
    metrics.forget_experiment("ml", "ab")
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr


def test_a_repeated_step_threshold_is_refused_naming_the_field() -> None:
    """Each step threshold is listed once (as sweep.tokens); the error names the field."""
    raw = {"serving": {**SERVING, "step": {"thresholds": [4096, 1024, 4096]}}, "timeoutSeconds": 86400}
    with pytest.raises(ValidationError, match=r"serving.step.thresholds\n.*each value must be listed once, \[4096\] repeat"):
        ExperimentSpec.model_validate(raw)
    assert ExperimentSpec.model_validate({**raw, "serving": {**SERVING, "step": {"thresholds": [4096, 1024]}}}).serving
