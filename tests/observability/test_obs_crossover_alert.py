"""SpxCrossoverShifted compares like with like, checked with promtool on series built from the
repository's committed H200 results (examples/results/h200-1gpu, the README's table): their labels
come from the operator's own code (``spx.controller.metrics.comparable_values``) applied to the committed
statuses, and the crossovers under the datasheet gather prior from ``spx.analysis.remodel`` on the
committed samples (``benchmarks/remodel_gather.py``). Humming ≈ 940 and cuBLAS ≈ 1619 tokens, the
coarse and dense Humming sweeps, Marlin, each under both gather priors, and CPU smoke runs all
present at once: no alert. A
positive control (the same Humming fingerprint measured 50 % apart) still fires.

Labels say what was measured, not how many points it took: the two committed adaptive runs of one grid
(examples/results/h200-1gpu-adaptive, refined to 8 and to 12 points) are compared, so a drift from 222 to
330 tokens fires; the same GPU and backend at TP4 and TP8 (172 % apart by design) are not.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from spx.analysis.judge import judge
from spx.analysis.remodel import remodel_gather
from spx.api.gather_model import GatherModelSpec
from spx.api.result import KernelResult
from spx.controller import metrics
from spx_testing.obslib import ROOT, RULES, require_binary

RESULTS = ROOT / "examples" / "results" / "h200-1gpu"
ADAPTIVE = ROOT / "examples" / "results" / "h200-1gpu-adaptive"
RUNS = ("humming", "humming-dense", "marlin", "torch-bf16")


def _status(run: str) -> dict[str, Any]:
    return json.loads((RESULTS / run / "status.json").read_text())


def _spec(run: str, prior: str = "h20-calibrated") -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((RESULTS / run / "result.json").read_text())["spec"]
    spec["kernel"]["gatherModel"]["prior"] = prior
    return spec


def _datasheet(run: str) -> dict[str, Any]:
    """The committed status with the kernel section re-judged under the datasheet gather prior."""
    result = KernelResult.model_validate(json.loads((RESULTS / run / "result.json").read_text()))
    kernel = judge(remodel_gather(result, GatherModelSpec(prior="datasheet")), result.spec).kernel
    assert kernel is not None
    return {**_status(run), "kernel": kernel.to_wire()}


def _series(name: str, status: dict[str, Any], values: str, spec: dict[str, Any] | None = None) -> dict[str, str]:
    labels = labels_of(name, status, spec)
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"spx_crossover_tokens{{{text}}}", "values": values}


def labels_of(name: str, status: dict[str, Any], spec: dict[str, Any] | None) -> dict[str, str]:
    return dict(zip(("namespace", "experiment", *metrics.COMPARABLE_LABELS),
                    ("ml", name, *metrics.comparable_values(status, spec)), strict=True))


def _promtool_test(tmp_path: Path, input_series: list[dict[str, str]], exp_alerts: list[dict[str, Any]]) -> str:
    doc = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": [
            {"eval_time": "20m", "alertname": "SpxCrossoverShifted", "exp_alerts": []},
            {"eval_time": "50m", "alertname": "SpxCrossoverShifted", "exp_alerts": exp_alerts},
        ]}],
    }
    path = tmp_path / "crossover.test.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run([require_binary("promtool"), "test", "rules", str(path)], capture_output=True, text=True,
                          timeout=120)
    return proc.stdout + proc.stderr if proc.returncode else ""


def test_the_readme_results_do_not_fire(tmp_path: Path) -> None:
    series = []
    crossovers = {}
    for run in RUNS:
        for prior, status in (("h20-calibrated", _status(run)), ("datasheet", _datasheet(run))):
            crossovers[(run, prior)] = round(status["kernel"]["crossoverTokens"])
            series.append(_series(f"{run}-{prior}", status, f"{status['kernel']['crossoverTokens']}x60", _spec(run, prior)))
    # the README's figures: what made the old (gpu, driver, vllm) grouping fire
    assert crossovers[("humming", "datasheet")] == 940 and crossovers[("torch-bf16", "datasheet")] == 1619
    assert crossovers[("humming", "h20-calibrated")] == 89 and crossovers[("humming-dense", "h20-calibrated")] == 216
    # CPU smoke runs of the same experiment: timings of a shared CPU, 10x apart, never count
    cpu = {**_status("humming"), "environment": {**_status("humming")["environment"], "device": "cpu"}}
    series += [_series("smoke-1", cpu, "12x60", _spec("humming")), _series("smoke-2", cpu, "120x60", _spec("humming"))]
    # all at once in one namespace over the alert's 7-day window: nothing fires
    assert _promtool_test(tmp_path, series, []) == ""


@pytest.mark.parametrize("run", ["humming", "torch-bf16"])
def test_the_same_fingerprint_apart_still_fires(tmp_path: Path, run: str) -> None:
    """Two runs of one fingerprint 50 % apart: promtool, told to expect silence, reports the alert it got."""
    status = _status(run)
    x = status["kernel"]["crossoverTokens"]
    series = [_series("first", status, f"{x}x60", _spec(run)), _series("second", status, f"_x10 {x * 1.5}x50", _spec(run))]
    got = _promtool_test(tmp_path, series, [])
    assert "SpxCrossoverShifted" in got and f'gemm_backend="{status["kernel"]["gemmBackend"]}"' in got, got
    assert 'sweep="6-16384x14"' in got and 'device="cuda"' in got and 'gather_source="modelled/h20-calibrated"' in got, got
    assert 'tp="8"' in got and 'projection="5120x1280+512"' in got, got


def _adaptive(run: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(status, spec) of a committed adaptive run."""
    result = json.loads((ADAPTIVE / run / "result.json").read_text())
    return json.loads((ADAPTIVE / run / "status.json").read_text()), result["spec"]


