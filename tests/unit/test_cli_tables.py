"""Which columns the kernel table shows (:func:`spx.cli.tables.kernel_columns`): a column that would
repeat another is left out and said once in the caption instead."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from spx.api import KernelPoint, KernelStatus
from spx.cli.common import PIPE_TABLE_MAX_WIDTH, PIPE_WIDTH, PipeConsole, make_console
from spx.cli.decision import print_report
from spx.cli.tables import kernel_columns, kernel_table
from spx_testing.factories import kernel_point

BASE = ["tokens", "rows/rank", "replicated µs", "split µs", "gather µs", "speedup", "spread %", "max error", "Δg µs"]
HOST = ["host rep µs", "host split µs", "Δh µs"]
SAME_HOST = "Δh = Δg at every point (the host issue times add nothing to the GPU spans)"


def timed(tokens: int, speedup: float, mode: str | None = "eager", host_factor: float | None = 1.0,
          interval: tuple[float, float] | None = None, any_prior: tuple[float, float] | None = None,
          split_us: float = 100.0) -> KernelPoint:
    """A point (split ``split_us``, replicated ``speedup·split_us``, Δg their difference) whose host issue times are
    ``host_factor`` × its GPU spans, Δh their difference (``None``: no host figures, as in the H20 table);
    ``interval``/``any_prior``: speedup intervals."""
    p = kernel_point(tokens, speedup)
    p = p.model_copy(update={"split_us": split_us, "replicated_us": speedup * split_us, "gather_us": split_us / 5,
                             "gpu_delta_us": split_us - speedup * split_us})
    update: dict[str, object] = {"execution": mode}
    if host_factor is not None:
        update |= {"replicated_host_us": p.replicated_us * host_factor, "split_host_us": p.split_us * host_factor,
                   "host_delta_us": (p.split_us - p.replicated_us) * host_factor}
    if interval:
        update |= {"speedup_low": interval[0], "speedup_high": interval[1]}
    if any_prior:
        update |= {"speedup_low_any_prior": any_prior[0], "speedup_high_any_prior": any_prior[1]}
    return p.model_copy(update=update)


def kernel(*points: KernelPoint) -> KernelStatus:
    return KernelStatus(points=list(points))


@pytest.mark.parametrize(("points", "columns", "notes"), [
    pytest.param([timed(8, 0.5), timed(2048, 1.9)], BASE,
                 [f"every point timed eager; {SAME_HOST}"], id="cpu-smoke-all-eager-host-equals-gpu"),
    pytest.param([timed(8, 0.5, "graph"), timed(2048, 1.9, "eager")], [*BASE, "mode"], [SAME_HOST],
                 id="mixed-modes-keep-mode"),
    # the replicated candidate's host issue time is 2× its GPU span at 8 tokens: Δh +0.0 where Δg is +50.0
    pytest.param([timed(8, 0.5, "eager").model_copy(update={"replicated_host_us": 100.0, "host_delta_us": 0.0}),
                  timed(2048, 1.9, "eager")], [*BASE, "mode", *HOST], [], id="host-differs-at-one-point"),
    pytest.param([timed(8, 0.5, "graph", host_factor=1.0001), timed(2048, 1.9, "graph")], BASE,
                 [f"every point timed graph; {SAME_HOST}"], id="differs-below-the-printed-precision"),
    pytest.param([timed(8, 0.5, None, None), timed(2048, 1.9, None, None)], BASE, [], id="no-host-figures"),
    pytest.param([timed(8, 0.5, None, None, (0.4, 0.6)), timed(2048, 1.9, None, None, (1.7, 2.1))],
                 [*BASE[:6], "95 % interval", *BASE[6:]], [], id="interval"),
    pytest.param([timed(8, 0.5, None, None).model_copy(update={"gpu_delta_low_us": 40.0, "gpu_delta_high_us": 60.0})],
                 [*BASE, "Δg 95 %"], [], id="delta-interval"),
    pytest.param([timed(8, 0.5, None, None).model_copy(update={"gpu_delta_us": None})], BASE[:-1], [],
                 id="no-deltas-an-h20-table"),
    pytest.param([timed(8, 0.5, None, None, (0.4, 0.6), (0.3, 0.7))],
                 [*BASE[:6], "95 % interval", "any prior", *BASE[6:]], [], id="interval-and-any-prior"),
    pytest.param([timed(8, 0.5, None, None, (0.4, 0.6), (0.4, 0.7))],
                 [*BASE[:6], "95 % interval", "any prior", *BASE[6:]], [], id="any-prior-differs-at-the-top-only"),
    pytest.param([timed(8, 0.5, None, None, (0.4, 0.6), (0.4, 0.6))],
                 [*BASE[:6], "95 % interval", *BASE[6:]], [], id="any-prior-equal-to-the-interval-is-dropped"),
])
def test_columns(points: list[KernelPoint], columns: list[str], notes: list[str]) -> None:
    assert kernel_columns(kernel(*points)) == (columns, notes)


def test_the_table_has_those_columns_and_the_note_under_the_callers_caption() -> None:
    table = kernel_table(kernel(timed(8, 0.5), timed(2048, 1.9)), caption="CPU smoke run")
    assert [str(c.header) for c in table.columns] == BASE
    assert table.caption == f"CPU smoke run\nevery point timed eager; {SAME_HOST}"
    assert [str(c) for c in table.columns[5].cells] == ["0.50×", "1.90×"]


def test_host_columns_show_the_host_figures() -> None:
    slow = timed(8, 0.5, "eager").model_copy(update={
        "replicated_host_us": 100.0, "split_host_us": 130.0, "host_delta_us": 30.0, "host_delta_low_us": 22.5,
        "host_delta_high_us": 41.0, "gpu_delta_low_us": 45.0, "gpu_delta_high_us": 55.0})
    table = kernel_table(kernel(slow))
    cells = {str(c.header): [str(x) for x in c.cells] for c in table.columns}
    assert cells["mode"] == ["eager"]
    assert cells["host rep µs"] == ["100.0"] and cells["host split µs"] == ["130.0"]
    assert cells["Δg µs"] == ["+50.0"] and cells["Δg 95 %"] == ["[+45.0, +55.0]"]  # split 100 − replicated 50 µs
    assert cells["Δh µs"] == ["+30.0"] and cells["Δh 95 %"] == ["[+22.5, +41.0]"]


def test_a_cpu_smoke_sweep_fits_in_120_columns() -> None:
    """The quickstart's shape (5 counts up to 2,048 tokens, CPU times in the 100,000s of µs, intervals)."""
    points = [timed(t, s, interval=(s * 0.7, s * 1.6), split_us=204_710.0 * t / 2048).model_copy(
        update={"iqr_pct": 96.7}) for t, s in [(8, 0.33), (32, 0.97), (128, 1.44), (512, 1.48), (2048, 1.91)]]
    out = io.StringIO()
    Console(file=out, width=200).print(kernel_table(kernel(*points), title="quickstart-cpu: TP2 on CPU"))
    assert max(len(line.rstrip()) for line in out.getvalue().splitlines()) <= 120


