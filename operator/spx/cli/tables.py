"""Human-readable rendering of a kernel sweep: the rich table, the crossover lines, the verdict.

Used by ``spx run``, ``spx report`` and ``spx predict``; pure presentation (no analysis here: give it
a :class:`~spx.api.KernelStatus` that :func:`spx.analysis.judge.judge` produced). A partial run is
labelled as such in the table caption and the verdict line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from spx.api import KernelPoint, KernelStatus
from spx.api.status import KernelRegime, RegimeSummary, StakeRow
from spx.vocabulary import Verdict

if TYPE_CHECKING:
    from spx.analysis.predict import PredictedRow


#: The style of each verdict (every verdict of :data:`spx.vocabulary.VERDICTS`; a test checks).
VERDICT_STYLE: dict[Verdict, str] = {"Pass": "bold green", "Fail": "bold red", "Inconclusive": "bold yellow"}


def terminal_width(console: Console) -> int | None:
    """``console``'s width when it is a terminal (tables fit it), else ``None`` (pipes and files get every column)."""
    return console.width if console.is_terminal else None


def _esc(text: str | None) -> str | None:
    return None if text is None else escape(text)


def fmt_us(value: float | None) -> str:
    """µs with a precision that suits the magnitude; ``—`` when unknown."""
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_tokens(value: float | None) -> str:
    """A token count: integral or ≥ 100 without decimals (thousands separated), else one decimal; ``—`` when unknown."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:.1f}"


def fmt_error(value: float | None) -> str:
    """A max abs error with three significant digits; ``—`` when unknown."""
    return "—" if value is None else f"{value:.3g}"


def fmt_interval(low: float | None, high: float | None) -> str:
    """A speedup interval ``[low–high]`` with three decimals; ``—`` when unknown."""
    return "—" if low is None or high is None else f"{low:.3f}–{high:.3f}"


def partial_extent(measured: int, listed: int) -> str:
    """What a partial run's table caption says it holds, from how many of the sweep's ``listed`` token
    counts were ``measured``: ``3 of 5 token counts``, or, when every listed count was measured before the
    run stopped (an interrupt during the stage or the serving A/B, an adaptive refinement cut short),
    ``all 5 token counts, but the run stopped before it completed``."""
    counts = f"token count{'' if listed == 1 else 's'}"
    if measured >= listed:
        return f"{'the' if listed == 1 else 'all'} {listed} {counts}, but the run stopped before it completed"
    return f"{measured} of {listed} {counts}"


def host_deltas_differ(points: Sequence[KernelPoint]) -> bool:
    """Whether some point has a host difference Δh that prints differently from its GPU difference Δg: only
    then do the table and the plot show Δh and the host issue medians (a CPU smoke run, whose timer is the
    host, never does)."""
    return any(p.host_delta_us is not None and fmt_delta(p.host_delta_us) != fmt_delta(p.gpu_delta_us)
               for p in points)


def fmt_delta(value: float | None) -> str:
    """A signed difference in µs (split − replicated; negative: the split is shorter): one decimal below 100 µs,
    none from 100 µs (a CPU smoke run's thousands stay narrow); ``—`` when unknown."""
    if value is None:
        return "—"
    return f"{value:+.0f}" if abs(value) >= 100 else f"{value:+.1f}"


def fmt_delta_interval(low: float | None, high: float | None) -> str:
    """A difference's interval ``[low, high]`` in µs, signed (:func:`fmt_delta`); ``—`` when unknown."""
    return "—" if low is None or high is None else f"[{fmt_delta(low)}, {fmt_delta(high)}]"


def kernel_columns(kernel: KernelStatus) -> tuple[list[str], list[str]]:
    """``(column headers, caption notes)`` of :func:`kernel_table` for ``kernel``'s points.

    A column that would repeat another is left out and said once in a note instead: the host columns
    (``mode``, host issue medians, ``Δh µs`` and its interval) only when some point's Δh differs from its Δg
    (:func:`host_deltas_differ`); ``mode`` also when the points were timed in different modes; the
    intervals only when known, ``any prior`` only when one of its ends differs from the 95 % interval's.
    ``Δg µs`` is the split's GPU difference (split − replicated span, µs per call), ``Δh µs`` its host
    difference (split − replicated issue time): what the step moves by when the GPU, or the host, is the
    bottleneck.
    """
    points = kernel.points
    host = any(p.host_delta_us is not None for p in points)
    host_differs = host_deltas_differ(points)
    modes = sorted({p.execution for p in points if p.execution})
    show_mode = host_differs or len(modes) > 1
    intervals = any(p.speedup_low is not None for p in points)
    any_prior = any(p.speedup_low_any_prior is not None
                    and (p.speedup_low_any_prior, p.speedup_high_any_prior) != (p.speedup_low, p.speedup_high)
                    for p in points)
    gpu_delta = any(p.gpu_delta_us is not None for p in points)
    gpu_iv = any(p.gpu_delta_low_us is not None for p in points)
    host_iv = host_differs and any(p.host_delta_low_us is not None for p in points)
    names = ["tokens", "rows/rank", "replicated µs", "split µs", "gather µs", "speedup",
             *(["95 % interval"] if intervals else []), *(["any prior"] if any_prior else []), "spread %", "max error",
             *(["Δg µs"] if gpu_delta else []), *(["Δg 95 %"] if gpu_iv else []),
             *(["mode"] if show_mode else []),
             *(["host rep µs", "host split µs", "Δh µs"] if host_differs else []), *(["Δh 95 %"] if host_iv else [])]
    notes = []
    if modes and not show_mode:
        notes.append(f"every point timed {modes[0]}")
    if host and not host_differs:
        notes.append("Δh = Δg at every point (the host issue times add nothing to the GPU spans)")
    if host_differs and "graph" in modes:
        notes.append("graph points have one figure, Δg (a replay's host cost does not depend on what it holds)")
    return names, ["; ".join(notes)] if notes else []


#: The order in which :func:`kernel_table` leaves columns out when the terminal is too narrow for every one
#: (least needed first; the two host issue medians go together, so do the two differences' intervals); tokens,
#: replicated µs, split µs, speedup, Δg and Δh always stay.
NARROW_DROP_ORDER: tuple[tuple[str, ...], ...] = (
    ("any prior",), ("rows/rank",), ("max error",), ("gather µs",), ("spread %",), ("mode",),
    ("host rep µs", "host split µs"), ("Δg 95 %", "Δh 95 %"), ("95 % interval",))


def _cell_text(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _needed_width(name: str, cells: Sequence[str | Text]) -> int:
    """Columns a column needs without cropping: its longest cell, or its header's longest word (headers wrap)."""
    return max([len(w) for w in name.split()] + [len(_cell_text(c)) for c in cells])


def fit_columns(names: Sequence[str], rows: Sequence[dict[str, str | Text]], width: int,
                drop_order: Sequence[Sequence[str]] = NARROW_DROP_ORDER) -> list[str]:
    """The columns of ``names`` that fit ``width`` terminal columns with no cell cropped (1 border and 2
    padding per column, 1 closing border), leaving out the groups of ``drop_order`` first; the other
    columns stay even when they alone are wider."""
    kept = list(names)
    needed = {n: _needed_width(n, [r[n] for r in rows]) for n in names}

    def total() -> int:
        return sum(needed[n] + 3 for n in kept) + 1

    for group in drop_order:
        if total() <= width:
            break
        kept = [n for n in kept if n not in group]
    return kept


def fitted_table(names: Sequence[str], rows: Sequence[dict[str, str | Text]], *, width: int | None,
                 drop_order: Sequence[Sequence[str]], title: str | None = None,
                 notes: Sequence[str] = ()) -> Table:
    """A right-justified table of ``rows`` (cells by column name) that never crops a figure: when its natural
    width exceeds a terminal's ``width``, every column gets its longest cell's width (headers wrap) and the
    groups of ``drop_order`` are left out until it fits (:func:`fit_columns`), named in the caption after
    ``notes``. ``width`` ``None`` (not a terminal): every column, natural widths."""
    fixed: dict[str, int] = {}
    natural = sum(max([len(n)] + [len(_cell_text(r[n])) for r in rows]) + 3 for n in names) + 1
    if width is not None and natural > width:
        kept = fit_columns(names, rows, width, drop_order)
        if left_out := [n for n in names if n not in kept]:
            notes = [*notes, f"left out at {width} columns: {', '.join(left_out)} "
                             "(a wider terminal, or -o json, shows every figure)"]
        names = kept
        fixed = {n: _needed_width(n, [r[n] for r in rows]) for n in names}
    caption = "\n".join(notes) or None
    table = Table(title=_esc(title), caption=_esc(caption), caption_justify="left", header_style="bold")
    for name in names:
        table.add_column(name, justify="right", width=fixed.get(name))
    for r in rows:
        table.add_row(*(r[name] for name in names))
    return table


def kernel_table(kernel: KernelStatus, *, title: str | None = None, caption: str | None = None,
                 width: int | None = None) -> Table:
    """One row per token count: tokens, rows/rank, replicated µs, split µs, gather µs, speedup,
    its 95 % interval and the interval over every gather prior (when known), spread % (the larger
    candidate IQR/median), max abs error, the GPU difference Δg (and its interval); when some point's Δh
    differs from its Δg also the mode (graph or eager), the host issue medians and the host difference Δh
    (otherwise one caption line says so; :func:`kernel_columns`). A speedup is green when the split
    wins, red when it loses, dim when the two candidates' IQRs overlap or its interval contains 1.0; a
    count an adaptive sweep added is marked ``+``.

    ``width``: a terminal's columns. No figure is ever cropped: each column is at least as wide as its
    longest cell, and when the table would not fit ``width``, columns are left out in
    :data:`NARROW_DROP_ORDER` (:func:`fit_columns`) and the caption names them. ``None`` (not a terminal):
    every column."""
    names, notes = kernel_columns(kernel)
    rows = [_kernel_cells(p) for p in kernel.points]
    return fitted_table(names, rows, width=width, drop_order=NARROW_DROP_ORDER, title=title,
                        notes=[*([caption] if caption else []), *notes])


def _kernel_cells(p: KernelPoint) -> dict[str, str | Text]:
    """Every :func:`kernel_table` cell of one point, by column header."""
    return {
        "tokens": f"{'+' if p.added_because else ''}{p.tokens:,}",
        "rows/rank": f"{p.rows_per_rank:,}",
        "replicated µs": fmt_us(p.replicated_us),
        "split µs": fmt_us(p.split_us),
        "gather µs": fmt_us(p.gather_us),
        "speedup": Text(f"{p.speedup:.2f}×", style=_speedup_style(p)),
        "95 % interval": fmt_interval(p.speedup_low, p.speedup_high),
        "any prior": fmt_interval(p.speedup_low_any_prior, p.speedup_high_any_prior),
        "spread %": f"{p.iqr_pct:.1f}",
        "max error": fmt_error(p.max_abs_error),
        "Δg µs": _delta_text(p.gpu_delta_us, p.gpu_delta_low_us, p.gpu_delta_high_us),
        "Δg 95 %": fmt_delta_interval(p.gpu_delta_low_us, p.gpu_delta_high_us),
        "mode": p.execution or "-",
        "host rep µs": fmt_us(p.replicated_host_us),
        "host split µs": fmt_us(p.split_host_us),
        "Δh µs": _delta_text(p.host_delta_us, p.host_delta_low_us, p.host_delta_high_us),
        "Δh 95 %": fmt_delta_interval(p.host_delta_low_us, p.host_delta_high_us),
    }


def _delta_text(value: float | None, low: float | None, high: float | None) -> str | Text:
    """A difference: green when the split is shorter, red when longer, dim when its interval contains 0."""
    if value is None:
        return "—"
    style = "green" if value < 0 else "red"
    if low is not None and high is not None and low <= 0.0 <= high:
        style = "dim " + style
    return Text(fmt_delta(value), style=style)


def _speedup_style(p: KernelPoint) -> str:
    style = "green" if p.speedup > 1 else "red"
    if not p.decided or (p.speedup_low is not None and p.speedup_low <= 1.0 <= (p.speedup_high or 0.0)):
        style = "dim " + style
    return style


def _edge(value: float | None, is_open: bool, below: bool) -> str:
    if value is None:
        return "—"
    return f"{'≤' if below else '≥'} {fmt_tokens(value)}" if is_open else f"≈ {fmt_tokens(value)}"


def _saving(us: float | None, low: float | None, high: float | None, ms: float | None) -> str:
    if us is None or ms is None:
        return "outside the measured range"
    span = f" [{low:+.1f}, {high:+.1f}]" if low is not None and high is not None else ""
    return f"{us:+.1f} µs/layer{span}, {ms:+.3f} ms per prefill chunk"


def stake_line(row: StakeRow, *, host: bool) -> str:
    """One stake row: what splitting at its count saves (+) or costs (−) per layer (with its interval) and
    per prefill chunk of that many tokens; ``host``: both regimes (GPU-bound: −Δg, host-bound: −Δh)."""
    head = f"stake at {fmt_tokens(row.tokens)} tokens ({row.label}, {row.layers} layers): "
    gpu = _saving(row.saving_us, row.saving_low_us, row.saving_high_us, row.saving_ms_per_chunk)
    if not host:
        return head + gpu
    hosted = (_saving(row.host_saving_us, row.host_saving_low_us, row.host_saving_high_us,
                      row.host_saving_ms_per_chunk) if row.host_saving_us is not None else "no eager host times there")
    return f"{head}GPU-bound {gpu}; host-bound {hosted}"


def uncertainty_lines(kernel: KernelStatus, *, stakes: bool = True) -> list[str]:
    """The crossover interval and why it is (not) resolved, the indifference band, the interval rule's
    threshold and (``stakes``) the stake per layer and prefill chunk, in both regimes where Δh differs from Δg
    (:func:`stake_line`; ``kernel.uncertainty``,
    :mod:`spx.analysis.band`); empty when unset. ``spx run``, ``spx report`` and ``spx predict`` print these
    same lines; a CPU smoke run leaves the stake out (a shrunk projection's CPU time says nothing of a
    model's prefill)."""
    u = kernel.uncertainty
    if u is None:
        return []
    pct = f"{100 * u.level:.0f} %"
    lines = []
    if u.crossover_low_tokens is None and kernel.crossover_tokens is not None:
        lines.append("crossover interval: unknown (the points carry no samples to bound their speedups)")
    if u.crossover_low_tokens is not None:
        lines.append(
            f"crossover interval ({pct}): {_edge(u.crossover_low_tokens, u.crossover_low_open, True)} to "
            f"{_edge(u.crossover_high_tokens, u.crossover_high_open, False)} tokens"
            + (f" (bracket {u.bracket_low_tokens:,}–{u.bracket_high_tokens:,})"
               if u.bracket_low_tokens is not None and u.bracket_high_tokens is not None else "")
        )
    lines.append(f"confidence {kernel.crossover_confidence}" + (": " + "; ".join(u.confidence_reasons)
                                                                 if u.confidence_reasons else ""))
    if u.band_low_tokens is not None:
        lines.append(
            f"indifference band: {_edge(u.band_low_tokens, u.band_low_open, True)} to "
            f"{_edge(u.band_high_tokens, u.band_high_open, False)} tokens (the split's effect on this projection "
            "is within the uncertainty there, over every gather prior)"
        )
    lb = u.lower_bound_threshold_tokens
    lines.append(f"interval rule threshold: {lb:,} tokens (smallest measured count from which the speedup's "
                 f"lower bound stays >= 1)" if lb is not None else
                 "interval rule threshold: none (the speedup's lower bound is below 1 at the largest measured count)")
    host = host_deltas_differ(kernel.points)
    lines += [stake_line(row, host=host) for row in (u.stake if stakes else ())]
    return lines


def crossover_lines(kernel: KernelStatus, gate_threshold_tokens: int | None = None) -> list[str]:
    """The crossover (interpolated break-even, first winning count, confidence) and the threshold."""
    lines = []
    smallest = kernel.points[0].tokens if kernel.points else None
    if not kernel.points:
        lines.append("crossover: none (no token count was measured)")
    elif kernel.first_winning_tokens is not None and kernel.first_winning_tokens == smallest:
        lines.append(f"crossover: split wins at every measured count, from the smallest ({smallest:,} tokens): the "
                     f"break-even is at or below {smallest:,} tokens (an upper bound, not interpolated)")
    elif kernel.crossover_tokens is not None:
        first = (f", wins from {kernel.first_winning_tokens:,} on: the first win after the last loss"
                 if kernel.first_winning_tokens else "")
        lines.append(
            f"crossover: split wins from ≈ {fmt_tokens(kernel.crossover_tokens)} tokens "
            f"(interpolated break-even{first}; confidence {kernel.crossover_confidence})"
        )
    elif kernel.first_winning_tokens is not None:
        lines.append(f"crossover: split wins from {kernel.first_winning_tokens:,} tokens on (the first win after the "
                     "last loss)")
    else:
        lines.append("crossover: none in the measured range (the split loses at the largest measured count)")
    if kernel.recommended_threshold_tokens is not None:
        rounding = f", rounded {kernel.threshold_rounding}" if kernel.threshold_rounding else ""
        lines.append(f"recommended threshold: {kernel.recommended_threshold_tokens:,} tokens{rounding}")
    else:
        lines.append("recommended threshold: none (no break-even measured)")
    # the host-bound regime only where some point's Δh differs from its Δg (a CPU smoke run: never)
    host = regime_of(kernel, "host-bound") if host_deltas_differ(kernel.points) else None
    if host is not None:
        lines[0] = "GPU-bound " + lines[0]
        lines[1] = "GPU-bound " + lines[1]
        gpu = regime_of(kernel, "gpu-bound")
        if gpu is not None:
            lines.append("GPU-bound regime (the step moves by Δg, GPU spans): " + _regime_verdict(gpu))
        cross = (f"split wins from ≈ {fmt_tokens(host.crossover_tokens)} tokens (confidence {host.crossover_confidence})"
                 if host.crossover_tokens is not None else "none in the measured range")
        rec = f"{host.recommended_threshold_tokens:,} tokens" if host.recommended_threshold_tokens is not None else "none"
        lines.append(f"host-bound regime (the step moves by Δh, host issue times): crossover {cross}; "
                     f"recommended threshold {rec}; " + _regime_verdict(host))
        if kernel.regimes_agree is not None:
            lines.append("the regimes agree about the gate threshold" if kernel.regimes_agree else
                         "the regimes disagree about the gate threshold: only a step measurement decides")
    if kernel.max_cudagraph_capture_size is not None and any(p.execution == "graph" for p in kernel.points):
        # only where graphs were timed: a CPU smoke run (all eager) has no capture limit to show
        lines.append(f"vLLM CUDA-graph capture limit: {kernel.max_cudagraph_capture_size:,} tokens (eager above)")
    if gate_threshold_tokens is not None:
        lines.append(f"gate threshold (deployed/proposed): {gate_threshold_tokens:,} tokens")
    return lines


def _regime_verdict(r: RegimeSummary) -> str:
    """The regime's speed verdict at and above the gate threshold, and its gate verdict where a cap changed it."""
    speed = r.speed_verdict or r.verdict or "-"
    gated = f" (gated {r.verdict}: capped)" if r.verdict is not None and r.verdict != speed else ""
    return f"at and above the gate threshold alone: {speed}{gated}"


def regime_of(kernel: KernelStatus, name: KernelRegime) -> RegimeSummary | None:
    """``kernel``'s summary of regime ``name`` (``gpu-bound`` or ``host-bound``), ``None`` when not judged."""
    return next((r for r in kernel.regimes if r.regime == name), None)


#: :func:`prediction_table`'s columns, and the order it leaves them out on a narrow terminal (the prediction stays).
PREDICTION_COLUMNS = ("tokens", "shard rows", "H20 repl. µs", "H20 split µs", "H20 shard µs", "gather µs",
                      "f(M)", "f(shard)", "pred. repl. µs", "pred. split µs", "pred. speedup")
PREDICTION_DROP_ORDER: tuple[tuple[str, ...], ...] = (
    ("H20 shard µs",), ("f(M)", "f(shard)"), ("shard rows",), ("H20 repl. µs", "H20 split µs"), ("gather µs",))


def prediction_table(rows: Sequence[PredictedRow], *, title: str | None = None, width: int | None = None) -> Table:
    """The H20 → H100/H200 what-if (:func:`spx.analysis.predict.predict_from_table` ``.rows``):
    the H20 inputs, the derived gather and shard GEMM, the scaling factors and the prediction; on a terminal
    narrower than that (``width``) the inputs are left out first (:func:`fitted_table`)."""
    cells = [dict(zip(PREDICTION_COLUMNS, (
        f"{r.tokens:,}", f"{r.shard_rows:,}", fmt_us(r.h20_replicated_us), fmt_us(r.h20_split_us),
        fmt_us(r.h20_shard_gemm_us), fmt_us(r.gather_us), f"{r.replicated_factor:.2f}×",
        f"{r.shard_factor:.2f}×", fmt_us(r.replicated_us), fmt_us(r.split_us),
        Text(f"{r.speedup:.2f}×", style="green" if r.speedup > 1 else "red"),
    ), strict=True)) for r in rows]
    return fitted_table(PREDICTION_COLUMNS, cells, width=width, drop_order=PREDICTION_DROP_ORDER, title=title)
