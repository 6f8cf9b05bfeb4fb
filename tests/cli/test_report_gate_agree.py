"""``spx report`` and ``spx gate`` on the same run folder reach the same verdict.

``spx gate`` reads the verdict a run wrote to its ``status.json``: over the kernel sweep and, after
``--serving``, the serving A/B, GSM8K and the step A/B. ``spx report`` re-judges the folder; before issue #28 it
re-judged the kernel sweep alone, so a run whose serving A/B failed read Pass in the report and Fail at the gate.
Each folder here is written as the runner writes it (``spx.runner.experiment.build_status`` of the one
judgement, ``write_status``), then both commands run through the real ``spx`` entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spx.analysis.judge import judge
from spx.analysis.serving import summarize as summarize_serving
from spx.api import KernelResult
from spx.api.accuracy import AccuracyStatus
from spx.api.serving import ServingArmRun, ServingPointRun, ServingResult, ServingSpec, ServingStatus
from spx.api.step import StepEffect, StepRequest, StepResult, StepServerRun, StepSpec, StepStatus
from spx.cli import main
from spx.runner.experiment import build_status, write_status
from spx.vocabulary import SERVING_DIR, SERVING_RESULT_FILE, STEP_RESULT_FILE
from spx_testing.factories import kernel_result

T = 2048


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
    """A step A/B at T whose effect (ms per step, negative: a gain) lies in ``[low_ms, high_ms]``."""
    mid = (low_ms + high_ms) / 2
    effects = [StepEffect(threshold_tokens=T, role=role, length=T + extra, base_length=T - 8, rounds=40,
                          effect_ms=mid, effect_low_ms=low_ms, effect_high_ms=high_ms, layers=40,
                          per_layer_us=mid * 25, per_layer_low_us=low_ms * 25, per_layer_high_us=high_ms * 25,
                          outcome="gain" if high_ms < 0 else "loss" if low_ms > 0 else "indifferent")
               for role, extra in (("split", 0), ("pad", 1))]
    return StepStatus(effects=effects, complete=True)


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


def step_document(split_extra_ms: float) -> StepResult:
    """A step A/B's own document: a control server (split off) and a treated one (split at T) whose T- and
    (T + 1)-token requests take ``split_extra_ms`` longer than the control's (negative: the split gains), 40 rounds
    with a little seeded noise."""
    import random

    from spx.analysis.step import lengths

    rng = random.Random(7)

    def server(role: str, extra: float) -> StepServerRun:
        requests = [StepRequest(threshold_tokens=T, round=r, order=i, role=kind, length=n, prompt_tokens=n,
                                latency_ms=30.0 + 0.01 * n + (extra if kind != "base" else 0.0) + rng.gauss(0, 0.2))
                    for r in range(40) for i, (kind, n) in enumerate(lengths(T, 8, True).items())]
        return StepServerRun(name=role, role=role, threshold=str(T) if role == "treated" else "off",  # type: ignore[arg-type]
                             threshold_tokens=T, requests=requests)

    return StepResult(step=StepSpec(layers=40, seed=3), tensor_parallel_size=8, thresholds=[T], device="cuda",
                      servers=[server("control", 0.0), server("treated", split_extra_ms)], complete=True)


def write_run(out: Path, result: KernelResult, *, serving: ServingStatus | None = None,
              accuracy: AccuracyStatus | None = None, step: StepStatus | None = None) -> None:
    """The folder a run leaves: result.json, and status.json with the verdict judged over every section."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(result.model_dump_json(by_alias=True))
    status = build_status(result, judge(result, result.spec, serving=serving, accuracy=accuracy, step=step))
    write_status(out, status.model_copy(update={"step": step}))


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
    """The step A/B's own document under serving/, summarised as ``spx run --serving`` does: against the
    kernel sweep's Δg and Δh; the split gains 1.5 ms per step."""
    from spx.analysis.step import kernel_deltas
    from spx.analysis.step import summarize as summarize_step

    result, doc = host_bound_result(), step_document(-1.5)
    step = summarize_step(doc, kernel_deltas(judge(result, result.spec).kernel))
    write_run(out, result, step=step)
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
]


@pytest.mark.parametrize(("make", "verdict", "decided_by"), CASES)
def test_report_and_gate_agree_on_the_same_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object,
                                                  verdict: str | None, decided_by: str | None) -> None:
    out = tmp_path / "run"
    make(out)  # type: ignore[operator]
    report, gate = verdicts(capsys, out)
    assert report.get("verdict") == gate.get("verdict")
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
        assert report["partial"] is True and gate["decided"] is True and gate.get("verdict") is None


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