# Output that is not a terminal: text lines are never hard-wrapped -----------------------------------------------

LONG = "the split's host time includes a modelled all-gather issue time of " + "fifteen µs " * 30 + "(end)"


def _report(console: Console) -> None:
    print_report(console, KernelStatus(), verdict="Inconclusive", reasons=[LONG])


def _markup(console: Console) -> None:
    console.print(f"[bold yellow]{LONG}[/]", highlight=False)


def _plain(console: Console) -> None:
    console.print(LONG, highlight=False, markup=False)


@pytest.mark.parametrize("stderr", [False, True], ids=["stdout", "stderr"])
@pytest.mark.parametrize(("show", "line"), [(_report, f"  • {LONG}"), (_markup, LONG), (_plain, LONG)],
                         ids=["reason", "markup", "plain"])
def test_a_long_line_is_not_wrapped_when_not_a_terminal(
    capsys: pytest.CaptureFixture[str], stderr: bool, show: Callable[[Console], None], line: str
) -> None:
    assert len(LONG) > PIPE_WIDTH
    console = make_console(stderr=stderr)
    assert not console.is_terminal  # pytest captures both streams
    show(console)
    out = capsys.readouterr()
    assert line in (out.err if stderr else out.out).splitlines()


def test_a_table_wider_than_any_limit_is_laid_out_at_the_pipe_table_maximum() -> None:
    """Off a terminal a table grows to its natural width, but a free-text cell wraps at PIPE_TABLE_MAX_WIDTH."""
    buf = io.StringIO()
    console = PipeConsole(file=buf, width=40)
    table = Table("tokens", "note")
    table.add_row("8", LONG * 2)
    console.print(table)
    assert max(len(x) for x in buf.getvalue().splitlines()) == PIPE_TABLE_MAX_WIDTH
    assert console.width == 40  # only that table was laid out wider


def test_a_gpu_runs_table_keeps_every_figure_off_a_terminal() -> None:
    """A GPU run's table (graph/eager mode, host columns, both intervals: 15 columns) used to be squeezed into
    PIPE_WIDTH, and rich cropped its intervals to ``0.448–0.…`` in every log."""
    slow_host = {"replicated_host_us": 250.0, "host_delta_us": 146.5 - 250.0}
    points = [timed(6, 0.513, "graph", interval=(0.448, 0.599), any_prior=(0.424, 0.599), split_us=19.24),
              timed(8192, 1.45, "eager", interval=(1.385, 1.513), any_prior=(1.301, 1.513),
                    split_us=146.5).model_copy(update=slow_host)]
    table = kernel_table(kernel(*points), title="deepseek-v41-fused-wqa-wkv-tp8: TP8 on 1× NVIDIA H200")
    assert len(table.columns) == 15
    buf = io.StringIO()
    PipeConsole(file=buf, width=PIPE_WIDTH).print(table)
    out = buf.getvalue()
    assert "…" not in out
    assert "0.448–0.599" in out and "0.424–0.599" in out and "1.385–1.513" in out
    assert PIPE_WIDTH < max(len(x) for x in out.splitlines()) <= PIPE_TABLE_MAX_WIDTH


