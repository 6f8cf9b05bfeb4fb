"""``spx report`` and ``spx gate`` on the same run folder reach the same verdict.

``spx gate`` reads the verdict a run wrote to its ``status.json``: over the kernel sweep and, after
``--serving``, the serving A/B, GSM8K and the step A/B. ``spx report`` re-judges the folder; before issue #28 it
re-judged the kernel sweep alone, so a run whose serving A/B failed read Pass in the report and Fail at the gate.
Each folder here is written as the runner writes it (``spx.runner.experiment.build_status`` of the one
judgement, ``write_status``), then both commands run through the real ``spx`` entry point.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from spx.analysis.bench_docs import RunIdentity
from spx.analysis.judge import BENCHES_PENDING, judge, local_status, stop
from spx.analysis.serving import summarize as summarize_serving
from spx.api import KernelResult
from spx.api.accuracy import AccuracyStatus
from spx.api.serving import ServingArmRun, ServingPointRun, ServingResult, ServingSpec, ServingStatus
from spx.api.spec import spec_hash
from spx.api.step import StepExpectation, StepResult, StepSpec, StepStatus
from spx.cli import main
from spx.runner.experiment import build_status, write_status
from spx.vocabulary import SERVING_DIR, SERVING_RESULT_FILE, STEP_RESULT_FILE
from spx_testing.factories import kernel_result

ROOT = Path(__file__).resolve().parents[2]
_mod = importlib.util.spec_from_file_location("step_power", ROOT / "benchmarks" / "step_power.py")
assert _mod is not None and _mod.loader is not None
power = importlib.util.module_from_spec(_mod)
sys.modules["step_power"] = power  # (its dataclasses look their module up)
_mod.loader.exec_module(power)

T = 2048
#: The gate's exit code of each verdict the report prints (none: 2, undecided).
EXIT_OF = {"Pass": 0, "Fail": 1, "Inconclusive": 2}


def host_bound_result() -> KernelResult:
    """The factory's sweep run eagerly, each split issuing 50 µs more host time than its replicated call: the
    GPU-bound regime passes at 2048 tokens (Δg < 0), the host-bound one fails (Δh = +50 µs): they disagree."""
    result = kernel_result()
    points = []
    for p in result.points:
        rep = p.replicated.model_copy(update={"host_samples_us": [100.0 + i for i in range(5)]})
        split = p.split.model_copy(update={"host_samples_us": [150.0 + i for i in range(5)]})
        points.append(p.model_copy(update={"execution": "eager", "replicated": rep, "split": split}))
    return result.model_copy(update={"points": points})


def step_status(low_ms: float, high_ms: float) -> StepStatus:
    """A usable step A/B whose expected effect from T (ms per step, negative: a gain) lies in ``[low_ms, high_ms]``."""
    mid = (low_ms + high_ms) / 2
    exp = StepExpectation(threshold_tokens=T, arm="split", pad_path_share=0.875, effect_ms=mid, effect_low_ms=low_ms,
                          effect_high_ms=high_ms, per_layer_us=mid * 25, per_layer_low_us=low_ms * 25,
                          per_layer_high_us=high_ms * 25)
    return StepStatus(expectations=[exp], usable=True, complete=True, rounds=40, recommended_threshold_tokens=4096)


def failed_serving_result() -> ServingResult:
    """A serving A/B whose split arm lost 20 % throughput on the one gated point."""
    serving = ServingSpec.model_validate({"model": "m", "points": [
        {"name": "tput_8k", "metric": "output_throughput", "inputLen": 8192, "outputLen": 64, "numPrompts": 8,
         "concurrency": 8}]})
    arms = [ServingArmRun(name=name, variant=variant, threshold="2048" if variant == "split" else "off",
                          state="Succeeded", points=[ServingPointRun(point="tput_8k", metric="output_throughput",
                                                                     value=value)])
            for name, variant, value in (("B1", "split", 80.0), ("A1", "main", 100.0), ("A2", "main", 100.0),
                                         ("B2", "split", 80.0))]
    return ServingResult(serving=serving, gate_threshold_tokens=T, arms=arms, complete=True)


def step_document(split_extra_ms: float, experiment: str = "local") -> StepResult:
    """A step A/B's own document (the power simulation's latency model, seeded: no timing of this machine): 40
    rounds in one server, the split ``split_extra_ms`` longer per step than replicated (negative: a gain)."""
    st = StepSpec(rounds=40, min_rounds=40, look_every=40, seed=3, pad_free=False)
    doc = power.synthetic_result(power.Scenario("t", split_extra_ms, noise_ms=0.3), 3, rounds=40, spec=st,
                                 lengths=[1024, 1025, 2048, 2049, 4096, 4097, 8191, 8192])
    return doc.model_copy(update={"experiment": experiment})


def write_run(out: Path, result: KernelResult, *, serving: ServingStatus | None = None,
              accuracy: AccuracyStatus | None = None, step: StepStatus | None = None) -> None:
    """The folder a run leaves: result.json, and status.json with the verdict judged over every section."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(result.model_dump_json(by_alias=True))
    status = build_status(result, judge(result, result.spec, serving=serving, accuracy=accuracy, step=step))
    write_status(out, status)


