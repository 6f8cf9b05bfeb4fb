"""Every command's exit codes come from the one table (``spx.api.exit_codes``); docs/cli.md's synopses and
per-command codes are generated from the argparse parsers and that table (``spx.cli.reference``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spx.api.exit_codes import COMMAND_CODES, COMMAND_MEANINGS, EXIT_FAIL, EXIT_OK, EXIT_PIPE, EXIT_USAGE, TABLE
from spx.cli import build_parser
from spx.cli.reference import render, synopsis

REPO = Path(__file__).resolve().parents[2]
SPX = str(Path(sys.executable).with_name("spx"))
HEAD = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n"
NO_SERVING = HEAD + "metadata: {name: plain}\nspec:\n  kernel: {device: cpu}\n"


def spx(*args: str, stdin: str | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}
    return subprocess.run([SPX, *args], capture_output=True, text=True, timeout=120, input=stdin, env=env, cwd=cwd)


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# spx serving and spx gate: usage errors are 3 ------------------------------------------------------------------


def test_serving_usage_errors_exit_3(tmp_path: Path) -> None:
    missing = spx("serving", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o"))
    assert missing.returncode == EXIT_USAGE and "cannot read" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + "metadata: {name: bad}\nspec: {kernel: {samples: 1}}\n")
    invalid = spx("serving", str(bad))
    assert invalid.returncode == EXIT_USAGE and "spec.kernel.samples" in invalid.stderr
    plain = tmp_path / "plain.yaml"
    plain.write_text(NO_SERVING)
    no_serving = spx("serving", str(plain), "--out", str(tmp_path / "o"))
    assert no_serving.returncode == EXIT_USAGE and "has no spec.serving" in no_serving.stderr
    assert "Traceback" not in missing.stderr + invalid.stderr + no_serving.stderr


def test_gate_on_a_missing_path_is_an_error_naming_it_as_given(tmp_path: Path) -> None:
    proc = spx("gate", "./nonexistent", cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE
    assert "./nonexistent" in proc.stderr and "Undecided" not in proc.stdout + proc.stderr
    assert proc.stderr.startswith("error:")


# One table ---------------------------------------------------------------------------------------------------


def test_every_command_has_its_codes_in_the_table_and_its_help() -> None:
    names = {code for code, _, _ in TABLE}
    parsers = subparsers()
    assert set(parsers) == set(COMMAND_CODES)
    for cmd, parser in parsers.items():
        assert set(COMMAND_CODES[cmd]) <= names and EXIT_OK in COMMAND_CODES[cmd]
        epilog = parser.epilog or ""
        listed = {int(line.split()[0]) for line in epilog.splitlines()[1:]}
        assert listed == set(COMMAND_CODES[cmd]), (cmd, epilog)


INTERNAL = "70  an internal error (a bug in spx; the message says where); never a verdict"
PIPE = "141  stdout closed by its reader before spx finished writing: output stopped quietly, as SIGPIPE would"


@pytest.mark.parametrize(("cmd", "rows"), [
    ("validate", ["0  the file is a valid experiment (printed normalised)",
                  "3  the file is invalid or unreadable (every problem is listed)",
                  INTERNAL, "130  interrupted (Ctrl-C)",
                  PIPE]),
    ("crd", ["0  the CRD was printed", "3  bad option", INTERNAL,
             PIPE]),
    ("completion", ["0  the completion script was printed", "3  bad option (a shell it does not know)",
                    INTERNAL,
                    PIPE]),
    ("gate", ["0  the experiment decided Pass", "1  the experiment decided Fail",
              "2  Inconclusive, not decided yet, or decided without a verdict",
              "3  bad option or input: no such experiment or status.json",
              "4  the cluster could not be reached or refused access",
              INTERNAL, "130  interrupted (Ctrl-C)",
              PIPE]),
    ("operator", ["0  the operator stopped", "3  bad option", "4  the cluster could not be reached or refused access",
                  INTERNAL,
                  "78  the installed CRD is not the one it was built for (the message names the fix)",
                  "130  interrupted (Ctrl-C)"]),
])
def test_each_help_lists_only_its_own_codes_in_its_own_words(
    cmd: str, rows: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from spx.cli import main

    assert main([cmd, "--help"]) == EXIT_OK
    text = capsys.readouterr().out
    listed = [line.strip() for line in text.split("\nexit codes:\n", 1)[1].splitlines()]
    assert listed == rows


def test_no_help_speaks_of_another_commands_codes() -> None:
    """Every subcommand's epilog is about that command: none names another ``spx`` command."""
    parsers = subparsers()
    for cmd, parser in parsers.items():
        epilog = parser.epilog or ""
        for other in parsers:
            assert other == cmd or f"spx {other}" not in epilog, (cmd, epilog)
        assert set(COMMAND_MEANINGS.get(cmd, {})) <= set(COMMAND_CODES[cmd])


# docs/cli.md -------------------------------------------------------------------------------------------------


def test_docs_cli_md_is_generated_from_the_parsers() -> None:
    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert doc == render(doc), "docs/cli.md is stale: run `python -m spx.cli.reference docs/cli.md`"


