"""The crossover plot (``crossover.png``): latency vs tokens, log-log, both candidates.

matplotlib is imported lazily with the Agg backend (no display needed, safe in pods and tests).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from spx.api import KernelPoint, KernelStatus
from spx.cli.tables import CPU_NOTE, host_bound_differs
from spx.files import write_atomic

#: Image formats a plot is written in, by file extension (matplotlib's Agg, PDF, SVG and PS writers).
PLOT_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".eps": "eps", ".ps": "ps"}


def plot_format(path: Path) -> str:
    """The image format ``path``'s extension names (``a.svg`` → ``svg``; case-insensitive).

    Raises:
        ValueError: an extension that is not one of :data:`PLOT_FORMATS` (or none): the message lists them.
    """
    fmt = PLOT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path.name}: the extension {path.suffix or '(none)'!r} names no image format spx writes; "
                         f"end the name in one of {', '.join(PLOT_FORMATS)}")
    return fmt


def backend_label(gemm_backend: str | None) -> str:
    """``gemm humming``; a partial run's unresolved request ``auto`` says it is not what ran."""
    if gemm_backend == "auto":
        return "gemm not recorded (auto requested)"
    return f"gemm {gemm_backend or '?'}"


def plot_title(
    *,
    name: str | None = None,
    gpu: str | None = None,
    gemm_backend: str | None = None,
    gather_source: str | None = None,
    cpu: bool = False,
    tp: int | None = None,
    partial: str | None = None,
) -> str:
    """``[PARTIAL RUN: …\n]<name>: TP<tp> on <gpu> · gemm <backend> · gather <source>`` (+ the CPU note)."""
    head = f"{name or 'projection'}: TP{tp} on {gpu or 'unknown GPU'}" if tp else f"{name or 'projection'} on {gpu or 'unknown GPU'}"
    parts = [head, backend_label(gemm_backend), f"gather {gather_source or '?'}"]
    title = " · ".join(parts)
    if partial:
        title = f"PARTIAL RUN: {partial}\n{title}"
    return f"{title}\n{CPU_NOTE}" if cpu else title