def verdicts(capsys: pytest.CaptureFixture[str], out: Path) -> tuple[dict[str, object], dict[str, object]]:
    """``(spx report -o json, spx gate -o json)`` documents of ``out``."""
    capsys.readouterr()
    assert main(["report", str(out), "--no-plot", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    main(["gate", str(out), "-o", "json"])
    gate = json.loads(capsys.readouterr().out)
    return report, gate


def case_kernel_only(out: Path) -> None:
    write_run(out, kernel_result())


def case_kernel_and_failed_serving(out: Path) -> None:
    write_run(out, kernel_result(), serving=ServingStatus(gate_passed=False, reasons=["tput_8k: -20.0 %"]))


def case_kernel_and_serving_document(out: Path) -> None:
    """The serving A/B's own document under serving/ (where ``spx run --serving`` writes it)."""
    doc = failed_serving_result()
    write_run(out, kernel_result(), serving=summarize_serving(doc))
    (out / SERVING_DIR).mkdir()
    (out / SERVING_DIR / SERVING_RESULT_FILE).write_text(doc.model_dump_json(by_alias=True))


def case_kernel_and_failed_accuracy(out: Path) -> None:
    write_run(out, kernel_result(), accuracy=AccuracyStatus(gate_passed=False, main_pct=95.0, split_pct=90.0,
                                                          drop_points=5.0, max_drop_points=1.0,
                                                          reasons=["GSM8K: the split drops 5.0 points"]))


def case_kernel_and_step_gain(out: Path) -> None:
    write_run(out, host_bound_result(), step=step_status(-2.0, -1.0))


def case_kernel_and_step_document(out: Path) -> None:
    """The step A/B's own document under serving/, judged as ``spx run --serving`` judges it (once, the document
    summarised against the kernel points); the split gains 1.5 ms per step."""
    result = host_bound_result()
    doc = step_document(-1.5, experiment=result.experiment).model_copy(update={"spec_hash": spec_hash(result.spec)})
    out.mkdir(parents=True)
    (out / "result.json").write_text(result.model_dump_json(by_alias=True))
    identity = RunIdentity(experiment=result.experiment, spec_hash=spec_hash(result.spec))
    write_status(out, build_status(result, judge(result, result.spec, step=doc, identity=identity)))
    (out / SERVING_DIR).mkdir()
    (out / SERVING_DIR / STEP_RESULT_FILE).write_text(doc.model_dump_json(by_alias=True))


def case_kernel_and_step_loss(out: Path) -> None:
    write_run(out, host_bound_result(), step=step_status(1.0, 2.0))


def case_regimes_disagree_no_step(out: Path) -> None:
    write_run(out, host_bound_result())


def case_partial(out: Path) -> None:
    write_run(out, kernel_result(tokens=(6, 48, 384), complete=False, error="interrupted"))


def case_truncated_result(out: Path) -> None:
    """A result.json cut short (a full disk before atomic writes, a copy interrupted) beside an intact status.json:
    the gate reads the status; the report falls back to it, saying so (it exited 3, "not JSON")."""
    write_run(out, kernel_result(), serving=ServingStatus(gate_passed=False, reasons=["tput_8k: -20.0 %"]))
    text = (out / "result.json").read_text()
    (out / "result.json").write_text(text[: len(text) // 2])


def _kernel_run(out: Path, result: KernelResult) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(result.model_dump_json(by_alias=True))


def case_kernel_stage_sigterm(out: Path) -> None:
    """SIGTERM in the kernel stage: the runner writes the points so far, complete false, and judges them."""
    write_run(out, kernel_result(tokens=(6, 48, 384), complete=False, error="terminated (SIGTERM)"))


def case_benches_stage_killed(out: Path) -> None:
    """SIGTERM/SIGKILL in the serving or step stage of `spx run --serving`: the status written before the benches
    started (judgement.stopped: the benches had not finished) stays; a partial step-result.json beside it."""
    result = host_bound_result()
    _kernel_run(out, result)
    write_status(out, build_status(result, stop(judge(result, result.spec), [BENCHES_PENDING])))
    doc = step_document(-1.5).model_copy(update={"complete": False, "rounds_done": 10})
    (out / SERVING_DIR).mkdir()
    (out / SERVING_DIR / STEP_RESULT_FILE).write_text(doc.model_dump_json(by_alias=True))


def case_benches_stage_sigint(out: Path) -> None:
    """Ctrl-C in the serving stage of `spx run --serving`: the runner judges once more with the stage stopped."""
    result = kernel_result()
    _kernel_run(out, result)
    write_status(out, build_status(result, judge(result, result.spec, require_vllm=True,
                                                 stopped=["the vLLM benches were interrupted (SIGINT)"])))


def case_another_experiments_step_document(out: Path) -> None:
    """A step-result.json of experiment 'local' in the folder of experiment 'quickstart' (`spx serving FILE`
    defaults --out): refused, with a warning, by both; the kernel decides."""
    result = kernel_result().model_copy(update={"experiment": "quickstart"})
    _kernel_run(out, result)
    doc = step_document(+1.5, experiment="local")
    identity = RunIdentity(experiment=result.experiment, spec_hash=spec_hash(result.spec))
    write_status(out, build_status(result, judge(result, result.spec, step=doc, identity=identity)))
    (out / STEP_RESULT_FILE).write_text(doc.model_dump_json(by_alias=True))


def case_cpu_pass_hand_edited(out: Path) -> None:
    """A CPU smoke run whose status.json was edited to Pass: the gate does not trust it, the report re-judges it."""
    result = kernel_result().model_copy(update={"device": "cpu"})
    write_run(out, result)
    status = json.loads((out / "status.json").read_text())
    status["verdict"] = "Pass"
    for c in status["conditions"]:
        if c["type"] == "Decided":
            c["reason"] = "Pass"
    status["phase"] = "Succeeded"
    (out / "status.json").write_text(json.dumps(status))


def case_empty_status_beside_result(out: Path) -> None:
    """An empty status.json next to an intact result.json: both judge the result.json."""
    write_run(out, kernel_result())
    (out / "status.json").write_text("")


#: (folder, the verdict both must read, what decided it; ``None``: a partial run, no verdict)
CASES = [
    pytest.param(case_kernel_only, "Pass", "kernel", id="kernel-only"),
    pytest.param(case_kernel_and_failed_serving, "Fail", "serving", id="kernel+serving-section"),
    pytest.param(case_kernel_and_serving_document, None, None, id="kernel+serving-document"),
    pytest.param(case_kernel_and_failed_accuracy, "Fail", "accuracy", id="kernel+accuracy"),
    pytest.param(case_kernel_and_step_gain, "Pass", "step", id="kernel+step-gain"),
    pytest.param(case_kernel_and_step_loss, "Fail", "step", id="kernel+step-loss"),
    pytest.param(case_kernel_and_step_document, "Pass", "step", id="kernel+step-document"),
    pytest.param(case_regimes_disagree_no_step, "Inconclusive", "none", id="regimes-disagree-no-step"),
    pytest.param(case_partial, None, None, id="partial"),
    pytest.param(case_truncated_result, "Fail", "serving", id="truncated-result-json"),
    pytest.param(case_kernel_stage_sigterm, None, None, id="kernel-stage-sigterm"),
    pytest.param(case_benches_stage_killed, None, None, id="benches-stage-sigterm-or-kill"),
    pytest.param(case_benches_stage_sigint, None, None, id="benches-stage-sigint"),
    pytest.param(case_another_experiments_step_document, "Pass", "kernel", id="another-experiments-step"),
    pytest.param(case_cpu_pass_hand_edited, "Inconclusive", "none", id="cpu-pass-hand-edited"),
    pytest.param(case_empty_status_beside_result, "Pass", "kernel", id="empty-status-json"),
]


@pytest.mark.parametrize(("make", "verdict", "decided_by"), CASES)
def test_report_and_gate_agree_on_the_same_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object,
                                                  verdict: str | None, decided_by: str | None) -> None:
    out = tmp_path / "run"
    make(out)  # type: ignore[operator]
    report, gate = verdicts(capsys, out)
    assert EXIT_OF.get(str(report.get("verdict")), 2) == gate["exitCode"]  # the same decision, whatever the words
    assert report.get("verdict") == gate.get("verdict") or gate["exitCode"] == 2
    if make is case_kernel_and_serving_document:  # whatever today's serving rules say of it, both say the same
        assert report["judgedWith"] == ["serving (serving/serving-result.json)"]
        return
    assert report.get("verdict") == verdict
    assert (report["kernel"] or {}).get("decidedBy") == decided_by or verdict is None
    if make is case_kernel_and_step_document:
        assert report["judgedWith"] == ["step A/B (serving/step-result.json)"]
    if make is case_truncated_result:
        assert any("result.json cannot be read" in w and "as spx gate does" in w for w in report["warnings"])
    if verdict is None:
        assert report["partial"] is True and gate.get("verdict") is None
    if make is case_another_experiments_step_document:
        assert any("step-result.json: not judged with this run" in w for w in report["warnings"])
    if make is case_empty_status_beside_result:
        assert any("judging" in w and "as spx gate does" in w for w in report["warnings"])
        assert "as spx report does" in gate["message"]


def test_without_the_vllm_sections_the_report_would_disagree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: the same kernel sweep judged alone passes, so the cases above test that the report reads
    the folder's serving, accuracy and step sections, not that the sweep happens to agree."""
    out = tmp_path / "run"
    case_kernel_and_failed_serving(out)
    status = json.loads((out / "status.json").read_text())
    del status["serving"]
    (out / "status.json").write_text(json.dumps(status))
    report, gate = verdicts(capsys, out)
    assert (report["verdict"], gate["verdict"]) == ("Pass", "Fail")  # the gate's verdict was judged with serving


@pytest.mark.parametrize(("effect", "serving_passed", "verdict"), [
    pytest.param(+1.5, None, "Fail", id="step-only-loss"),
    pytest.param(-1.5, None, "Pass", id="step-only-gain"),
    pytest.param(+1.5, True, "Fail", id="benches-step-loss-serving-pass"),  # was exit 0
    pytest.param(None, True, "Pass", id="benches-serving-only"),
])
def test_report_and_gate_agree_on_a_benches_only_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        effect: float | None, serving_passed: bool | None,
                                                        verdict: str) -> None:
    """`spx serving --out NEWDIR` (no kernel result): the folder holds the bench documents and the status of the
    one judgement (benches alone: a usable step decides); the report prints that status, the gate reads it."""
    from spx.api.spec import ExperimentSpec

    spec = ExperimentSpec.model_validate({"serving": {"model": "m", "points": [], "step": {}}, "timeoutSeconds": 86400})
    out = tmp_path / "run"
    out.mkdir()
    doc = step_document(effect).model_copy(update={"spec_hash": spec_hash(spec)}) if effect is not None else None
    serving = ServingStatus(gate_passed=serving_passed, reasons=["tput_8k: ok"]) if serving_passed is not None else None
    j = judge(None, spec, step=doc, serving=serving, benches_only=True,
              identity=RunIdentity(experiment="local", spec_hash=spec_hash(spec)))
    write_status(out, local_status(j, now="2026-01-01T00:00:00Z"))
    if doc is not None:
        (out / STEP_RESULT_FILE).write_text(doc.model_dump_json(by_alias=True))
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    main(["gate", str(out), "-o", "json"])
    gate = json.loads(capsys.readouterr().out)
    assert text.startswith(f"verdict: {verdict}:") and gate["verdict"] == verdict
    assert gate["exitCode"] == EXIT_OF[verdict]
    if effect is not None:
        assert "decided by: step" in text and "T = 2,048" in text
