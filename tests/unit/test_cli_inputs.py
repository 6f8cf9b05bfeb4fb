"""``spx report``, ``predict``, ``run`` and the parser on input a newcomer gets wrong, table-tested through the
real ``spx`` entry point on real files under ``tmp_path`` (nothing is measured: every case is refused or
re-analyses a made-up result)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_OK, EXIT_USAGE
from spx.cli import main
from spx_testing.factories import kernel_result

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_dir(tmp_path: Path, name: str = "r1") -> Path:
    """A run's output directory holding a result.json (a made-up sweep whose split wins from ~100 tokens)."""
    out = tmp_path / name
    out.mkdir()
    (out / "result.json").write_text(kernel_result().model_dump_json(by_alias=True))
    return out


# ---------------------------------------------------------------- 4. report never replaces a run's own plot


def test_report_keeps_the_runs_own_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_dir(tmp_path)
    (out / "crossover.png").write_bytes(b"the run's own plot")
    assert main(["report", str(out)]) == EXIT_OK
    assert (out / "crossover.png").read_bytes() == b"the run's own plot"
    assert f"plot: {out / 'crossover.png'} (the run's own, kept; --plot PATH draws this report's)" in capsys.readouterr().out
    # asked for by path, it is drawn (there too)
    assert main(["report", str(out), "--plot", str(out / "crossover.png")]) == EXIT_OK
    assert (out / "crossover.png").read_bytes()[:8] == PNG_MAGIC


def test_report_draws_the_plot_a_run_lacks(tmp_path: Path) -> None:
    out = run_dir(tmp_path)
    assert main(["report", str(out)]) == EXIT_OK
    assert (out / "crossover.png").read_bytes()[:8] == PNG_MAGIC


def test_the_readme_report_command_leaves_the_run_as_committed(tmp_path: Path) -> None:
    """README's `spx report examples/results/h200-1gpu/humming-dense`, on a copy (a regression must not dirty the
    checkout): every file of the run directory, its plot included, stays byte for byte what was committed."""
    import shutil

    run = shutil.copytree(REPO / "examples" / "results" / "h200-1gpu" / "humming-dense", tmp_path / "humming-dense")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert "crossover.png" in before
    assert main(["report", str(run)]) == EXIT_OK
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


# ---------------------------------------------------------------- 5. a plot asked for by path that cannot be written