def test_two_refinements_of_one_grid_are_compared(tmp_path: Path) -> None:
    """Adaptive runs of one grid (32, 128, 512, 1024) refined to 8 and to 12 points: one sweep label, so
    a drift from 222 to 330 tokens fires (before, the label carried the point count and it never could)."""
    (eight, eight_spec), (twelve, twelve_spec) = _adaptive("run1/adaptive"), _adaptive("bounds/adaptive")
    assert (len(eight["kernel"]["points"]), len(twelve["kernel"]["points"])) == (8, 12)
    assert round(eight["kernel"]["crossoverTokens"]) == 222
    a, b = labels_of("eight", eight, eight_spec), labels_of("twelve", twelve, twelve_spec)
    assert a["sweep"] == b["sweep"] == "32-1024x4"
    assert {k: v for k, v in a.items() if k != "experiment"} == {k: v for k, v in b.items() if k != "experiment"}
    # the same labels from the status alone (no spec): the points a refinement added are left out
    assert metrics.comparable_values(twelve)[-1] == "32-1024x4"
    series = [_series("eight", eight, "222x60", eight_spec), _series("twelve", twelve, "_x10 330x50", twelve_spec)]
    got = _promtool_test(tmp_path, series, [])
    assert "SpxCrossoverShifted" in got and 'sweep="32-1024x4"' in got, got


def test_tp4_and_tp8_are_not_compared(tmp_path: Path) -> None:
    """The same GPU, backend and gather source at TP8 and TP4, 172 % apart: different ``tp`` labels, no alert."""
    status, spec8 = _status("humming"), _spec("humming")
    spec4 = {**spec8, "parallelism": {**spec8["parallelism"], "tensorParallelSize": 4}}
    x = status["kernel"]["crossoverTokens"]
    assert labels_of("tp8", status, spec8)["tp"] == "8" and labels_of("tp4", status, spec4)["tp"] == "4"
    series = [_series("tp8", status, f"{x}x60", spec8), _series("tp4", status, f"_x10 {x * 2.72}x50", spec4)]
    assert _promtool_test(tmp_path, series, []) == ""
    # a different projection shape at the same TP is not compared either
    wide = {**spec8, "projection": {**spec8["projection"], "outputSizes": [1536, 512]}}
    series = [_series("v41", status, f"{x}x60", spec8), _series("wide", status, f"_x10 {x * 2}x50", wide)]
    assert _promtool_test(tmp_path, series, []) == ""
