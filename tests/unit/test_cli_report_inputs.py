"""``spx report`` on input a newcomer's break-it pass got wrong: ``--plot`` with ``-o json|yaml``, results with
repeated or corrupt points, a run directory with only its status.json, a file that is not what was expected.
Through the real ``spx`` entry point on real files under ``tmp_path``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from spx.api.exit_codes import EXIT_OK, EXIT_USAGE
from spx.cli import main
from spx_testing.factories import kernel_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_dir(tmp_path: Path, tp: int = 8, name: str = "r1") -> Path:
    """A run directory holding a made-up result.json of TP ``tp``."""
    out = tmp_path / name
    out.mkdir()
    (out / "result.json").write_text(kernel_result(tp=tp).model_dump_json(by_alias=True))
    return out


def document(text: str, fmt: str) -> Any:
    """The ``-o json|yaml`` document printed."""
    return json.loads(text) if fmt == "json" else yaml.safe_load(text)


# ---------------------------------------------------------------- 1. --plot is drawn whatever -o is


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_report_plot_is_drawn_with_a_document_output(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     fmt: str) -> None:
    out = run_dir(tmp_path)
    plot = tmp_path / "p.png"
    assert main(["report", str(out), "--plot", str(plot), "-o", fmt]) == EXIT_OK
    assert plot.read_bytes()[:8] == PNG_MAGIC
    captured = capsys.readouterr()
    doc = document(captured.out, fmt)  # stdout stays one document; the plot line is on stderr
    assert doc["problems"] == [] and doc["experiment"] == "local"
    assert f"plot: {plot}" in captured.err


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_report_unwritable_plot_is_a_problem_with_a_document_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    out = run_dir(tmp_path)
    assert main(["report", str(out), "--plot", "/proc/x.png", "-o", fmt]) == EXIT_USAGE
    doc = document(capsys.readouterr().out, fmt)
    assert doc["problems"] == ["--plot /proc/x.png: cannot write the plot: /proc/x.png: No such file or directory"]
    assert "verdict" not in doc


# ---------------------------------------------------------------- 2. a token count measured twice


def edit_result(tmp_path: Path, edit: Any, tp: int = 8) -> Path:
    """A run directory whose result.json (TP ``tp``) was changed by ``edit(data)`` on its wire form."""
    out = run_dir(tmp_path, tp=tp)
    data = json.loads((out / "result.json").read_text())
    edit(data)
    (out / "result.json").write_text(json.dumps(data))
    return out


def test_report_refuses_a_repeated_token_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = edit_result(tmp_path, lambda d: d["points"].append(d["points"][0]))
    assert main(["report", str(out), "--no-plot", "-o", "json"]) == EXIT_USAGE
    assert json.loads(capsys.readouterr().out)["problems"] == [
        "points[5].tokens: 6 repeats points[0].tokens; a result holds one point per token count: remove the repeated "
        "point (or re-run)"]
    assert main(["report", str(out), "--no-plot"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "points[5].tokens: 6 repeats points[0].tokens" in captured.err
    assert "verdict" not in captured.out


# ---------------------------------------------------------------- 3. a run directory with only its status.json


def status_only_dir(tmp_path: Path, tp: int, gpu_count: int | None) -> Path:
    """A run directory of a TP ``tp`` run whose result.json is gone: only status.json is left."""
    from spx.analysis.judge import judge
    from spx.api import Environment
    from spx.runner.experiment import build_status

    result = kernel_result(tp=tp, environment=Environment(gpu="NVIDIA H200", gpu_count=gpu_count, device="cuda"))
    out = tmp_path / "c6"
    out.mkdir()
    (out / "status.json").write_text(build_status(result, judge(result, result.spec)).model_dump_json(by_alias=True))
    return out


@pytest.mark.parametrize(("tp", "gpu_count", "how"), [
    (2, None, "TP2 (from the points' rowsPerRank)"),
    (4, 4, "TP4 (the environment's gpuCount, which the points' rowsPerRank agree with)"),
], ids=["TP2 from rowsPerRank", "TP4 from gpuCount"])
def test_report_of_a_status_alone_says_what_it_assumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], tp: int, gpu_count: int | None, how: str) -> None:
    out = status_only_dir(tmp_path, tp, gpu_count)
    assert main(["report", str(out), "--no-plot"]) == EXIT_OK
    captured = capsys.readouterr()
    assert f"c6: TP{tp} on " in captured.out and "TP8" not in captured.out
    assert (f"warning: {out / 'status.json'} without its result.json records neither the experiment's name nor its "
            f"spec: assumed name 'c6' (the directory), {how}, and the default shapes and gate") in captured.err
    assert main(["report", str(out), "--no-plot", "-o", "json"]) == EXIT_OK
    [warning] = json.loads(capsys.readouterr().out)["warnings"]
    assert how in warning


# ---------------------------------------------------------------- 4. corrupt samples and shapes


def _set_samples(point: int, candidate: str, samples: list[float]) -> Any:
    return lambda d: d["points"][point][candidate].__setitem__("samplesUs", samples)


def _rows_per_rank_1_at_2048(d: dict[str, Any]) -> None:
    d["points"][3]["rowsPerRank"] = 1  # 2048 tokens of a TP2 run: 1024 rows per rank


@pytest.mark.parametrize(("edit", "problem"), [
    (_set_samples(1, "replicated", [-5.0] * 5),
     "points[1].replicated.samplesUs: every sample must be a finite time >= 0 µs: 5 are not, the first at [0] (-5.0); "
     "a corrupt file: re-run, or restore the run's result.json (got [-5.0, -5.0, -5.0, -5.0, -5.0])"),
    (_set_samples(1, "split", [float("nan"), 30.0]),
     "points[1].split.samplesUs: every sample must be a finite time >= 0 µs: 1 is not, the first at [0] (nan); "
     "a corrupt file: re-run, or restore the run's result.json (got [nan, 30.0])"),
    (_set_samples(1, "split", []),
     "points[1].split.samplesUs: empty, but replicated.samplesUs has 5; both candidates are timed in the same rounds "
     "(a corrupt file: re-run, or restore the run's result.json)"),
    (_rows_per_rank_1_at_2048,
     "points[3].rowsPerRank: 1, but 2048 tokens split over spec.parallelism.tensorParallelSize 2 ranks is 1024 rows "
     "per rank; the file is corrupt or its TP was edited: re-run, or restore the run's result.json"),
], ids=["negative samples", "a NaN sample", "no split samples", "rowsPerRank of another TP"])
def test_report_refuses_corrupt_points(tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any,
                                       problem: str) -> None:
    out = edit_result(tmp_path, edit, tp=2)
    assert main(["report", str(out), "--no-plot", "-o", "json"]) == EXIT_USAGE
    assert json.loads(capsys.readouterr().out)["problems"] == [problem]
    assert main(["report", str(out), "--no-plot"]) == EXIT_USAGE
    assert problem in capsys.readouterr().err


def test_a_result_without_any_samples_is_still_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A result from before samples were kept (neither candidate has any) is reported, at its medians."""
    def strip(d: dict[str, Any]) -> None:
        for p in d["points"]:
            p["replicated"]["samplesUs"] = p["split"]["samplesUs"] = []
    out = edit_result(tmp_path, strip)
    assert main(["report", str(out), "--no-plot"]) == EXIT_OK
    assert "verdict: Pass" in capsys.readouterr().out


