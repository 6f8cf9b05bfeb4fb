"""``spx report`` on a committed H200 run (``examples/results/h200-1gpu-eager/humming-eager-1``: Humming, eager
above 512 tokens, gather modelled): what a user reads first, on real measurements."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spx.cli import main

RUN = Path(__file__).resolve().parents[2] / "examples" / "results" / "h200-1gpu-eager" / "humming-eager-1"


def test_the_decision_comes_first_and_names_the_step_ab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = shutil.copytree(RUN, tmp_path / "run")
    assert main(["report", str(run), "--no-plot"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "verdict: Inconclusive"
    assert lines[1].startswith("because: the kernel regimes disagree at and above thresholdTokens 2048")
    assert lines[2] == "decided by: none (no measurement decided: Inconclusive, kernel.nextStep names what would)"
    # Δg −19.8 µs per layer at 2048 (0.79 ms per 40-layer chunk), Δh +28.4 µs (1.13 ms): the two regimes' figures
    assert lines[3].startswith("bottom line: on this node (40 layers; gather modelled) the split at T = 2,048 tokens "
                               "gains 0.79 ms per 2,048-token prefill chunk")
    assert "costs 1.13 ms" in lines[3] and "no threshold is recommended" in lines[3]
    assert lines[4].startswith("next step: ") and "spec.serving.step" in lines[4] and "spx serving" in lines[4]
    text = "\n".join(lines)
    assert "on the table" not in text and "is below threshold" not in text  # no advice to move the threshold
    assert any(line.startswith("stake at 2,048 tokens") and "host-bound -28.4 µs/layer" in line for line in lines)


def test_report_and_gate_agree_on_the_committed_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = shutil.copytree(RUN, tmp_path / "run")
    capsys.readouterr()
    assert main(["report", str(run), "--no-plot", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["gate", str(run), "-o", "json"]) == 2
    gate = json.loads(capsys.readouterr().out)
    assert report["verdict"] == gate["verdict"] == "Inconclusive"
    point = next(p for p in report["kernel"]["points"] if p["tokens"] == 2048)
    assert point["gpuDeltaUs"] == pytest.approx(-19.8, abs=0.05) and point["hostDeltaUs"] == pytest.approx(28.4, abs=0.05)
    assert point["gpuDeltaLowUs"] < point["gpuDeltaUs"] < point["gpuDeltaHighUs"] < 0 < point["hostDeltaLowUs"]


def test_the_committed_h100_pad_free_run_reports_what_the_pad_free_shard_saves(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """examples/results/h100-1gpu-pad-free/sweep-1 (one H100, Humming): the report states the pad-free shard's saving
    per layer against vLLM's sp_shard after the decision, as a proposal (issue #34 req 3); a run that did not measure
    it (the H200 eager run) prints no such lines."""
    run = shutil.copytree(RUN.parents[1] / "h100-1gpu-pad-free" / "sweep-1", tmp_path / "run")
    assert main(["report", str(run), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "verdict: Inconclusive"  # the proposal never enters the verdict
    assert "pad-free shard (spx's proposal for vLLM's sp_shard" in out
    assert "2049 tokens (pad 7): +18.7 µs / +0.75 ms" in out and "2048 tokens (pad 0): -0.0 µs" in out
    assert main(["report", str(shutil.copytree(RUN, tmp_path / "h200")), "--no-plot"]) == 0
    assert "pad-free shard" not in capsys.readouterr().out


def test_the_report_states_the_kernel_sweeps_expectation_over_the_batch_mix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """examples/results/h200-1gpu-eager-step/humming-eager measured 2048 and 2049: the report prints the kernel
    sweep's expectation over the batch sizes it covers (kernel.mixExpectations) beside the aligned figure (issue #34
    req 2): −8.6 µs per layer over 2048–2049 against −19.7 at the aligned count alone."""
    run = shutil.copytree(RUN.parents[1] / "h200-1gpu-eager-step" / "humming-eager", tmp_path / "run")
    assert main(["report", str(run), "--no-plot"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("expected Δg (GPU-bound)")]
    assert len(lines) == 1 and "from T=2,048 over the batch mix up to 2,049 tokens" in lines[0]
    assert "-8.6 µs per layer" in lines[0] and "aligned counts alone say -19.7 µs per layer" in lines[0]
