"""The adaptive sweep (``sweep.refine``) against the fixed dense sweep, in one run: bracket, samples, wall time.

On one H200 (the lead's command; humming is the kernel vLLM 0.33 runs for these linears on SM90):

    python benchmarks/adaptive_vs_dense.py --gemm-backend humming --out /tmp/adaptive-vs-dense

runs ``spx run examples/deepseek-v41-tp8.yaml`` twice: the dense sweep 32 … 1024 (13 counts, as
``examples/results/h200-1gpu/humming-dense``) and the adaptive one (coarse 32, 128, 512, 1024, then
at most ``--max-added`` counts chosen by :func:`spx.analysis.refine.plan_refinement`), and prints one
table row per mode: the break-even and its bracket (last losing, first winning measured count),
the bracket's half-width in % of the break-even, the samples used (both candidates, every point),
their share of the dense sweep's (the issue's target: ≤ 40 %) and the wall time of each ``spx run``
(process start included). "same bracket": the adaptive bracket lies inside the dense one. CPU smoke check (small shapes, 2 gloo ranks; the timings say nothing about GPUs):

    python benchmarks/adaptive_vs_dense.py --cpu-smoke --out /tmp/adaptive-smoke
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spx.analysis.judge import judge
from spx.api import load_experiment
from spx.api.result import KernelResult

REPO = Path(__file__).resolve().parents[1]
DENSE = [32, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 768, 1024]
COARSE = [32, 128, 512, 1024]
SMOKE_DENSE = [8, 32, 128, 512]
SMOKE_COARSE = [8, 512]
SMOKE_KERNEL = {"device": "cpu", "timer": "host", "gather": "gloo", "gemmBackend": "auto", "samples": 5, "warmup": 1,
                "cudaGraphs": False, "l2Flush": False}
SMOKE_PROJECTION = {"name": "fused_wqa_wkv-small", "hiddenSize": 1024, "outputSizes": [256, 128],
                    "weightFormat": "fp8-block128-ue8m0", "activationDtype": "bfloat16"}


def experiment(args: argparse.Namespace, tokens: list[int], refine: dict[str, Any] | None, samples: int) -> dict[str, Any]:
    """The experiment document of one mode (JSON, which ``spx run`` reads as YAML)."""
    base = load_experiment(Path(args.experiment).read_text(), args.experiment).model_dump(by_alias=True, exclude_none=True)
    spec = base["spec"]
    spec["sweep"] = {"tokens": tokens, **({"refine": refine} if refine else {})}
    if args.cpu_smoke:
        spec["projection"], spec["kernel"] = SMOKE_PROJECTION, dict(SMOKE_KERNEL)
        spec["parallelism"] = {"tensorParallelSize": 2}
        spec.pop("resources", None)
    elif args.gemm_backend:
        spec["kernel"]["gemmBackend"] = args.gemm_backend
    spec["kernel"]["samples"] = samples
    return base


def run(doc: dict[str, Any], out: Path) -> tuple[KernelResult, float]:
    """``spx run`` of ``doc`` into ``out``; returns the result and the wall seconds."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "experiment.yaml"
    path.write_text(json.dumps(doc, indent=1))
    exe = Path(sys.executable).with_name("spx")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "spx"]
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, "run", str(path), "--out", str(out / "run"), "--overwrite"], capture_output=True,
                          text=True, cwd=REPO)
    wall = time.monotonic() - t0
    (out / "spx-run.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 and not (out / "run" / "result.json").exists():
        raise SystemExit(f"spx run failed ({proc.returncode}); log: {out / 'spx-run.log'}\n{proc.stderr[-2000:]}")
    return KernelResult.model_validate_json((out / "run" / "result.json").read_text()), wall


def row(name: str, result: KernelResult, wall: float) -> dict[str, Any]:
    """One mode's figures (break-even, bracket, samples) from its result, judged like ``spx report``."""
    k = judge(result, result.spec).kernel
    u = k.uncertainty if k else None
    lo, hi = (u.bracket_low_tokens, u.bracket_high_tokens) if u else (None, None)
    be = k.crossover_tokens if k else None
    samples = sum(len(p.replicated.samples_us) + len(p.split.samples_us) for p in result.points)
    return {"mode": name, "points": len(result.points), "break_even": be, "lo": lo, "hi": hi,
            "half_pct": 100 * (hi - lo) / 2 / be if be and lo is not None and hi is not None else None,
            "confidence": k.crossover_confidence if k else "none", "samples": samples, "wall": wall,
            "added": [p.tokens for p in result.points if p.added_because]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experiment", default=str(REPO / "examples" / "deepseek-v41-tp8.yaml"))
    p.add_argument("--gemm-backend", default="humming")
    p.add_argument("--out", type=Path, required=True, help="directory for both runs' outputs")
    p.add_argument("--samples", type=int, default=50, help="samples per point of the dense sweep (default 50)")
    p.add_argument("--adaptive-samples", type=int, default=30, help="samples per point of the adaptive sweep")
    p.add_argument("--max-added", type=int, default=4, help="refine.maxAddedPoints (default 4)")
    p.add_argument("--bounds", action="store_true", help="refine.bounds: also bracket the intervals' crossings")
    p.add_argument("--cpu-smoke", action="store_true", help="small shapes on CPU, 2 gloo ranks: checks the pipeline only")
    args = p.parse_args()
    dense_tokens, coarse = (SMOKE_DENSE, SMOKE_COARSE) if args.cpu_smoke else (DENSE, COARSE)
    samples, adaptive_samples = (5, 5) if args.cpu_smoke else (args.samples, args.adaptive_samples)
    refine = {"maxAddedPoints": args.max_added, "pointsPerRound": 2, "maxRounds": 6, "bounds": args.bounds}
    dense = row("dense", *run(experiment(args, dense_tokens, None, samples), args.out / "dense"))
    adaptive = row("adaptive", *run(experiment(args, coarse, refine, adaptive_samples), args.out / "adaptive"))
    share = 100 * adaptive["samples"] / dense["samples"]
    # the same bracket: the adaptive one lies inside the dense one (a narrower bracket elsewhere, e.g.
    # below a dip the coarse counts never saw, is a different answer, not the same one)
    same = (dense["lo"] is not None and adaptive["lo"] is not None
            and dense["lo"] <= adaptive["lo"] and adaptive["hi"] <= dense["hi"])
    (args.out / "summary.json").write_text(json.dumps({"dense": dense, "adaptive": adaptive, "same_bracket": same,
                                                       "samples_pct_of_dense": share}, indent=1))
    if args.cpu_smoke:
        print("CPU smoke run: timings say nothing about GPUs; this checks the pipeline only")
    print("| mode | points | break-even | bracket | ± % | confidence | samples | % of dense | wall s | added |")
    print("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | --- |")
    for r in (dense, adaptive):
        be = f"{r['break_even']:,.0f}" if r["break_even"] else "none"
        br = f"{r['lo']}–{r['hi']}" if r["lo"] is not None else "—"
        half = f"{r['half_pct']:.0f}" if r["half_pct"] is not None else "—"
        print(f"| {r['mode']} | {r['points']} | {be} | {br} | {half} | {r['confidence']} | {r['samples']:,} | "
              f"{100 * r['samples'] / dense['samples']:.0f} | {r['wall']:.1f} | {r['added'] or ''} |")
    narrower = same and (adaptive["lo"], adaptive["hi"]) != (dense["lo"], dense["hi"])
    print(f"same bracket: {'yes' if same else 'no'}"
          f"{' (strictly inside the dense one: narrower, not identical)' if narrower else ''}; "
          f"samples {share:.0f} % of the dense sweep's "
          f"({'within' if share <= 40 else 'above'} the 40 % target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
