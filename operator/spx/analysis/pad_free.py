"""What the pad-free shard saves against vLLM's ``sp_shard``, per point, per layer and per prefill chunk,
and the threshold it would allow. Pure.

vLLM 0.33's ``sp_shard`` (``vllm/models/common/ops/sequence_parallel.py``) pads the whole hidden state
``[M, K]`` to ``[M_pad, K]`` with ``F.pad`` on every rank whenever M % TP ≠ 0 (7 of every 8 batch sizes at
TP 8); the ``pad-free`` candidate (:func:`spx.bench.sequence_parallel.pad_free_shard`) takes each rank's
rows as a view and pads only a short trailing shard. Both issue the same shard GEMM, gather and trim, so
their difference is the pad. This module turns a result's points into:

- per point: ``saved_us`` = split − pad-free (median µs, per layer: DeepSeek-V4.1 issues ``fused_wqa_wkv``
  once per layer), ``saved_chunk_us`` = ``saved_us`` × layers (a prefill chunk of M tokens passes every
  layer once; :data:`spx.api.stage.V41_NUM_LAYERS` = 40), the split's and pad-free's speed-ups over
  replicated, and the same from host medians where the point was timed eagerly;
- the threshold each would allow: :func:`spx.analysis.crossover.first_winning_tokens` and the
  interpolated break-even (:func:`spx.analysis.crossover.break_even_tokens`) of the split and of
  pad-free, on the same points, GPU spans (the GPU-bound regime).

A measured proposal for vLLM, stated as such: the verdict still gates vLLM's own ``sp_shard``.
"""

from __future__ import annotations

from dataclasses import dataclass

from spx.analysis.crossover import break_even_tokens, first_winning_tokens, median_point
from spx.api.result import KernelResult, PointResult
from spx.api.stage import V41_NUM_LAYERS


@dataclass(frozen=True)
class PadFreeRow:
    """One token count, µs (medians): ``pad_rows`` = M_pad − M (``sp_shard`` pads when > 0); ``saved_us``
    per layer and ``saved_chunk_us`` per prefill chunk (× layers); host figures ``None`` unless both
    candidates have host samples."""

    tokens: int
    pad_rows: int
    replicated_us: float
    split_us: float
    pad_free_us: float
    saved_us: float
    saved_chunk_us: float
    split_speedup: float
    pad_free_speedup: float
    saved_host_us: float | None = None


@dataclass(frozen=True)
class PadFreeSummary:
    """Every row, the layers a chunk passes, and the threshold the split and pad-free each allow:
    first winning measured count and interpolated break-even (tokens; ``None``: no crossover measured;
    ``*_wins_everywhere``: it wins at every measured count, so the break-even is at or below the smallest)."""

    rows: list[PadFreeRow]
    layers: int
    split_threshold_tokens: int | None
    pad_free_threshold_tokens: int | None
    split_break_even_tokens: float | None
    pad_free_break_even_tokens: float | None
    split_wins_everywhere: bool = False
    pad_free_wins_everywhere: bool = False