# ---------------------------------------------------------------- 6. a file that is not what the command takes


@pytest.mark.parametrize(("name", "what"), [("result.json", "a run's result (result.json)"),
                                           ("status.json", "a run's status (status.json)")])
def test_validate_says_a_runs_output_is_not_an_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          name: str, what: str) -> None:
    out = status_only_dir(tmp_path, 2, None)
    (out / "result.json").write_text(kernel_result(tp=2).model_dump_json(by_alias=True))
    assert main(["validate", str(out / name)]) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[1:] == [
        f"  - (file): this is {what}, not an experiment: to re-analyse the run, spx report {out}; give an experiment "
        "YAML (kind: ShardedProjectionExperiment) here"]


def test_report_reads_a_renamed_status_json_as_a_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = status_only_dir(tmp_path, 2, None)
    (out / "status.json").rename(out / "my-status.json")
    assert main(["report", str(out / "my-status.json"), "--no-plot"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "c6: TP2 on " in captured.out and "verdict:" in captured.out
    assert "required: add it" not in captured.err


def test_predict_with_a_measured_run_of_another_tp_says_what_to_do(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m2"
    out.mkdir()
    (out / "result.json").write_text(kernel_result(tp=2, gather_us=5.0).model_dump_json(by_alias=True))
    assert main(["predict", "--measured", str(out)]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"error: {out}: the measured run is TP2, the table TP8: its shard GEMMs are split 2 ways, the table's 8; "
        "measure at TP8 (spec.parallelism.tensorParallelSize: 8, one GPU is enough: the gather is modelled), or give "
        "a table measured at TP2 (CSV --tp 2)")
