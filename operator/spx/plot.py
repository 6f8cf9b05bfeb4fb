"""The crossover plot (``crossover.png``): latency vs tokens, log-log, both candidates.

matplotlib is imported lazily with the Agg backend (no display needed, safe in pods and tests).
"""

from __future__ import annotations

import os
from pathlib import Path

from spx.api import KernelStatus
from spx.report import CPU_NOTE


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
    """Draw ``kernel``'s sweep to ``path`` (PNG) and return the path.

    Replicated and split latency (median µs) vs tokens on log-log axes; the split's all-gather
    alone as a dashed line when known; vertical lines at the interpolated break-even, the
    recommended threshold and the gate's threshold.

    Raises:
        ValueError: no points to draw.
    """
    if not kernel.points:
        raise ValueError("no points to plot")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    pts = sorted(kernel.points, key=lambda p: p.tokens)
    tokens = [p.tokens for p in pts]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
    try:
        ax.plot(tokens, [p.replicated_us for p in pts], "o-", color="tab:blue", label="replicated")
        ax.plot(tokens, [p.split_us for p in pts], "s-", color="tab:orange", label="split + all-gather")
        gathered = [(p.tokens, p.gather_us) for p in pts if p.gather_us is not None and p.gather_us > 0]
        if gathered:
            ax.plot(  # with a marker: a single gathered point is drawn too
                [t for t, _ in gathered], [g for _, g in gathered], "x--", color="tab:orange", alpha=0.7,
                label=f"all-gather alone ({kernel.gather_source or '?'})",
            )
        if kernel.crossover_tokens is not None:
            ax.axvline(kernel.crossover_tokens, color="tab:green", linestyle=":",
                       label=f"break-even ≈ {kernel.crossover_tokens:,.0f} tokens")
        if kernel.recommended_threshold_tokens is not None:
            ax.axvline(kernel.recommended_threshold_tokens, color="tab:green", linestyle="-.",
                       label=f"recommended threshold {kernel.recommended_threshold_tokens:,}")
        if gate_threshold_tokens is not None and gate_threshold_tokens != kernel.recommended_threshold_tokens:
            ax.axvline(gate_threshold_tokens, color="tab:gray", linestyle="-.", alpha=0.8,
                       label=f"gate threshold {gate_threshold_tokens:,}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(tokens, [f"{t:,}" for t in tokens], rotation=45 if len(tokens) > 8 else 0, fontsize=8)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("tokens in the batch (M)")
        ax.set_ylabel("µs per call (median of samples, max over ranks)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside: hides no point
        fig.tight_layout()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out