def test_a_narrow_table_keeps_the_pipe_width() -> None:
    buf = io.StringIO()
    PipeConsole(file=buf, width=PIPE_WIDTH).print(kernel_table(kernel(timed(8, 0.5), timed(2048, 1.9))))
    assert max(len(x) for x in buf.getvalue().splitlines()) < PIPE_WIDTH


@pytest.mark.parametrize(("measured", "listed", "text"), [
    (3, 5, "3 of 5 token counts"),
    (0, 5, "0 of 5 token counts"),
    (5, 5, "all 5 token counts, but the run stopped before it completed"),  # an interrupt after the sweep
    (0, 1, "0 of 1 token count"),
    (1, 1, "the 1 token count, but the run stopped before it completed"),
])
def test_a_partial_run_says_what_it_holds(measured: int, listed: int, text: str) -> None:
    from spx.cli.tables import partial_extent

    assert partial_extent(measured, listed) == text


# A terminal narrower than the table: columns are left out, no figure is cropped ---------------------------------

def _gpu_kernel() -> KernelStatus:
    slow_host = {"replicated_host_us": 250.0, "host_delta_us": 146.5 - 250.0}
    return kernel(timed(6, 0.513, "graph", interval=(0.448, 0.599), any_prior=(0.424, 0.599), split_us=19.24),
                  timed(8192, 1.45, "eager", interval=(1.385, 1.513), any_prior=(1.301, 1.513),
                        split_us=146.5).model_copy(update=slow_host))


@pytest.mark.parametrize(("width", "left_out"), [
    (None, []),
    (240, []),
    (130, ["rows/rank", "any prior"]),
    (120, ["rows/rank", "any prior"]),
    (100, ["rows/rank", "gather µs", "any prior", "spread %", "max error"]),
    (80, ["rows/rank", "gather µs", "any prior", "spread %", "max error", "mode", "host rep µs", "host split µs"]),
    (60, ["rows/rank", "gather µs", "95 % interval", "any prior", "spread %", "max error", "mode", "host rep µs",
          "host split µs"]),
    (30, ["rows/rank", "gather µs", "95 % interval", "any prior", "spread %", "max error", "mode", "host rep µs",
          "host split µs"]),  # the core columns stay even when they alone are wider
])
def test_a_narrow_terminal_leaves_columns_out_and_crops_no_figure(width: int | None, left_out: list[str]) -> None:
    table = kernel_table(_gpu_kernel(), width=width)
    every, _ = kernel_columns(_gpu_kernel())
    shown = [str(c.header) for c in table.columns]
    assert [n for n in every if n not in shown] == left_out
    buf = io.StringIO()
    Console(file=buf, width=width or 240, force_terminal=False).print(table)
    out = buf.getvalue()
    table_lines = [x for x in out.splitlines() if x.startswith(("┏", "│", "┃", "└"))]
    if width is None or width >= 50:  # below, the core columns alone are wider than the terminal
        assert "…" not in "\n".join(table_lines)
        assert max(len(x) for x in table_lines) <= (width or 240)
    assert width is not None and width < 50 or ("0.51×" in out and "1.45×" in out)
    if "95 % interval" in shown:
        assert "0.448–0.599" in out and "1.385–1.513" in out
    if left_out:
        assert f"left out at {width} columns: {', '.join(left_out)}" in " ".join(out.split())
    else:
        assert "left out" not in out


@pytest.mark.parametrize(("width", "left_out"), [
    (None, []),
    (200, []),
    (80, ["H20 shard µs", "f(M)", "f(shard)"]),
    (60, ["shard rows", "H20 repl. µs", "H20 split µs", "H20 shard µs", "f(M)", "f(shard)"]),
])
def test_the_prediction_table_leaves_inputs_out_before_it_crops_a_figure(width: int | None, left_out: list[str]) -> None:
    """``spx predict`` on an 80-column terminal cropped rows to ``│ 2,0… │ 256 │ 458… │``."""
    from spx.analysis.predict import predict_from_table
    from spx.cli.tables import PREDICTION_COLUMNS, prediction_table
    csv = (Path(__file__).resolve().parents[2] / "operator" / "spx" / "data" / "h20_tp8_fused_wqa_wkv.csv").read_text()
    rows = predict_from_table(csv, 8).rows
    table = prediction_table(rows, title="what-if", width=width)
    shown = [str(c.header) for c in table.columns]
    assert [n for n in PREDICTION_COLUMNS if n not in shown] == left_out
    buf = io.StringIO()
    Console(file=buf, width=width or 240).print(table)
    out = buf.getvalue()
    assert "…" not in out and "16,384" in out
    assert ("left out at" in out) is bool(left_out)