def pad_free_row(point: PointResult, layers: int = V41_NUM_LAYERS) -> PadFreeRow | None:
    """The row of one point; ``None`` when the point has no ``pad_free`` candidate (an older document).

    Raises:
        ValueError: ``layers < 1``.
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    if point.pad_free is None:
        return None
    rep, split, pf = point.replicated.median_us, point.split.median_us, point.pad_free.median_us
    saved = split - pf
    host = None
    if point.split.host_median_us is not None and point.pad_free.host_median_us is not None:
        host = point.split.host_median_us - point.pad_free.host_median_us
    return PadFreeRow(tokens=point.tokens, pad_rows=point.padded_tokens - point.tokens, replicated_us=rep,
                      split_us=split, pad_free_us=pf, saved_us=saved, saved_chunk_us=saved * layers,
                      split_speedup=rep / split, pad_free_speedup=rep / pf, saved_host_us=host)


def pad_free_summary(result: KernelResult, layers: int = V41_NUM_LAYERS) -> PadFreeSummary | None:
    """:class:`PadFreeSummary` of a result's points that carry ``pad_free``; ``None`` when none does.

    Raises:
        ValueError: ``layers < 1``, or a repeated token count.
    """
    rows = sorted((r for r in (pad_free_row(p, layers) for p in result.points) if r is not None), key=lambda r: r.tokens)
    if not rows:
        return None
    split_pts = [median_point(r.tokens, 1, r.replicated_us, r.split_us) for r in rows]
    pf_pts = [median_point(r.tokens, 1, r.replicated_us, r.pad_free_us) for r in rows]
    split_be, pf_be = break_even_tokens(split_pts), break_even_tokens(pf_pts)
    return PadFreeSummary(rows=rows, layers=layers, split_threshold_tokens=first_winning_tokens(split_pts),
                          pad_free_threshold_tokens=first_winning_tokens(pf_pts),
                          split_break_even_tokens=None if split_be is None else split_be.tokens,
                          pad_free_break_even_tokens=None if pf_be is None else pf_be.tokens,
                          split_wins_everywhere=split_be is not None and split_be.at_or_below_smallest_measured,
                          pad_free_wins_everywhere=pf_be is not None and pf_be.at_or_below_smallest_measured)


def _tokens(value: float | int | None, at_or_below: bool = False) -> str:
    if value is None:
        return "none measured"
    return f"≤ {value:,.0f}" if at_or_below else f"{value:,.0f}"


def _thresholds(s: PadFreeSummary) -> tuple[str, str]:
    """``(split, pad-free)``: first winning count (interpolated break-even), ``≤`` when it wins everywhere."""
    return (f"{_tokens(s.split_threshold_tokens, s.split_wins_everywhere)} "
            f"(break-even {_tokens(s.split_break_even_tokens, s.split_wins_everywhere)})",
            f"{_tokens(s.pad_free_threshold_tokens, s.pad_free_wins_everywhere)} "
            f"(break-even {_tokens(s.pad_free_break_even_tokens, s.pad_free_wins_everywhere)})")


def describe_pad_free(summary: PadFreeSummary) -> list[str]:
    """Plain-text lines for a report (for ``spx report`` / ``spx gate``'s decision printer): a line per
    point and the thresholds, stated as a measured proposal for vLLM."""
    lines = [f"pad-free shard (spx's proposal for vLLM's sp_shard; the verdict gates vLLM's own): "
             f"saved per layer / per {summary.layers}-layer prefill chunk"]
    for r in summary.rows:
        host = "" if r.saved_host_us is None else f", host {r.saved_host_us:+.1f} µs"
        lines.append(f"  {r.tokens:>6} tokens (pad {r.pad_rows}): {r.saved_us:+.1f} µs / {r.saved_chunk_us / 1e3:+.2f} ms"
                     f"{host}; speedup split {r.split_speedup:.2f}x, pad-free {r.pad_free_speedup:.2f}x")
    split, pad_free = _thresholds(summary)
    lines.append(f"  threshold: split wins from {split}, pad-free from {pad_free}")
    return lines


def markdown_pad_free(summary: PadFreeSummary) -> list[str]:
    """The summary as a Markdown table (one row per point) and a line with the thresholds."""
    out = ["| tokens | pad rows | replicated µs | split (sp_shard) µs | pad-free µs | saved µs/layer | "
           f"saved ms per {summary.layers}-layer chunk | saved host µs | speedup split | speedup pad-free |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in summary.rows:
        host = "-" if r.saved_host_us is None else f"{r.saved_host_us:+.1f}"
        out.append(f"| {r.tokens} | {r.pad_rows} | {r.replicated_us:.1f} | {r.split_us:.1f} | {r.pad_free_us:.1f} | "
                   f"**{r.saved_us:+.1f}** | {r.saved_chunk_us / 1e3:+.2f} | {host} | {r.split_speedup:.2f}× | "
                   f"{r.pad_free_speedup:.2f}× |")
    out.append("")
    split, pad_free = _thresholds(summary)
    out.append(f"Threshold (GPU spans; first winning measured count, interpolated break-even): split {split}, "
               f"pad-free {pad_free}.")
    return out