def plot_crossover(
    kernel: KernelStatus,
    path: str | os.PathLike[str],
    *,
    title: str,
    gate_threshold_tokens: int | None = None,
) -> Path:
    """Draw ``kernel``'s sweep to ``path`` and return the path: in the format its extension names
    (:func:`plot_format`: ``.png``, ``.svg``, ``.pdf``…), written whole or not at all (:func:`spx.files.write_atomic`).

    Replicated and split latency (median µs) vs tokens on log-log axes; the split's all-gather
    alone as a dotted line when known; with eager host times the candidates' host issue times (the
    host-bound regime) as dashed curves and that regime's break-even; vertical lines at the
    interpolated break-even, the recommended threshold, the gate's threshold and vLLM's CUDA-graph
    capture limit (points above it ran eagerly). When the points carry speed-up intervals
    (``speedupLow/High``), a second panel shows the speedup with its 95 % error bars (and, lighter,
    the interval over every gather prior) around 1.0, and both panels shade the indifference band
    (``kernel.uncertainty``).

    Raises:
        ValueError: no points to draw, or an extension that names no image format.
        OSError: ``path`` cannot be written.
    """
    if not kernel.points:
        raise ValueError("no points to plot")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    pts = sorted(kernel.points, key=lambda p: p.tokens)
    tokens = [p.tokens for p in pts]
    intervals = any(p.speedup_low is not None for p in pts)
    if intervals:
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7), dpi=120, sharex=True, height_ratios=[3, 2])
    else:
        fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
    try:
        differs = host_bound_differs(pts)  # (a CPU smoke run: host-bound = GPU-bound, drawn once)
        gpu = " (GPU-bound)" if differs else ""
        ax.plot(tokens, [p.replicated_us for p in pts], "o-", color="tab:blue", label=f"replicated{gpu}")
        ax.plot(tokens, [p.split_us for p in pts], "s-", color="tab:orange", label=f"split + all-gather{gpu}")
        gathered = [(p.tokens, p.gather_us) for p in pts if p.gather_us is not None and p.gather_us > 0]
        if gathered:
            ax.plot(  # with a marker: a single gathered point is drawn too
                [t for t, _ in gathered], [g for _, g in gathered], "x:", color="tab:orange", alpha=0.7,
                label=f"all-gather alone ({kernel.gather_source or '?'})",
            )
        hosted = [p for p in pts if p.replicated_host_us and p.split_host_us] if differs else []
        if hosted:
            ax.plot([p.tokens for p in hosted], [p.replicated_host_us for p in hosted], "o--", color="tab:blue",
                    alpha=0.6, mfc="none", label="replicated, host issue time (host-bound regime)")
            ax.plot([p.tokens for p in hosted], [p.split_host_us for p in hosted], "s--", color="tab:orange",
                    alpha=0.6, mfc="none", label="split, host issue time (host-bound regime)")
        host = next((r for r in kernel.regimes if r.regime == "host-bound"), None) if differs else None
        if host is not None and host.crossover_tokens is not None:
            ax.axvline(host.crossover_tokens, color="tab:red", linestyle=":",
                       label=f"host-bound break-even ≈ {host.crossover_tokens:,.0f} tokens")
        if kernel.max_cudagraph_capture_size is not None and any(p.execution == "graph" for p in pts):
            ax.axvline(kernel.max_cudagraph_capture_size, color="black", linestyle="--", alpha=0.5,
                       label=f"vLLM CUDA-graph limit {kernel.max_cudagraph_capture_size:,} (eager above)")
        if kernel.crossover_tokens is not None:
            ax.axvline(kernel.crossover_tokens, color="tab:green", linestyle=":",
                       label=f"{'GPU-bound ' if hosted else ''}break-even ≈ {kernel.crossover_tokens:,.0f} tokens")
        if kernel.recommended_threshold_tokens is not None:
            ax.axvline(kernel.recommended_threshold_tokens, color="tab:green", linestyle="-.",
                       label=f"recommended threshold {kernel.recommended_threshold_tokens:,}")
        if gate_threshold_tokens is not None and gate_threshold_tokens != kernel.recommended_threshold_tokens:
            ax.axvline(gate_threshold_tokens, color="tab:gray", linestyle="-.", alpha=0.8,
                       label=f"gate threshold {gate_threshold_tokens:,}")
        u = kernel.uncertainty
        band = (u.band_low_tokens, u.band_high_tokens) if u is not None else (None, None)
        if band[0] is not None and band[1] is not None:
            for a in [ax, *([ax2] if intervals else [])]:
                a.axvspan(band[0], band[1], color="tab:gray", alpha=0.15, lw=0,
                          label="indifference band" if a is ax else None)
        if intervals:
            _speedup_panel(ax2, pts)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        bottom = ax2 if intervals else ax
        bottom.set_xticks(tokens, [f"{t:,}" for t in tokens], rotation=45 if len(tokens) > 8 else 0, fontsize=8)
        bottom.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        bottom.set_xlabel("tokens in the batch (M)")
        ax.set_ylabel("µs per call (median of samples, max over ranks)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside: hides no point
        fig.tight_layout()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        image = io.BytesIO()
        fig.savefig(image, format=plot_format(out))
        write_atomic(out, image.getvalue())
    finally:
        plt.close(fig)
    return out


def _speedup_panel(ax: Any, pts: list[KernelPoint]) -> None:
    """Speedup vs tokens with 95 % error bars (own interval) and, lighter, the any-prior interval."""
    tokens = [p.tokens for p in pts]
    speed = [p.speedup for p in pts]

    def bars(low: list[float | None], high: list[float | None]) -> list[list[float]]:
        lo = [max(0.0, s - (v if v is not None else s)) for s, v in zip(speed, low, strict=True)]
        hi = [max(0.0, (v if v is not None else s) - s) for s, v in zip(speed, high, strict=True)]
        return [lo, hi]

    ax.errorbar(tokens, speed, yerr=bars([p.speedup_low_any_prior for p in pts], [p.speedup_high_any_prior for p in pts]),
                fmt="none", ecolor="tab:purple", alpha=0.35, elinewidth=6, label="95 % interval, any gather prior")
    ax.errorbar(tokens, speed, yerr=bars([p.speedup_low for p in pts], [p.speedup_high for p in pts]),
                fmt="o", color="tab:purple", capsize=3, label="speedup, 95 % interval")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_ylabel("speedup (replicated / split)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
