"""The crossover plot and the report of a sweep with both regimes: the Δg/Δh panel, both regimes' lines and
stakes, the capture limit; and a sweep whose host adds nothing, printed with one regime."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from rich.console import Console

from spx.analysis.judge import Judgement, judge
from spx.analysis.summary import evaluate
from spx.api import GateSpec
from spx.api.result import ResultSummary
from spx.api.spec import ExperimentSpec
from spx.api.status import Environment, KernelPoint
from spx.cli.decision import print_report
from spx.cli.plot import plot_crossover
from spx.cli.tables import crossover_lines, uncertainty_lines
from spx.vocabulary import CPU_NOTE


def _point(tokens: int, rep: float, split: float, host_rep: float, host_split: float) -> KernelPoint:
    """A point timed as vLLM runs it (graph up to 512 tokens), with Δg and, eagerly, Δh (±2 µs intervals)."""
    eager = tokens > 512
    dg, dh = split - rep, host_split - host_rep
    return KernelPoint(tokens=tokens, rows_per_rank=tokens // 8, replicated_us=rep, split_us=split, speedup=rep / split,
                       max_abs_error=0.0, execution="eager" if eager else "graph",
                       replicated_host_us=host_rep, split_host_us=host_split,
                       gpu_delta_us=dg, gpu_delta_low_us=dg - 2, gpu_delta_high_us=dg + 2,
                       **({"host_delta_us": dh, "host_delta_low_us": dh - 2, "host_delta_high_us": dh + 2}
                          if eager else {}))


#: The H200 shape: the split saves GPU time from 512 tokens on (Δg < 0) and costs host time everywhere (Δh = +50 µs).
H200_LIKE = [_point(256, 20, 22, 10, 12), _point(512, 27, 23, 10, 12), _point(2048, 64, 44, 250, 300),
             _point(8192, 211, 146, 250, 300), _point(16384, 400, 241, 250, 300)]


def test_plot_and_report_show_both_regimes(tmp_path) -> None:
    kernel = evaluate(H200_LIKE, GateSpec(), "measured", 8, device="cuda").kernel.model_copy(
        update={"max_cudagraph_capture_size": 512})
    assert [r.regime for r in kernel.regimes] == ["gpu-bound", "host-bound"] and kernel.regimes_agree is False
    out = plot_crossover(kernel, tmp_path / "crossover.png", title="t", gate_threshold_tokens=2048)
    assert out.stat().st_size > 10_000
    lines = crossover_lines(kernel, 2048)
    assert lines[0].startswith("GPU-bound crossover: split wins from")
    assert any(line.startswith("GPU-bound regime (the step moves by Δg") and line.endswith("alone: Pass")
               for line in lines)
    assert any(line.startswith("host-bound regime (the step moves by Δh") and line.endswith("alone: Fail")
               for line in lines)
    assert "the regimes disagree about the gate threshold: only a step measurement decides" in lines
    assert "vLLM CUDA-graph capture limit: 512 tokens (eager above)" in lines
    stake = [line for line in uncertainty_lines(kernel) if line.startswith("stake at 2,048 tokens")]
    # GPU-bound: 64 − 44 = +20 µs per layer, 0.8 ms per chunk of 40 layers; host-bound: 250 − 300 = −50 µs, −2 ms
    assert len(stake) == 1 and "GPU-bound +20.0 µs/layer" in stake[0] and "+0.800 ms" in stake[0]
    assert "host-bound -50.0 µs/layer [-52.0, -48.0], -2.000 ms per prefill chunk" in stake[0]


def _judged(points: list[KernelPoint], device: str) -> Judgement:  # (the one judgement: spx.analysis.judge)
    spec = ExperimentSpec()
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"tokens": [p.tokens for p in points]})})
    return judge(ResultSummary(points=points, environment=Environment(device=device), world_size=8,
                               gemm_backend="humming", gather_source="measured", timer="cupti"), spec)


def test_the_decision_comes_first_and_names_the_next_step() -> None:
    j = _judged(H200_LIKE, "cuda")
    console = Console(record=True, width=400)
    print_report(console, j.kernel, verdict=j.verdict, reasons=j.reasons, gate_threshold_tokens=2048,
                 judgement=j.summary)
    lines = console.export_text().splitlines()
    assert lines[0] == "verdict: Inconclusive"
    assert lines[1].startswith("because: ") and "regimes disagree" in lines[1]
    assert lines[2] == "decided by: none (no measurement decided: Inconclusive, kernel.nextStep names what would)"
    assert lines[3] == (
        "bottom line: on this node (40 layers) the split at T = 2,048 tokens gains 0.80 ms per 2,048-token prefill "
        "chunk and gains 2.60 ms per full 8,192-token chunk if the step is GPU-bound, and costs 2.00 ms and costs "
        "2.00 ms if it is host-bound; T + 1 = 2,049 (the pad path) not measured; no threshold is recommended until a "
        "measurement decides (GPU-bound alone: 512, host-bound alone: none)")
    assert lines[4].startswith("next step: ") and "spec.serving.step" in lines[4] and "spx serving" in lines[4]
    assert not any("on the table" in line for line in lines)  # no advice to move the threshold


def test_an_all_eager_run_shows_no_capture_limit() -> None:
    """A CPU smoke run times every point eagerly: vLLM's CUDA-graph limit says nothing about it."""
    points = [_point(t, 20 * t / 256, 18 * t / 256, 10, 12).model_copy(update={"execution": "eager"})
              for t in (256, 512, 2048)]
    kernel = evaluate(points, GateSpec(), "measured", 8, device="cpu").kernel.model_copy(
        update={"max_cudagraph_capture_size": 512})
    assert not any("capture limit" in line for line in crossover_lines(kernel, 2048))


def test_a_run_whose_host_adds_nothing_prints_one_crossover_and_a_cpu_run_no_stake() -> None:
    """Where Δh equals Δg at every point (a CPU smoke run, timer host), one crossover is printed, without
    GPU-bound/host-bound labels; a CPU run prints no stake per prefill chunk (its shrunk projection's time
    says nothing of a model's prefill) and no bottom line about GPUs."""
    points = [_point(t, 20 * t / 256, 18 * t / 256, 20 * t / 256, 18 * t / 256).model_copy(update={"execution": "eager"})
              for t in (256, 512, 2048)]
    points = [p.model_copy(update={"host_delta_us": p.gpu_delta_us}) for p in points]
    kernel = evaluate(points, GateSpec(), "measured", 8, device="cpu").kernel
    lines = crossover_lines(kernel, 2048)
    assert lines[0].startswith("crossover: split wins at every measured count")
    assert not any("GPU-bound" in line or "host-bound" in line for line in lines)
    assert any(line.startswith("stake at") for line in uncertainty_lines(kernel))
    assert not any(line.startswith("stake at") for line in uncertainty_lines(kernel, stakes=False))
    j = _judged(points, "cpu")
    console = Console(record=True, width=200)
    print_report(console, j.kernel, verdict=j.verdict, reasons=j.reasons, cpu=True, gate_threshold_tokens=2048,
                 judgement=j.summary)
    text = console.export_text()
    lines = text.splitlines()
    assert lines[1] == CPU_NOTE  # a CPU result says CPU in its first lines, once
    assert lines.count(CPU_NOTE) == 1 and "stake at" not in text  # (no second copy as the table's caption)
    assert not any(line.startswith("bottom line:") and "GPU-bound" in line for line in lines)
