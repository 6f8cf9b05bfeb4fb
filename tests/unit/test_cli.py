"""``spx`` CLI without a benchmark run: validation and exit codes, crd, predict, report, summaries."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from spx.analysis import judge
from spx.api import (
    SUMMARY_MAX_BYTES,
    Environment,
    ExperimentSpec,
    ExperimentStatus,
    KernelResult,
    ResultSummary,
)
from spx.api.wire import build_summary
from spx.cli import COMMANDS, EXIT_OK, EXIT_USAGE, apply_overrides, main, parse_tokens
from spx.runner.experiment import build_status
from spx_testing.factories import H20_TABLE, kernel_result

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
TP8 = REPO / "examples" / "deepseek-v41-tp8.yaml"
CRD_FILE = REPO / "crds" / "shardedprojectionexperiments.yaml"

VALID = """\
apiVersion: bench.spx.dev/v1alpha1
kind: ShardedProjectionExperiment
metadata: {name: t}
spec:
  parallelism: {tensorParallelSize: 2}
  sweep: {tokens: [8, 32]}
  kernel: {device: cpu}
"""


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------- registry


def test_commands_registered_in_one_place() -> None:
    assert {"run", "validate", "crd", "report", "predict"} <= set(COMMANDS)


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == EXIT_OK
    assert "run" in capsys.readouterr().out


def test_unknown_command_is_invalid_input() -> None:
    assert main(["frobnicate"]) == EXIT_USAGE


# ---------------------------------------------------------------- validate / run input errors


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ("  sweep: {tokens: [32, 8]}\n", "spec.sweep.tokens"),
        ("  kernel: {samples: 1}\n", "spec.kernel.samples"),
        ("  projection: {hiddenSize: 1000}\n", "spec.projection"),
        ("  gate: {thresholdTokens: 2048.5}\n", "spec.gate.thresholdTokens"),
        ("  kernal: {samples: 10}\n", "spec.kernal"),
    ],
)
def test_validate_names_the_bad_field_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], patch: str, field: str
) -> None:
    path = write(tmp_path, "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n"
                 "metadata: {name: t}\nspec:\n" + patch)
    assert main(["validate", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert field in err
    assert str(path) in err


def test_validate_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope.yaml")]) == EXIT_USAGE
    assert "cannot read" in capsys.readouterr().err


def test_validate_prints_normalised_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["validate", str(write(tmp_path, VALID))]) == EXIT_OK
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["spec"]["projection"]["hiddenSize"] == 5120  # default filled in
    assert doc["spec"]["sweep"]["tokens"] == [8, 32]


@pytest.mark.parametrize("example", [QUICKSTART, TP8])
def test_examples_are_valid_experiments(example: Path) -> None:
    assert main(["validate", str(example)]) == EXIT_OK


def test_tp8_example_is_the_real_thing() -> None:
    from spx.api import load_experiment

    spec = load_experiment(TP8.read_text()).spec
    assert spec.projection.hidden_size == 5120 and spec.projection.output_sizes == [1280, 512]
    assert spec.projection.weight_format == "mxfp8-block32-ue8m0"
    assert spec.parallelism.tensor_parallel_size == 8
    assert spec.sweep.tokens == [6, 12, 24, 48, 96, 384, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384]
    assert (spec.kernel.samples, spec.kernel.warmup) == (50, 5)


def test_run_with_invalid_spec_exits_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, VALID.replace("tokens: [8, 32]", "tokens: [8, 8]"))
    out = tmp_path / "out"
    assert main(["run", str(bad), "--out", str(out)]) == EXIT_USAGE
    assert "spec.sweep.tokens" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--samples", "1"], "spec.kernel.samples"),
        (["--gemm-backend", "cublas"], "spec.kernel.gemmBackend"),
        (["--tokens", "8,x"], "--tokens"),
        (["--tokens", "64,8"], "spec.sweep.tokens"),
    ],
)
def test_run_overrides_are_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "out"
    assert main(["run", str(write(tmp_path, VALID)), "--out", str(out), *args]) == EXIT_USAGE
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_apply_overrides() -> None:
    spec = apply_overrides(ExperimentSpec(), gemm_backend="torch-bf16", samples=7, tokens=[1, 2])
    assert (spec.kernel.gemm_backend, spec.kernel.samples, spec.sweep.tokens) == ("torch-bf16", 7, [1, 2])
    assert parse_tokens("6, 12,24") == [6, 12, 24]


# ---------------------------------------------------------------- crd


def test_crd_output_equals_checked_in_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out == CRD_FILE.read_text(), "crds/ is stale: regenerate with `spx crd > crds/shardedprojectionexperiments.yaml`"


# ---------------------------------------------------------------- predict


def _break_even(text: str) -> float:
    m = re.search(r"break-even: ≈ ([\d,]+) tokens", text)
    assert m, text
    return float(m.group(1).replace(",", ""))


def test_predict_reproduces_the_seed_authors_break_even(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict"]) == EXIT_OK
    out = capsys.readouterr().out
    assert 1300 <= _break_even(out) <= 1600  # the author: "about 1450 tokens"
    assert "recommended threshold: 2,048 tokens" in out
    assert "method:" in out and "6.7" in out
    assert "16,384" in out  # the table


def test_predict_explicit_csv_and_tp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = H20_TABLE
    assert main(["predict", str(csv), "--tp", "8", "--interpolation", "log-log"]) == EXIT_OK
    assert 1100 <= _break_even(capsys.readouterr().out) <= 1400


def test_predict_bad_table_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, "tokens,foo\n1,2\n", "bad.csv")
    assert main(["predict", str(bad)]) == EXIT_USAGE
    assert "header" in capsys.readouterr().err
    assert main(["predict", str(H20_TABLE), "--tp", "4"]) == EXIT_USAGE


# ---------------------------------------------------------------- report, status, summary (synthetic result)


def _result(tokens: list[int], *, complete: bool = True, error: str | None = None,
            env: Environment | None = None) -> KernelResult:
    """The shared synthetic sweep at TP8, with the split's breakdown (15 µs all-gather)."""
    return kernel_result(tuple(tokens), complete=complete, error=error, environment=env, gather_us=15.0)


