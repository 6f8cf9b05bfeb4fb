"""The crossover plot (``crossover.png``): latency vs tokens, log-log, both candidates.

matplotlib is imported lazily with the Agg backend (no display needed, safe in pods and tests).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from spx.api import KernelPoint, KernelStatus
from spx.cli.tables import host_deltas_differ, regime_of
from spx.files import write_atomic
from spx.vocabulary import CPU_NOTE

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
    cpu: bool = False,
    step: Any = None,
) -> Path:
    """Draw ``kernel``'s sweep to ``path`` and return the path: in the format its extension names
    (:func:`plot_format`: ``.png``, ``.svg``, ``.pdf``…), written whole or not at all (:func:`spx.files.write_atomic`).

    Replicated and split latency (median GPU span, µs; a CPU smoke run's, ``cpu``, are host wall times and the
    legend says so) vs tokens on log-log axes; the split's all-gather alone as a dotted line when known;
    vertical lines at the interpolated break-even, the recommended threshold, the gate's threshold, vLLM's
    CUDA-graph capture limit (points above it ran eagerly) and, where the host issue times differ, the
    host-bound regime's break-even. When the points carry their differences
    (``gpuDeltaUs``, ``hostDeltaUs``), a panel shows Δg and Δh (split − replicated, µs per layer, with their
    95 % intervals) around 0: what the step moves by when the GPU, or the host, is the bottleneck
    (docs/kernel-benchmark.md, "Regimes"). When the points carry speed-up intervals (``speedupLow/High``), a
    last panel shows the speedup with its 95 % error bars (and, lighter, the interval over every gather
    prior) around 1.0; every panel shades the indifference band (``kernel.uncertainty``). With ``step``
    (``status.step`` carrying the one-server step curve, issue #34), a panel beside the kernel curves on the
    same token axis shows the measured step effect per layer (µs, with its interval) of each arm on the
    aligned and the pad path (:func:`step_curves`): the measurement that decides when the regimes disagree.

    Raises:
        ValueError: no points to draw, or an extension that names no image format.
        OSError: ``path`` cannot be written.
    """
    if not kernel.points:
        raise ValueError("no points to plot")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    pts = sorted(kernel.points, key=lambda p: p.tokens)
    tokens = [p.tokens for p in pts]
    curves = step_curves(step)
    fig, axes = _figure(plt, pts, curves)
    ax, ax_delta, ax_step, ax2 = axes
    try:
        _times_panel(ax, kernel, pts, "CPU wall time" if cpu else "GPU span")
        _marks(ax, [a for a in (ax_delta, ax_step, ax2) if a is not None], kernel, pts, gate_threshold_tokens)
        if ax_delta is not None:
            _delta_panel(ax_delta, pts, host=host_deltas_differ(pts))
        if ax_step is not None:
            _step_panel(ax_step, curves)
        if ax2 is not None:
            _speedup_panel(ax2, pts)
        _label(ax, next(a for a in (ax2, ax_step, ax_delta, ax) if a is not None), tokens, title)  # the bottom panel
        fig.tight_layout()
        (out := Path(path)).parent.mkdir(parents=True, exist_ok=True)
        image = io.BytesIO()
        fig.savefig(image, format=plot_format(out))
        write_atomic(out, image.getvalue())
    finally:
        plt.close(fig)
    return out


def _figure(plt: Any, pts: list[KernelPoint], curves: Any) -> tuple[Any, tuple[Any, Any | None, Any | None, Any | None]]:
    """The figure and its panels, top to bottom: times, then Δg/Δh (points with deltas), the step curve (with
    ``curves``), the speedup (points with intervals); a panel not drawn is None."""
    intervals = any(p.speedup_low is not None for p in pts)
    deltas = any(p.gpu_delta_us is not None for p in pts)
    panels = 1 + intervals + deltas + bool(curves)
    fig, axes = plt.subplots(panels, 1, figsize=(10, 4 + 2.5 * (panels - 1)), dpi=120, sharex=True,
                             height_ratios=[3, *([2] * (panels - 1))], squeeze=False)
    return fig, (axes[0][0], axes[1][0] if deltas else None, axes[1 + deltas][0] if curves else None,
                 axes[-1][0] if intervals else None)


def _label(ax: Any, bottom: Any, tokens: list[int], title: str) -> None:
    """Log-log axes of the times panel ``ax``, the token counts as ticks on the ``bottom`` panel, title and legend."""
    import matplotlib.ticker

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    bottom.set_xticks(tokens, [f"{t:,}" for t in tokens], rotation=45 if len(tokens) > 8 else 0, fontsize=8)
    bottom.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    bottom.set_xlabel("tokens in the batch (M)")
    ax.set_ylabel("µs per call (median of samples, max over ranks)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside: hides no point


def _times_panel(ax: Any, kernel: KernelStatus, pts: list[KernelPoint], timed: str) -> None:
    """Replicated and split times (``timed``: ``GPU span``, or a CPU run's ``CPU wall time``), and the all-gather
    alone where known."""
    tokens = [p.tokens for p in pts]
    ax.plot(tokens, [p.replicated_us for p in pts], "o-", color="tab:blue", label=f"replicated ({timed})")
    ax.plot(tokens, [p.split_us for p in pts], "s-", color="tab:orange", label=f"split + all-gather ({timed})")
    gathered = [(p.tokens, p.gather_us) for p in pts if p.gather_us is not None and p.gather_us > 0]
    if gathered:
        ax.plot(  # with a marker: a single gathered point is drawn too
            [t for t, _ in gathered], [g for _, g in gathered], "x:", color="tab:orange", alpha=0.7,
            label=f"all-gather alone ({kernel.gather_source or '?'})",
        )


def _marks(ax: Any, lower: list[Any], kernel: KernelStatus, pts: list[KernelPoint], gate: int | None) -> None:
    """Vertical lines (break-evens, thresholds, the capture limit) on the times panel, the gate threshold and
    the host-bound break-even on the ``lower`` panels too, and the indifference band shaded on every panel."""
    host = regime_of(kernel, "host-bound") if host_deltas_differ(pts) else None
    if host is not None and host.crossover_tokens is not None:
        for a in [ax, *lower]:
            a.axvline(host.crossover_tokens, color="tab:red", linestyle=":",
                      label=f"host-bound break-even ≈ {host.crossover_tokens:,.0f} tokens" if a is ax else None)
    if kernel.max_cudagraph_capture_size is not None and any(p.execution == "graph" for p in pts):
        ax.axvline(kernel.max_cudagraph_capture_size, color="black", linestyle="--", alpha=0.5,
                   label=f"vLLM CUDA-graph limit {kernel.max_cudagraph_capture_size:,} (eager above)")
    if kernel.crossover_tokens is not None:
        ax.axvline(kernel.crossover_tokens, color="tab:green", linestyle=":",
                   label=f"{'GPU-bound ' if host is not None else ''}break-even ≈ {kernel.crossover_tokens:,.0f} tokens")
    if kernel.recommended_threshold_tokens is not None:
        ax.axvline(kernel.recommended_threshold_tokens, color="tab:green", linestyle="-.",
                   label=f"recommended threshold {kernel.recommended_threshold_tokens:,}")
    if gate is not None and gate != kernel.recommended_threshold_tokens:
        for a in [ax, *lower]:
            a.axvline(gate, color="tab:gray", linestyle="-.", alpha=0.8,
                      label=f"gate threshold {gate:,}" if a is ax else None)
    u = kernel.uncertainty
    if u is not None and u.band_low_tokens is not None and u.band_high_tokens is not None:
        for a in [ax, *lower]:
            a.axvspan(u.band_low_tokens, u.band_high_tokens, color="tab:gray", alpha=0.15, lw=0,
                      label="indifference band" if a is ax else None)


def _delta_panel(ax: Any, pts: list[KernelPoint], *, host: bool) -> None:
    """Δg (and, with ``host``, Δh) vs tokens with 95 % error bars, around 0 (below: the split saves)."""
    series = [("gpu", "Δg: GPU difference (GPU-bound regime)", "tab:green", "o")]
    if host:
        series.append(("host", "Δh: host difference (host-bound regime)", "tab:red", "s"))
    for kind, label, color, marker in series:
        rows = [(p.tokens, getattr(p, f"{kind}_delta_us"), getattr(p, f"{kind}_delta_low_us"),
                 getattr(p, f"{kind}_delta_high_us")) for p in pts if getattr(p, f"{kind}_delta_us") is not None]
        if not rows:
            continue
        lo = [v - (low if low is not None else v) for _, v, low, _ in rows]
        hi = [(high if high is not None else v) - v for _, v, _, high in rows]
        ax.errorbar([t for t, *_ in rows], [v for _, v, *_ in rows], yerr=[lo, hi], fmt=f"{marker}-", color=color,
                    capsize=3, label=label)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_ylabel("split − replicated, µs per layer")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


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


#: One curve of the step panel: (lengths, per-layer µs, below, above) — the error bars' lengths.
StepCurve = tuple[list[int], list[float], list[float], list[float]]


def step_curves(step: Any) -> dict[str, StepCurve]:
    """The step A/B's measured effect per layer (µs) per arm and path, from ``status.step``'s curve
    (``points``: arm, length, aligned, perLayerUs and its interval), sorted by length: ``{"split, aligned":
    (lengths, µs, below, above), "split, pad path": …, "pad-free, …"}``. Empty without a step or without
    its curve (a step status of the earlier per-threshold contract)."""
    out: dict[str, StepCurve] = {}
    for p in sorted(getattr(step, "points", None) or [], key=lambda p: (p.arm, p.length)):
        xs, ys, lo, hi = out.setdefault(f"{p.arm}, {'aligned' if p.aligned else 'pad path'}", ([], [], [], []))
        xs.append(int(p.length))
        ys.append(float(p.per_layer_us))
        lo.append(max(0.0, p.per_layer_us - p.per_layer_low_us))
        hi.append(max(0.0, p.per_layer_high_us - p.per_layer_us))
    return out


def _step_panel(ax: Any, curves: dict[str, StepCurve]) -> None:
    """The step effect per layer vs prompt length with its interval, one line per arm and path, around 0."""
    styles = {"split, aligned": ("tab:blue", "o-"), "split, pad path": ("tab:blue", "s--"),
              "pad-free, aligned": ("tab:orange", "o-"), "pad-free, pad path": ("tab:orange", "s--")}
    for label, (xs, ys, lo, hi) in curves.items():
        color, fmt = styles.get(label, ("tab:gray", "^:"))
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt=fmt, color=color, capsize=3, label=f"step A/B: {label}")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_ylabel("step effect, µs per layer")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
