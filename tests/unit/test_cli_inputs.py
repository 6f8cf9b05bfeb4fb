"""``spx report``, ``predict``, ``run`` and the parser on input a newcomer gets wrong, table-tested through the
real ``spx`` entry point on real files under ``tmp_path`` (nothing is measured: every case is refused or
re-analyses a made-up result)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_OK
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