@pytest.mark.parametrize(("cmd", "options"), [
    ("run", ["--overwrite", "--gemm-backend", "--samples", "--summary-file", "--vllm"]),
    ("report", ["--plot", "--no-plot"]),
    ("predict", ["--interpolation", "--rounding", "--gather", "--measured"]),
])
def test_synopses_list_every_option(cmd: str, options: list[str]) -> None:
    line = synopsis(subparsers()[cmd])
    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert line in doc
    for option in options:
        assert option in line, line


# A spec on standard input ------------------------------------------------------------------------------------


def test_validate_reads_standard_input() -> None:
    ok = spx("validate", "-", stdin=NO_SERVING)
    assert ok.returncode == EXIT_OK and "name: plain" in ok.stdout and "<stdin>: valid" in ok.stderr
    bad = spx("validate", "-", stdin=HEAD + "metadata: {name: b}\nspec: {kernel: {samples: 1}}\n")
    assert bad.returncode == EXIT_USAGE and "<stdin>" in bad.stderr and "spec.kernel.samples" in bad.stderr


# The quickstart's docs ---------------------------------------------------------------------------------------


def test_first_experiment_sets_up_only_what_the_quickstart_needs() -> None:
    doc = (REPO / "docs" / "first-experiment.md").read_text(encoding="utf-8")
    first_block = doc.split("```bash", 1)[1].split("```", 1)[0]
    setup = [ln for ln in first_block.splitlines() if "setup.sh" in ln]
    assert setup and all("setup.sh --quickstart" in ln for ln in setup), setup


def test_the_quickstart_time_is_stated_as_measured() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    head = readme.split("bash scripts/quickstart.sh", 1)[0]
    assert "~10 s" not in head and "measured" in head
    doc = (REPO / "docs" / "first-experiment.md").read_text(encoding="utf-8")
    assert "~10 s" not in doc and "Measured:" in doc


# A reader that closes stdout early (`| head -1`) ---------------------------------------------------------------

#: An experiment whose normalised form is far over a pipe's 64 KiB buffer: spx is still writing when the reader goes.
BIG = NO_SERVING.replace("metadata: {name: plain}", "metadata: {name: plain, annotations: {note: " + "x" * 100_000 + "}}")


@pytest.mark.parametrize(("args", "first_line"), [
    (["crd"], "# Generated by `spx crd` from spx.api; do not edit by hand."),
    (["validate", "{big}", "-o", "yaml"], "schemaVersion: spx.dev/cli-validate/v1"),
    (["validate", "{big}", "-o", "json"], "{"),
    (["validate", "{big}"], "apiVersion: bench.spx.dev/v1alpha1"),
])
def test_a_closed_stdout_stops_quietly_with_141(tmp_path: Path, args: list[str], first_line: str) -> None:
    """`spx … | head -1`: stdout is a pipe whose reader reads one line and closes it while spx still writes;
    spx prints nothing (no traceback, no "Exception ignored") and exits 141 = 128 + SIGPIPE."""
    big = tmp_path / "big.yaml"
    big.write_text(BIG)
    # PYTHONUNBUFFERED makes CPython's text stdout drop a short write silently instead of raising EPIPE
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT") and k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-m", "spx", *(a.format(big=big) for a in args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0, env=env, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()  # unbuffered: reads up to the newline and no further
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_PIPE, err
    assert line.decode().rstrip("\n") == first_line
    assert err == ""


@pytest.mark.parametrize("args", [["report", "{run}", "--no-plot"], ["predict"], ["validate", "{big}"], ["crd"]],
                         ids=["report", "predict", "validate", "crd"])
def test_every_command_exits_141_on_a_stdout_closed_before_it_writes(tmp_path: Path, args: list[str]) -> None:
    """The reader has gone before the first byte (a pipe whose read end is closed): every write fails, so the
    outcome does not depend on a pipe buffer or on timing. rich's consoles used to turn the broken pipe into
    ``SystemExit(1)`` ("Fail") for ``spx report`` and ``spx predict``; every command exits 141 now, silently."""
    from spx_testing.factories import kernel_result

    big = tmp_path / "big.yaml"
    big.write_text(BIG)
    (tmp_path / "result.json").write_text(kernel_result(tp=2).model_dump_json(by_alias=True))
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}
    try:
        proc = subprocess.run([SPX, *(a.format(big=big, run=tmp_path) for a in args)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, env=env, cwd=REPO)
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_PIPE, proc.stderr
    assert proc.stderr == ""


def test_serving_never_replaces_earlier_results_unasked(tmp_path: Path) -> None:
    """A second ``spx serving`` into the same --out is refused (its results cost GPU-hours); --overwrite replaces
    them. ``--vllm /bin/false``: the CLI exits at once, so every measurement fails fast (exit 1), files written."""
    exp, out = str(REPO / "examples" / "deepseek-v41-tp8.yaml"), tmp_path / "srv"
    first = spx("serving", exp, "--out", str(out), "--vllm", "/bin/false")
    assert first.returncode == EXIT_FAIL, first.stderr
    before = (out / "serving-result.json").read_bytes()
    again = spx("serving", exp, "--out", str(out), "--vllm", "/bin/false")
    assert again.returncode == EXIT_USAGE and "already holds serving results" in again.stderr and "--overwrite" in again.stderr
    assert (out / "serving-result.json").read_bytes() == before
    replaced = spx("serving", exp, "--out", str(out), "--vllm", "/bin/false", "--overwrite")
    assert replaced.returncode == EXIT_FAIL
    assert (out / "serving-result.json").read_bytes() != before
