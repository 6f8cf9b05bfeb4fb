"""Re-analyse committed results under today's rules: Δg and Δh per run, both regimes' thresholds, the verdict
and what decided it.

    python benchmarks/reanalyse.py                      # every examples/results/**/result.json
    python benchmarks/reanalyse.py DIR [DIR ...]        # run directories holding result.json
    python benchmarks/reanalyse.py --write-status DIR …  # also rewrite each DIR/status.json under today's rules

For each run (its result.json, judged against its own recorded spec by :func:`spx.analysis.judge.judge`, the
judgement ``spx report`` and the operator make) prints two tables:

1. **Δg and Δh** at 1024, 2048 and 8192 tokens (where measured; never interpolated): the split's GPU
   difference (split − replicated GPU span) and host difference (split − replicated host issue time), µs per
   call = per layer, each with its 95 % interval (paired bootstrap over rounds; Δg's widened by a modelled
   gather prior's own band). Negative: the split is shorter. A graph point has Δg only (a replay's host cost
   does not depend on what it holds).
2. **The decision**: each regime's recommended threshold, whether the regimes agree at the run's gate
   threshold, the verdict and ``kernel.decidedBy`` as gated (a modelled gather caps every speed verdict to
   Inconclusive) and with that cap lifted (``gate.allowModelledGather: true``, standing in for a measured
   gather: what the regimes alone would decide), and the stake at the gate threshold and at 8192 tokens (ms per
   prefill chunk of that many tokens over 40 layers; GPU-bound / host-bound).

Pure arithmetic on recorded samples: runs anywhere (CPU), in a few seconds. Every gather in the committed
H200 results is modelled (one GPU), so every "gather cap lifted" column is a what-if, not a measurement.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spx.analysis.judge import judge
from spx.api.result import KernelResult
from spx.api.status import KernelPoint, KernelStatus, StakeRow
from spx.runner.experiment import build_status, write_status

ROOT = Path(__file__).resolve().parents[1]
AT = (1024, 2048, 8192)


def fmt_delta(value: float | None, low: float | None, high: float | None) -> str:
    """``−19.8 [−23.0, −16.6]`` (µs), ``—`` when not measured."""
    if value is None:
        return "—"
    return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]" if low is not None and high is not None else f"{value:+.1f}"


def deltas(points: list[KernelPoint], tokens: int) -> tuple[str, str]:
    """``(Δg, Δh)`` cells at ``tokens`` (a measured count only)."""
    p = next((q for q in points if q.tokens == tokens), None)
    if p is None:
        return "—", "—"
    dh = "graph: = Δg" if p.execution == "graph" else fmt_delta(p.host_delta_us, p.host_delta_low_us,
                                                                 p.host_delta_high_us)
    return fmt_delta(p.gpu_delta_us, p.gpu_delta_low_us, p.gpu_delta_high_us), dh


def regime_threshold(kernel: KernelStatus, regime: str) -> str:
    """The regime's recommended threshold (tokens), ``none`` (no crossover) or ``—`` (regime not judged)."""
    r = next((x for x in kernel.regimes if x.regime == regime), None)
    if r is None:
        return "—"
    return f"{r.recommended_threshold_tokens:,}" if r.recommended_threshold_tokens is not None else "none"


def stake_ms(kernel: KernelStatus, tokens: int) -> str:
    """``+0.79 / −1.13``: ms per prefill chunk of ``tokens`` (GPU-bound / host-bound); ``—`` outside the range."""
    from spx.analysis.band import stake_at

    row: StakeRow = stake_at(kernel.points, "reanalyse", float(tokens), host=True)
    if row.saving_ms_per_chunk is None:
        return "—"
    host = f"{row.host_saving_ms_per_chunk:+.2f}" if row.host_saving_ms_per_chunk is not None else "—"
    return f"{row.saving_ms_per_chunk:+.2f} / {host}"


def run_name(path: Path) -> str:
    """The run directory relative to examples/results (or as given)."""
    try:
        return str(path.relative_to(ROOT / "examples" / "results"))
    except ValueError:
        return str(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="*", type=Path, help="run directories holding result.json (default: every one "
                                                      "under examples/results)")
    p.add_argument("--write-status", action="store_true",
                   help="rewrite each run's status.json with today's judgement (what spx gate reads), as spx run writes it")
    args = p.parse_args()
    dirs = [d.resolve() for d in args.dirs] or sorted(f.parent for f in (ROOT / "examples" / "results").rglob("result.json"))
    judged = []
    for d in dirs:
        result = KernelResult.model_validate(json.loads((d / "result.json").read_text(encoding="utf-8")))
        lifted = result.spec.model_copy(update={"gate": result.spec.gate.model_copy(
            update={"allow_modelled_gather": True})})
        judged.append((d, result, judge(result, result.spec), judge(result, lifted)))
        if args.write_status:
            write_status(d, build_status(result, judged[-1][2]))

    print("## Δg and Δh (split − replicated, µs per layer, 95 % interval)\n")
    head = ["run", "backend", *(f"Δg @{t}" for t in AT), *(f"Δh @{t}" for t in AT)]
    print("| " + " | ".join(head) + " |")
    print("| " + " | ".join(["---", "---", *["---:"] * (len(head) - 2)]) + " |")
    for d, result, j, _ in judged:
        pts = j.kernel.points if j.kernel else []
        cells = [deltas(pts, t) for t in AT]
        print("| " + " | ".join([run_name(d), result.gemm_backend, *(c[0] for c in cells), *(c[1] for c in cells)])
              + " |")

    print("\n## The decision (gate threshold from each run's spec; stake in ms per prefill chunk, GPU-bound / "
          "host-bound, + saves)\n")
    head = ["run", "gate T", "GPU-bound threshold", "host-bound threshold", "regimes agree", "verdict (decided by)",
            "gather cap lifted: verdict (decided by)", "stake @T", "stake @8192"]
    print("| " + " | ".join(head) + " |")
    print("| " + " | ".join(["---", "---:", "---:", "---:", "---", "---", "---", "---:", "---:"]) + " |")
    for d, result, j, jl in judged:
        k, kl = j.kernel or KernelStatus(), jl.kernel or KernelStatus()
        agree = {True: "yes", False: "**no**", None: "one regime"}[k.regimes_agree]
        t = result.spec.gate.threshold_tokens
        print("| " + " | ".join([
            run_name(d), f"{t:,}", regime_threshold(k, "gpu-bound"), regime_threshold(k, "host-bound"), agree,
            f"{j.verdict} ({k.decided_by})", f"{jl.verdict} ({kl.decided_by})", stake_ms(k, t), stake_ms(k, 8192),
        ]) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
