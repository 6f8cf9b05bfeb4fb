"""Small inputs a newcomer's break-it pass got through: ``spx gate --wait nan``, ``--json`` with another ``-o``,
``--tokens`` in digits other than 0-9. Through the real ``spx`` entry point; nothing is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_USAGE
from spx.cli import main
from spx_testing.factories import kernel_result

QUICKSTART = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml")


def run_dir(tmp_path: Path) -> Path:
    """A run directory with a made-up result.json."""
    out = tmp_path / "r1"
    out.mkdir()
    (out / "result.json").write_text(kernel_result().model_dump_json(by_alias=True))
    return out


@pytest.mark.parametrize(("args", "message"), [
    (["--wait", "nan"], "error: --wait must be a number of seconds >= 0, e.g. --wait 600 (got nan)"),
    (["--wait", "inf"], "error: --wait must be a number of seconds >= 0, e.g. --wait 600 (got inf)"),
    (["--wait", "-1"], "error: --wait must be a number of seconds >= 0, e.g. --wait 600 (got -1.0)"),
    (["--wait", "5", "--interval", "nan"],
     "error: --interval must be a number of seconds > 0, e.g. --interval 10 (got nan)"),
    (["--json", "-o", "yaml"], "error: --json and -o yaml contradict each other: give one of them (--json is -o json)"),
    (["--json", "-o", "text"], "error: --json and -o text contradict each other: give one of them (--json is -o json)"),
], ids=["wait nan", "wait inf", "wait negative", "interval nan", "json and yaml", "json and text"])
def test_gate_refuses_bad_wait_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          message: str) -> None:
    assert main(["gate", str(run_dir(tmp_path)), *args]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.err.strip() == message and captured.out == ""


def test_gate_json_with_o_json_is_one_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    main(["gate", str(run_dir(tmp_path)), "--json", "-o", "json"])
    assert json.loads(capsys.readouterr().out)["schemaVersion"] == "spx.dev/cli-gate/v1"


@pytest.mark.parametrize("tokens", ["٣٢", "32,１２８", "1_000", "+-5"])
def test_run_tokens_take_ascii_digits_only(tmp_path: Path, capsys: pytest.CaptureFixture[str], tokens: str) -> None:
    assert main(["run", QUICKSTART, "--out", str(tmp_path / "o"), "--tokens", tokens]) == EXIT_USAGE
    bad = tokens.split(",")[-1]
    assert f"error: --tokens: {bad!r} is not a whole number in the digits 0-9" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_progress_counts_the_listed_token_counts_and_says_what_refine_may_add() -> None:
    """2 listed counts and sweep.refine's up to 8: ``for 2 token counts (+ up to 8 …)``, ``[1/2]``, ``[+1 …]``."""
    import io

    from spx.cli.progress import LineProgress
    from spx_testing.factories import point_result

    stream = io.StringIO()
    progress = LineProgress(stream)
    progress.start(2, 2, "cpu", None, added=8)
    for tokens, added in ((8, None), (512, None), (250, "bracket 8–512")):
        progress.point(point_result(tokens, [10.0, 11.0], [12.0, 13.0], tp=2, added_because=added))
    lines = [line.split(": replicated")[0] for line in stream.getvalue().splitlines()]
    assert lines == ["spx: starting 2 cpu rank(s) for 2 token counts (+ up to 8 added by sweep.refine)",
                     "spx: [1/2] tokens=8", "spx: [2/2] tokens=512", "spx: [+1 sweep.refine] tokens=250"]
    progress.start(4, 2, "cpu", None)
    assert stream.getvalue().splitlines()[-1] == "spx: starting 2 cpu rank(s) for 4 token counts"


def test_spx_serving_help_names_the_step_ab(capsys: pytest.CaptureFixture[str]) -> None:
    """``spx serving --help`` (and ``spx --help``) say it runs the step A/B too (issue 37: it did not)."""
    for argv in (["serving", "--help"], ["--help"]):
        assert main(argv) == 0
        assert "GSM8K and the step A/B" in " ".join(capsys.readouterr().out.split())


def test_a_cpu_runs_plot_legend_says_cpu_wall_time(tmp_path: Path) -> None:
    """A CPU smoke run's plot legends said "GPU span" (issue 37); its times are the host's wall time. Drawn as
    SVG with its text kept as text (``svg.fonttype: none``), so the legend can be read back."""
    import matplotlib

    from spx.analysis import points_from_result
    from spx.api.status import KernelStatus
    from spx.cli.plot import plot_crossover

    kernel = KernelStatus(points=points_from_result(kernel_result()))
    for cpu, wanted, other in ((True, "CPU wall time", "GPU span"), (False, "GPU span", "CPU wall time")):
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            svg = plot_crossover(kernel, tmp_path / f"{cpu}.svg", title="t", cpu=cpu).read_text()
        assert f"replicated ({wanted})" in svg and other not in svg


def test_stderr_degrades_characters_under_an_ascii_encoding() -> None:
    """``PYTHONIOENCODING=ascii``: the progress lines on stderr read ``~ 14 s`` and ``183.9 us``; they read
    ``\\u2248 14 s`` and ``183.9 \\xb5s`` (Python's stderr escapes what it cannot encode, issue 37)."""
    import os
    import subprocess
    import sys

    code = ("import sys; from spx.cli.streams import degrade_unencodable_characters as d; d(); "
            "sys.stderr.write('estimate \\u2248 14 s, 183.9 \\u00b5s, 432 MiB \\u00d7 2\\n')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert proc.stderr == b"estimate ~ 14 s, 183.9 us, 432 MiB x 2\n", proc.stderr
