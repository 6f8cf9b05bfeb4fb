"""What ``spx run``/``report``/``predict`` say about partial and edge runs (the crossover lines, the plot's
title, which experiment a report is about)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spx.analysis.judge import judge
from spx.api import KernelStatus
from spx.api.exit_codes import EXIT_OK
from spx.cli.plot import plot_title
from spx.cli.tables import crossover_lines
from spx_testing.factories import kernel_result

SPX = str(Path(sys.executable).with_name("spx"))
HEAD = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n"


def spx(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}
    return subprocess.run([SPX, *args], capture_output=True, text=True, timeout=180, env=env)


def test_no_point_measured_says_so() -> None:
    line = crossover_lines(KernelStatus())[0]
    assert line == "crossover: none (no token count was measured)"


def test_split_winning_at_the_smallest_count_is_an_upper_bound_in_the_headline() -> None:
    result = kernel_result(tokens=(128, 256, 2048), tp=8)  # the split wins at every count (break-even ≈ 94)
    kernel = judge(result, result.spec).kernel
    assert kernel is not None
    line = crossover_lines(kernel)[0]
    assert "at or below 128 tokens" in line and "upper bound" in line and "≈" not in line


def test_an_interpolated_crossover_names_the_first_win_after_the_last_loss() -> None:
    result = kernel_result()
    kernel = judge(result, result.spec).kernel
    assert kernel is not None
    line = crossover_lines(kernel)[0]
    assert "≈" in line and "first win after the last loss" in line


def test_a_partial_plot_title_says_partial_keeps_tp_and_does_not_pass_auto_for_a_backend() -> None:
    title = plot_title(name="tiny", gpu="CPU", gemm_backend="auto", gather_source="measured", cpu=True, tp=2,
                       partial="1 of 2 token counts")
    assert title.startswith("PARTIAL RUN: 1 of 2 token counts\n")
    assert "tiny: TP2 on CPU" in title and "gemm auto" not in title and "auto requested" in title


def test_predict_says_what_its_first_winning_count_is() -> None:
    proc = spx("predict")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "first winning count" not in proc.stdout
    assert "the first win after the last loss" in proc.stdout


def test_report_with_another_experiment_keeps_the_measurements_name(tmp_path: Path) -> None:
    result = kernel_result(tp=2).model_copy(update={"experiment": "measured-one"})
    (tmp_path / "result.json").write_text(result.model_dump_json(by_alias=True))
    other = tmp_path / "other.yaml"
    other.write_text(HEAD + "metadata: {name: other}\nspec:\n  parallelism: {tensorParallelSize: 2}\n")
    proc = spx("report", str(tmp_path), "--experiment", str(other), "--no-plot")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "measured-one (gate of other): TP2" in " ".join(proc.stdout.split())