@pytest.mark.parametrize(("plot", "fragment"), [
    ("afile/x.png", "afile is a file, not a directory"),
    ("afile/deeper/x.png", "afile is a file, not a directory"),
    ("adir", "is a directory; give the PNG file to write"),
    ("/proc/nope.png", "cannot write the plot: /proc/nope.png: "),
], ids=["under a file", "deeper under a file", "a directory", "/proc"])
def test_report_plot_that_cannot_be_written_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], plot: str, fragment: str
) -> None:
    monkeypatch.chdir(tmp_path)
    out = run_dir(tmp_path)
    Path("afile").write_text("a file")
    Path("adir").mkdir()
    assert main(["report", str(out), "--plot", plot]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert f"--plot {plot}" in captured.err and fragment in captured.err, captured.err
    assert "Error" not in captured.err and "plot not drawn" not in captured.out  # no exception class names
    assert not (out / "crossover.png").exists()


def test_report_plot_and_no_plot_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_dir(tmp_path)
    assert main(["report", str(out), "--no-plot", "--plot", str(tmp_path / "foo.png")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--plot" in err and "--no-plot" in err and "contradict" in err
    assert not (tmp_path / "foo.png").exists()


def test_report_plot_into_a_new_folder_is_drawn(tmp_path: Path) -> None:
    out = run_dir(tmp_path)
    assert main(["report", str(out), "--plot", str(tmp_path / "new" / "p.png")]) == EXIT_OK
    assert (tmp_path / "new" / "p.png").read_bytes()[:8] == PNG_MAGIC


# ---------------------------------------------------------------- 6. predict: a run directory, a result where a CSV goes


def test_predict_measured_takes_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "humming"  # a real one-GPU run (a modelled gather: its shard GEMMs were measured)
    out.mkdir()
    (out / "result.json").write_bytes((REPO / "examples" / "results" / "h200-1gpu" / "humming" / "result.json").read_bytes())
    assert main(["predict", "--measured", str(out), "-o", "json"]) == EXIT_OK
    by_dir = json.loads(capsys.readouterr().out)
    assert main(["predict", "--measured", str(out / "result.json"), "-o", "json"]) == EXIT_OK
    by_file = json.loads(capsys.readouterr().out)
    assert by_dir["prediction"] == by_file["prediction"]
    assert by_dir["prediction"]["breakEvenTokens"] is not None


@pytest.mark.parametrize(("args", "fragment"), [
    (["--measured", "{empty}"], "--measured {empty}: the directory has no result.json"),
    (["{run}/result.json"], "{run}/result.json is a run's result (JSON), not a CSV kernel table: pass it as "
                            "--measured {run}/result.json"),
    (["{run}"], "{run} is a directory, not a CSV kernel table: a run directory goes to --measured {run}"),
    (["{other}"], "{other} is JSON, not a CSV kernel table"),
    (["--measured", "{other}"], "--measured {other} is not a spx result document (a run's result.json): spec: "
                                "required: add it"),
], ids=["dir without result", "result as CSV", "dir as CSV", "other JSON as CSV", "other JSON as result"])
def test_predict_names_what_the_file_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    paths = {"run": str(run_dir(tmp_path)), "empty": str(tmp_path / "empty"), "other": str(tmp_path / "a.json")}
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.json").write_text('{"a": 1}')
    assert main(["predict", *(a.format(**paths) for a in args)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment.format(**paths) in err and "header" not in err and "['" not in err, err


# ---------------------------------------------------------------- 7. -o json|yaml errors are documents, as validate's


def _schema_check(doc: object, name: str) -> None:
    import jsonschema

    schema = json.loads((REPO / "docs" / "schemas" / name).read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(("args", "schema", "fragment"), [
    (["report", "{tmp}/nope"], "report.schema.json", "nope does not exist"),
    (["report", "{tmp}/bad.json"], "report.schema.json", "bad.json is not JSON"),
    (["report", "{tmp}/r1", "--plot", "{tmp}/afile/x.png"], "report.schema.json", "afile is a file, not a directory"),
    (["report", "{tmp}/r1", "--threshold-tokens", "-5"], "report.schema.json", "spec.gate.thresholdTokens"),
    (["predict", "{tmp}/r1/result.json"], "predict.schema.json", "result.json is a run's result (JSON), not a CSV"),
    (["predict", "--measured", "{tmp}/nope"], "predict.schema.json", "cannot read"),
    (["predict", "--tp", "0"], "predict.schema.json", "--tp must be >= 1"),
    (["validate", "{tmp}/nope"], "validate.schema.json", "cannot read"),
], ids=["report: no such dir", "report: not JSON", "report: bad --plot", "report: bad threshold", "predict: result as CSV",
        "predict: no --measured file", "predict: bad --tp", "validate: no such file"])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_errors_are_documents_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], schema: str, fragment: str, fmt: str
) -> None:
    import yaml

    run_dir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "afile").write_text("a file")
    assert main([*(a.format(tmp=tmp_path) for a in args), "-o", fmt]) == EXIT_USAGE
    out = capsys.readouterr().out
    doc = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    _schema_check(doc, schema)
    problems = doc["problems"]
    assert any(fragment in p for p in problems), problems
    assert doc.get("valid", False) is False and "prediction" not in doc and "verdict" not in doc


# ---------------------------------------------------------------- 8. run: --tokens entries, --vllm without --serving


@pytest.mark.parametrize(("args", "fragments"), [
    (["--tokens", "8,,32"], ["--tokens '8,,32'", "entry 2 of 3 is empty"]),
    (["--tokens", "8,32,"], ["--tokens '8,32,'", "entry 3 of 3 is empty"]),
    (["--tokens", ",8"], ["entry 1 of 2 is empty"]),
    (["--tokens", ""], ["--tokens: no token counts given"]),
    (["--tokens", "8,x"], ["--tokens: 'x' is not a whole number"]),
    (["--vllm", "python -m vllm"], ["--vllm 'python -m vllm'", "--serving"]),
], ids=["double comma", "trailing comma", "leading comma", "empty", "not a number", "--vllm without --serving"])
def test_run_refuses_what_it_would_silently_drop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragments: list[str]
) -> None:
    out = tmp_path / "out"
    assert main(["run", str(QUICKSTART), "--out", str(out), *args]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert all(f in err for f in fragments), err
    assert not out.exists()  # refused before anything started


def test_spaces_around_token_commas_are_still_fine() -> None:
    from spx.cli import parse_tokens

    assert parse_tokens("6, 12 ,24") == [6, 12, 24]


# ---------------------------------------------------------------- 9. an unexpected argument shows the subcommand's usage


@pytest.mark.parametrize("args", [
    ["crd", "extra"],
    ["validate", "a.yaml", "b.yaml"],
    ["report", "d1", "d2"],
    ["predict", "a.csv", "b.csv"],
    ["gate", "a", "b"],
    ["completion", "bash", "zsh"],
    ["run", "a.yaml", "--out", "o", "extra"],
], ids=lambda a: " ".join(a[:2]))
def test_an_unexpected_argument_shows_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"usage: spx {args[0]} ") and f"spx {args[0]}: error: unrecognized arguments: " in err, err


# ---------------------------------------------------------------- an --out whose lock file cannot be created


def test_an_out_whose_lock_file_is_a_folder_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``OUT/.spx.lock`` is a folder: the lock cannot be created; exit 3 with the option, the reason and the fix
    (it was an ``IsADirectoryError`` traceback, exit 1)."""
    out = tmp_path / "out"
    (out / ".spx.lock").mkdir(parents=True)
    assert main(["run", str(QUICKSTART), "--out", str(out), "--tokens", "8"]) == EXIT_USAGE
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: --out {out} is not writable: Is a directory" in err, err
    assert f"remove the folder {out / '.spx.lock'}, or choose another --out" in err
    assert [p.name for p in out.iterdir()] == [".spx.lock"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_out_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main(["run", str(QUICKSTART), "--out", str(out), "--tokens", "8"]) == EXIT_USAGE
    finally:
        out.chmod(0o755)
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: --out {out} is not writable: Permission denied" in err, err
    assert f"make {out} writable, or choose another --out" in err


# ---------------------------------------------------------------- an endless input is read only up to the limit


@pytest.mark.parametrize("stdin", [False, True], ids=["path", "stdin"])
def test_an_endless_input_is_refused_after_the_limit_plus_one_byte(
    stdin: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``spx validate /dev/zero`` and ``spx validate - </dev/zero`` read GBs before the 256 KiB limit was checked;
    now they read 256 KiB + 1 byte and stop (the test ends because the read is bounded: /dev/zero never ends)."""
    with open("/dev/zero", encoding="utf-8") as zero:
        if stdin:
            monkeypatch.setattr(sys, "stdin", zero)
        assert main(["validate", "-" if stdin else "/dev/zero"]) == EXIT_USAGE
    err = " ".join(capsys.readouterr().err.split())
    name = "<stdin>" if stdin else "/dev/zero"
    assert f"error: {name}: more than 262,144 bytes (read no further), over the 262,144-byte limit of an " \
           "experiment YAML" in err, err


def test_a_run_set_aside_by_a_killed_overwrite_is_never_deleted_unasked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``--overwrite`` run SIGKILLed before it settled leaves the earlier run in OUT/.spx-replaced: the next
    run into OUT (with or without --overwrite) is refused and says how to keep it or let it go."""
    out = tmp_path / "out"
    aside = out / ".spx-replaced"
    aside.mkdir(parents=True)
    (aside / "status.json").write_text('{"phase": "Succeeded"}')  # the earlier, finished run
    (out / "points.partial.jsonl").write_text("")  # what the killed run had written
    spec = tmp_path / "ok.yaml"
    spec.write_text((Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml").read_text())
    for extra in ([], ["--overwrite"]):
        assert main(["run", str(spec), "--out", str(out), "--tokens", "8", *extra]) == EXIT_USAGE
        err = " ".join(capsys.readouterr().err.split())
        assert "set aside" in err and "killed" in err and "move the files" in err and "delete" in err
    assert (aside / "status.json").read_text() == '{"phase": "Succeeded"}'


DEEP = '{"points":' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize("argv", [
    ["report", "{d}", "--no-plot"], ["gate", "{d}/result.json"], ["gate", "{d}"], ["predict", "--measured", "{d}"],
], ids=["report", "gate-result", "gate-dir", "predict-measured"])
def test_json_nested_past_any_document_is_refused_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """100,000 nested lists: json.loads raises RecursionError, which used to escape as a traceback (exit 1)."""
    for name in ("result.json", "status.json"):
        (tmp_path / name).write_text(DEEP)
    assert main([a.format(d=tmp_path) for a in argv]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "nests deeper" in err and "Traceback" not in err


@pytest.mark.parametrize("existing", [
    "experiment", '{"schemaVersion": "spx.dev/kernel/v3", "points": []}', "notes I keep\n",
], ids=["the-experiment-itself", "a-runs-result", "any-other-file"])
def test_summary_file_never_replaces_what_is_not_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], existing: str
) -> None:
    spec = tmp_path / "ok.yaml"
    spec.write_text((Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml").read_text())
    target = spec if existing == "experiment" else tmp_path / "file.json"
    before = target.read_text() if existing == "experiment" else existing
    target.write_text(before)
    code = main(["run", str(spec), "--out", str(tmp_path / "out"), "--tokens", "8", "--summary-file", str(target)])
    assert code == EXIT_USAGE
    assert "--summary-file" in capsys.readouterr().err
    assert target.read_text() == before
    assert not (tmp_path / "out").exists()  # refused before --out was made


def test_summary_file_replaces_an_earlier_summary_and_fills_an_empty_file(tmp_path: Path) -> None:
    from spx.api.result import SUMMARY_SCHEMA_VERSION
    from spx.cli.run import check_writable

    earlier = tmp_path / "summary.json"
    earlier.write_text(json.dumps({"schemaVersion": SUMMARY_SCHEMA_VERSION, "verdict": "Pass"}))
    empty = tmp_path / "termination-log"
    empty.write_text("")
    check_writable(str(earlier))
    check_writable(str(empty))
    check_writable(str(tmp_path / "new.json"))


def test_report_and_gate_on_a_run_in_progress_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """While a run holds --out's lock its status.json does not exist yet: report says a run is in progress
    (exit 3), gate says it is undecided (exit 2, so --wait polls on) — not "no such file" (exit 3)."""
    from spx.cli.gate import EXIT_UNDECIDED, read_and_decide
    from spx.rundir import RunDirectory

    out = tmp_path / "run"
    with RunDirectory(out).locked():
        (out / "points.partial.jsonl").write_text('{"tokens": 8}\n')
        assert main(["report", str(out), "--no-plot"]) == EXIT_USAGE
        assert f"a run is in progress in {out} (pid {os.getpid()}" in " ".join(capsys.readouterr().err.split())
        for target in (str(out), str(out / "status.json")):
            result = read_and_decide(target)
            assert result.exit_code == EXIT_UNDECIDED and not result.decided and result.retry
            assert "a run is in progress" in result.message
    assert RunDirectory(out).in_progress() is None  # released


def test_report_of_a_killed_run_points_at_its_partial_points(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "killed"
    out.mkdir()
    (out / "points.partial.jsonl").write_text('{"tokens": 8}\n{"tokens": 32}\n')
    assert main(["report", str(out), "--no-plot"]) == EXIT_USAGE
    err = " ".join(capsys.readouterr().err.split())
    # (a killed run's valid points are reported: tests/cli/test_files_and_processes.py runs one on a full disk)
    assert "points.partial.jsonl holds no valid point (2 line(s) that are not one)" in err


@pytest.mark.parametrize("inner", ["logs/sub", "nested/deeper"])
def test_an_out_inside_another_runs_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], inner: str
) -> None:
    """``--out A/logs/sub``: a later ``--overwrite`` of A deletes A/logs wholesale, the inner run with it."""
    outer = tmp_path / "A"
    (outer / "logs").mkdir(parents=True)
    (outer / "status.json").write_text('{"phase": "Succeeded"}')
    spec = tmp_path / "ok.yaml"
    spec.write_text((Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml").read_text())
    assert main(["run", str(spec), "--out", str(outer / inner), "--tokens", "8"]) == EXIT_USAGE
    err = " ".join(capsys.readouterr().err.split())
    assert f"is inside the run directory {outer}" in err
    assert not (outer / inner).exists()
