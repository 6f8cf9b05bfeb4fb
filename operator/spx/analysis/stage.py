"""The input-projection stage table and its per-chunk totals over all layers, under both bounds.

From a :class:`~spx.api.stage.StageResult` (``python -m spx.bench.stage``): the seed PR's second table
for this GPU (per layer kind and token count: replicated, split, speedup, split-all) and, at the
prefill chunk (``stage.chunkTokens``), the stage's total over all layers (Σ kinds: layers × µs per
layer) for each candidate, in both regimes (docs/kernel-benchmark.md, "Regimes": gpu-bound sums GPU
spans, host-bound sums host issue times, so the candidates' difference is Δg or Δh; never the per-op
``max(host, span)``), and what splitting saves per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spx.api.stage import StageResult, StageRow, StageTimes
from spx.vocabulary import KERNEL_REGIMES, STAGE_CANDIDATES

BOUNDS = KERNEL_REGIMES  #: the stage is totalled in both regimes (spx.vocabulary.KERNEL_REGIMES)


def bound_us(times: StageTimes, bound: str) -> float | None:
    """A candidate's µs per layer under ``bound``: ``gpu-bound`` the GPU span, ``host-bound`` the host issue time.

    Raises:
        ValueError: an unknown bound.
    """
    if bound == "gpu-bound":
        return times.gpu_us
    if bound == "host-bound":
        return times.host_us
    raise ValueError(f"unknown bound {bound!r}; use one of {BOUNDS}")


@dataclass(frozen=True)
class ChunkTotal:
    """Σ over layer kinds of layers × µs per layer at ``tokens``, per candidate (µs), under one bound."""

    tokens: int
    bound: str
    total_us: dict[str, float]
    layers: int

    def saved_ms(self, candidate: str) -> float:
        """Milliseconds per chunk ``candidate`` saves against ``replicated`` (negative: it costs)."""
        return (self.total_us["replicated"] - self.total_us[candidate]) / 1e3


def chunk_total(rows: Sequence[StageRow], tokens: int, bound: str) -> ChunkTotal | None:
    """:class:`ChunkTotal` of the rows at ``tokens`` (``None`` when no row is at ``tokens`` or a bound is missing)."""
    at = [r for r in rows if r.tokens == tokens]
    if not at:
        return None
    totals: dict[str, float] = {}
    for name in STAGE_CANDIDATES:
        total = 0.0
        for r in at:
            value = bound_us(r.candidates[name], bound) if name in r.candidates else None
            if value is None:
                return None
            total += r.layers * value
        totals[name] = total
    return ChunkTotal(tokens=tokens, bound=bound, total_us=totals, layers=sum(r.layers for r in at))


def _us(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "-"


def stage_table_lines(result: StageResult) -> list[str]:
    """The stage as Markdown: one table per bound (kind, tokens, mode, streams, µs per layer, speedups), then the chunk totals."""
    lines = [f"input-projection stage: gemm {result.gemm_backend}, gather {result.gather_source}, {result.device}, "
             f"timer {result.timer}" + (f", host CPU {result.host_cpu}" if result.host_cpu else "")]
    lines += [f"note: {w}" for w in result.warnings]
    for bound in BOUNDS:
        lines += ["", f"{bound} (µs per layer)", "",
                  "| kind | layers | tokens | mode | streams | replicated | split | split × | split-all | split-all × |",
                  "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in result.rows:
            rep, spl, alls = (bound_us(r.candidates[n], bound) for n in STAGE_CANDIDATES)
            lines.append(f"| {r.kind} | {r.layers} | {r.tokens} | {r.execution} | {r.streams} | {_us(rep)} | {_us(spl)} | "
                         f"{_x(rep, spl)} | {_us(alls)} | {_x(rep, alls)} |")
    lines += ["", "| tokens | bound | layers | replicated ms | split ms | split-all ms | split saves ms | split-all saves ms |",
              "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for tokens in sorted({r.tokens for r in result.rows}):
        for bound in BOUNDS:
            total = chunk_total(result.rows, tokens, bound)
            if total is None:
                continue
            t = total.total_us
            lines.append(f"| {tokens} | {bound} | {total.layers} | {t['replicated'] / 1e3:.3f} | {t['split'] / 1e3:.3f} | "
                         f"{t['split-all'] / 1e3:.3f} | {total.saved_ms('split'):.3f} | {total.saved_ms('split-all'):.3f} |")
    return lines
