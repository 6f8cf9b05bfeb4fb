"""The crossover plot and the report with both regimes: dashed host issue-time curves, the capture limit."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from spx.analysis.summary import evaluate
from spx.api import GateSpec
from spx.api.status import KernelPoint
from spx.cli.plot import plot_crossover
from spx.cli.tables import crossover_lines


def _point(tokens: int, rep: float, split: float, host_rep: float, host_split: float) -> KernelPoint:
    return KernelPoint(tokens=tokens, rows_per_rank=tokens // 8, replicated_us=rep, split_us=split, speedup=rep / split,
                       max_abs_error=0.0, execution="graph" if tokens <= 512 else "eager",
                       replicated_host_us=host_rep, split_host_us=host_split, host_delta_us=host_split - host_rep)


def test_plot_and_report_show_both_bounds(tmp_path) -> None:
    points = [_point(256, 20, 22, 10, 12), _point(512, 27, 23, 10, 12), _point(2048, 64, 44, 250, 300),
              _point(8192, 211, 146, 250, 300), _point(16384, 400, 241, 250, 300)]
    kernel = evaluate(points, GateSpec(), "measured", 8, device="cuda").kernel.model_copy(
        update={"max_cudagraph_capture_size": 512})
    host = kernel.regimes[1]  # graph points keep their span; eager ones judged on Δh = +50 µs: never wins
    assert host.regime == "host-bound" and host.first_winning_tokens is None and host.verdict == "Fail"
    out = plot_crossover(kernel, tmp_path / "crossover.png", title="t", gate_threshold_tokens=2048)
    assert out.stat().st_size > 10_000
    lines = crossover_lines(kernel, 2048)
    assert lines[0].startswith("GPU-bound crossover: split wins from")
    assert any(line.startswith("host-bound crossover") and "none in the measured range" in line for line in lines)
    assert "vLLM CUDA-graph capture limit: 512 tokens (eager above)" in lines
    assert any(line.startswith("decided by: none; next: measure the split's effect on the whole step") for line in lines)


def test_an_all_eager_run_shows_no_capture_limit() -> None:
    """A CPU smoke run times every point eagerly: vLLM's CUDA-graph limit says nothing about it."""
    points = [_point(t, 20 * t / 256, 18 * t / 256, 10, 12).model_copy(update={"execution": "eager"})
              for t in (256, 512, 2048)]
    kernel = evaluate(points, GateSpec(), "measured", 8, device="cpu").kernel.model_copy(
        update={"max_cudagraph_capture_size": 512})
    assert not any("capture limit" in line for line in crossover_lines(kernel, 2048))


def test_a_run_whose_host_adds_nothing_prints_one_crossover_and_a_cpu_run_no_stake() -> None:
    """Where the host issue times print as the GPU spans at every point (a CPU smoke run, timer host: issuing
    is running), one crossover is printed, without GPU-bound/host-bound labels; a CPU run
    prints no stake per prefill chunk (its shrunk projection's time says nothing of a model's prefill)."""
    from rich.console import Console

    from spx.cli.tables import print_report, uncertainty_lines

    points = [_point(t, 20 * t / 256, 18 * t / 256, 20 * t / 256, 18 * t / 256).model_copy(update={"execution": "eager"})
              for t in (256, 512, 2048)]
    kernel = evaluate(points, GateSpec(), "measured", 8, device="cpu").kernel
    assert [r.regime for r in kernel.regimes] == ["gpu-bound", "host-bound"]  # (the analysis still has both)
    assert kernel.regimes_agree is True
    lines = crossover_lines(kernel, 2048)
    assert lines[0].startswith("crossover: split wins at every measured count")
    assert not any("GPU-bound" in line or "host-bound" in line for line in lines)
    assert any(line.startswith("stake at") for line in uncertainty_lines(kernel))
    assert not any(line.startswith("stake at") for line in uncertainty_lines(kernel, stakes=False))
    console = Console(record=True, width=200)
    print_report(console, kernel, verdict="Inconclusive", reasons=[], cpu=True, gate_threshold_tokens=2048)
    text = console.export_text()
    assert text.count("CPU smoke run: timings say nothing about GPUs") == 1 and "stake at" not in text
