"""``spx predict --measured RUN --gather PRIOR`` and ``spx report RUN`` say the same, with the same interval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spx.analysis import judge
from spx.analysis.predict import predict_remodelled
from spx.analysis.remodel import remodel_gather
from spx.api.gather_model import GatherModelSpec
from spx.api.result import KernelResult
from spx.cli import EXIT_OK, main

REPO = Path(__file__).resolve().parents[2]
HUMMING = REPO / "examples" / "results" / "h200-1gpu" / "humming" / "result.json"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == EXIT_OK
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_cli_predict_and_report_agree_on_the_committed_h200_run(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, ["report", str(HUMMING), "-o", "json", "--no-plot"])["kernel"]
    pred = _json(capsys, ["predict", "--measured", str(HUMMING), "--gather", "h20-calibrated", "-o", "json"])
    p = pred["prediction"]
    assert p["breakEvenTokens"] == pytest.approx(report["crossoverTokens"], rel=1e-12)
    assert p["breakEvenTokens"] == pytest.approx(88.9, abs=0.1)
    assert p["recommendedThresholdTokens"] == report["recommendedThresholdTokens"] == 128
    assert p["crossoverConfidence"] == report["crossoverConfidence"] == "within-spread"
    assert p["uncertainty"] == report["uncertainty"]  # crossover interval, band, reasons, stake: all of it
    assert [(q["tokens"], q["speedupLow"], q["speedupHigh"]) for q in p["points"]] == [
        (q["tokens"], q["speedupLow"], q["speedupHigh"]) for q in report["points"]]


def test_predict_under_the_other_prior_is_report_of_the_remodelled_run() -> None:
    run = KernelResult.model_validate(json.loads(HUMMING.read_text()))
    sheet = GatherModelSpec(prior="datasheet")
    remodelled = remodel_gather(run, sheet)
    pred = predict_remodelled(run, sheet)
    k = judge(remodelled, remodelled.spec).kernel
    assert k is not None and k.uncertainty is not None
    assert pred.break_even_tokens == pytest.approx(k.crossover_tokens, rel=1e-12)
    assert pred.break_even_tokens == pytest.approx(940, abs=10)  # README: ≈ 940 under the datasheet prior
    assert pred.uncertainty == k.uncertainty and pred.crossover_confidence == k.crossover_confidence