def test_report_reanalyses_a_result_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _result([6, 48, 96, 384, 1024, 2048, 4096])
    (tmp_path / "result.json").write_text(result.model_dump_json(by_alias=True))
    assert main(["report", str(tmp_path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "crossover" in out and "verdict: Pass" in out
    assert "CPU smoke run" not in out
    assert (tmp_path / "crossover.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a stricter gate, from the command line, changes the verdict
    assert main(["report", str(tmp_path), "--threshold-tokens", "48", "--no-plot"]) == EXIT_OK
    assert "verdict: Fail" in capsys.readouterr().out


def test_report_from_status_json_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _result([6, 48, 384, 2048, 4096])
    status = build_status(result, judge(result, result.spec))
    (tmp_path / "status.json").write_text(status.model_dump_json(by_alias=True, exclude_none=True))
    assert main(["report", str(tmp_path / "status.json"), "--no-plot"]) == EXIT_OK
    assert "verdict:" in capsys.readouterr().out


def test_report_without_results_exits_2(tmp_path: Path) -> None:
    assert main(["report", str(tmp_path)]) == EXIT_USAGE


def test_status_of_a_completed_run() -> None:
    result = _result([6, 48, 384, 2048, 4096])
    ev = judge(result, result.spec)
    status = ExperimentStatus.model_validate(json.loads(build_status(result, ev).model_dump_json(by_alias=True)))
    assert status.phase == "Succeeded" and status.verdict == ev.verdict
    conds = {c.type: c for c in status.conditions}
    assert conds["Completed"].status == "True"
    assert conds["Decided"].status == "True" and conds["Decided"].reason == ev.verdict
    assert status.kernel is not None and len(status.kernel.points) == 5


def test_status_of_a_failed_run_has_no_verdict() -> None:
    result = _result([6, 48], complete=False, error="rank 1 failed: RuntimeError: boom")
    status = build_status(result, judge(result, result.spec))
    assert status.phase == "Failed" and status.verdict is None
    conds = {c.type: c for c in status.conditions}
    assert conds["Completed"].status == "False" and conds["Completed"].reason == "BenchmarkFailed"
    assert conds["Decided"].status == "True" and conds["Decided"].reason == "BenchmarkFailed"
    assert "rank 1 failed" in (status.message or "")


def test_cpu_status_says_timings_are_meaningless() -> None:
    result = _result([6, 48, 384, 2048]).model_copy(update={"device": "cpu", "environment": Environment(device="cpu")})
    status = build_status(result, judge(result, result.spec))
    assert "CPU smoke run: timings say nothing about GPUs" in (status.message or "")


def test_summary_fits_and_drops_environment_before_points() -> None:
    from spx.analysis import points_from_result

    tokens = [6, 12, 24, 48, 96, 384, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384]
    env = Environment(gpu="NVIDIA H200", gpu_count=8, driver="580.1", cuda="13.0", torch="2.11.0", nccl="2.29.7",
                      vllm="0.33.0", node="n" * 1500, python="3.12.3", spx="0.1.0", device="cuda",
                      kernels=[f"sm90_xmma_gemm_{i}_" + "x" * 80 for i in range(40)])
    result = _result(tokens, env=env, complete=False, error="e" * 2000)
    points = points_from_result(result)
    text = build_summary(result, points)
    assert len(text.encode()) <= SUMMARY_MAX_BYTES
    summary = ResultSummary.model_validate_json(text)
    assert [p.tokens for p in summary.points] == tokens
    assert summary.environment.kernels == []
    assert summary.environment.node is None  # environment detail went first
    assert summary.complete is False and summary.error and len(summary.error) <= 512
    # a small result keeps its whole fingerprint (minus kernel names)
    small = build_summary(_result([6, 2048], env=env), points_from_result(_result([6, 2048], env=env)))
    assert ResultSummary.model_validate_json(small).environment.node == "n" * 1500


def test_default_nproc() -> None:
    from spx.runner.local import default_nproc

    def spec(tp: int, device: str = "auto") -> ExperimentSpec:
        return ExperimentSpec.model_validate({"parallelism": {"tensorParallelSize": tp}, "kernel": {"device": device}})

    assert default_nproc(spec(8), gpus=0) == 2
    assert default_nproc(spec(1), gpus=0) == 1
    assert default_nproc(spec(8), gpus=8) == 8
    assert default_nproc(spec(4), gpus=8) == 4
    assert default_nproc(spec(8), gpus=2) == 2
    assert default_nproc(spec(8, "cpu"), gpus=8) == 2


def test_run_with_impossible_nproc_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "out"
    assert main(["run", str(write(tmp_path, VALID)), "--out", str(out), "--nproc", "0"]) == EXIT_USAGE
    assert "--nproc" in capsys.readouterr().err
    assert not out.exists()


def test_an_explicit_gloo_gather_with_fewer_ranks_than_tp_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gather: gloo` asks for a measured gather: one rank of a TP2 spec would model it, so the run is
    refused before any rank starts, naming both fields and the fix."""
    pytest.importorskip("torch")
    out = tmp_path / "out"
    spec = write(tmp_path, VALID.replace("kernel: {device: cpu}", "kernel: {device: cpu, timer: host, gather: gloo}"))
    assert main(["run", str(spec), "--out", str(out), "--nproc", "1"]) == EXIT_USAGE
    err = capsys.readouterr().err
    for part in ("spec.kernel.gather: gloo", "spec.parallelism.tensorParallelSize=2", "--nproc 2",
                 "gather: auto or modelled"):
        assert part in err, err
    assert not out.exists()  # refused before anything was written


# ---------------------------------------------------------------- input a user gets wrong


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (VALID.replace("tensorParallelSize: 2", "tensor_parallel_size: 2"), "spec.parallelism.tensor_parallel_size: unknown field"),
        (VALID.replace("kernel: {device: cpu}", 'kernel: {device: cpu, samples: "10"}'), "spec.kernel.samples"),
        (VALID.replace("tensorParallelSize: 2", "tensorParallelSize: true"), "spec.parallelism.tensorParallelSize"),
        ("apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\nmetadata: {name: t}\n", "spec: required: add it"),
    ],
)
def test_strict_camel_case_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str) -> None:
    assert main(["validate", str(write(tmp_path, text))]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment in err and "[bold" not in err  # markup rendered, not printed


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_yaml_syntax_errors_name_the_file_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, stdin: bool
) -> None:
    path = write(tmp_path, "a: [\n", "bad.yaml")
    if stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert main(["validate", "-" if stdin else str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    name = "<stdin>" if stdin else str(path)
    assert f"(YAML) {name}, line 2, column 1: did not find expected node content" in err, err
    assert "<unicode string>" not in err


def test_binary_junk_is_invalid_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.yaml"
    junk.write_bytes(bytes(range(256)) * 4)
    for cmd in (["validate", str(junk)], ["run", str(junk)], ["predict", str(junk)]):
        assert main(cmd) == EXIT_USAGE
        assert "not a UTF-8 text file" in capsys.readouterr().err


def test_report_on_a_missing_directory_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "typo_dir")]) == EXIT_USAGE
    assert "typo_dir does not exist" in capsys.readouterr().err


def test_run_refuses_to_overwrite_an_earlier_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text("{}")
    assert main(["run", str(write(tmp_path, VALID)), "--out", str(out)]) == EXIT_USAGE
    err = capsys.readouterr().err
    # a result.json no spx run recorded writing (no manifest lists it) is named as not spx's, not "pass --overwrite"
    # (which would only be refused next); an earlier spx run gets "already holds a run" (tests/cli/test_run_process.py)
    assert "not spx's" in err and "even with --overwrite" in err and "result.json" in err
    assert (out / "result.json").read_text() == "{}"  # nothing lost


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--gemm-backend", "torch-fp8"], "spec.kernel.gemmBackend: torch-fp8 (cuBLASLt blockwise W8A8) takes 128×128"),
        (["--summary-file", "/proc/nope/x"], "--summary-file /proc/nope/x is not writable"),
    ],
)
def test_impossible_runs_fail_before_any_rank_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], fragment: str
) -> None:
    out = tmp_path / "out"
    assert main(["run", str(write(tmp_path, VALID)), "--out", str(out), *flags]) == EXIT_USAGE
    assert fragment in capsys.readouterr().err
    assert not (out / "logs").exists()  # no rank was started
