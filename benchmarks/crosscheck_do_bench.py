"""Cross-check spx's CUPTI-span timing of the GEMM against independent timers (Triton's).

Builds the projection exactly as ``spx.bench`` does (same weight format, same seed, same backend
code) and times it with ``triton.testing.do_bench`` (CUDA events around each eager call, a 256 MB
cache flush between calls, median) and ``triton.testing.do_bench_cudagraph`` (CUDA events around
replays of a captured graph, median). do_bench includes the host launch overhead the CUPTI span
excludes, so expect it a few µs higher (more for a backend with Python work per call, e.g. Humming's
config handling); do_bench_cudagraph has no host overhead but no L2 flush either. A do_bench figure
well *below* spx's, or far above both, means one of the timers is wrong.

Two shapes per backend, at ``--tokens`` M (default 8192) and TP (default 8):
- ``replicated``: ``[M, K] · Wᵀ``, compared with the result's replicated median at M tokens;
- ``shard``: ``[M/TP, K] · Wᵀ`` (1024 rows at 8192), compared with the result's ``shardGemmUs`` at M
  tokens (measured shard GEMM span) and its replicated median at M/TP tokens, where the sweep has it.

    python benchmarks/crosscheck_do_bench.py --backends humming torch-bf16 [--tokens 8192] [result.json ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _spx_numbers(paths: list[Path], tokens: int, rows: int) -> dict[tuple[str, str], tuple[float, str]]:
    """``(backend, shape) → (µs, where from)`` out of spx result.json files."""
    out: dict[tuple[str, str], tuple[float, str]] = {}
    for path in paths:
        doc = json.loads(path.read_text())
        backend = doc["gemmBackend"]
        for p in doc["points"]:
            if p["tokens"] == tokens:
                out[(backend, "replicated")] = (p["replicated"]["medianUs"], f"replicated median @ {tokens}")
                if p.get("shardGemmUs") is not None:
                    out[(backend, "shard")] = (p["shardGemmUs"], f"shardGemmUs @ {tokens}")
            if p["tokens"] == rows and (backend, "shard") not in out:
                out[(backend, "shard")] = (p["replicated"]["medianUs"], f"replicated median @ {rows}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--backends", nargs="+", default=["humming", "torch-bf16"])
    ap.add_argument("--weight-format", default=None, help="default: the spec default (mxfp8-block32-ue8m0)")
    ap.add_argument("results", nargs="*", type=Path, help="spx result.json files to compare with")
    args = ap.parse_args()

    import torch
    import triton

    from spx.api import ExperimentSpec
    from spx.bench.gemm import build_projection, weight_block_of
    from spx.bench.weights import random_block_fp8_weight

    rows = args.tokens // args.tp
    spx_us = _spx_numbers(args.results, args.tokens, rows)
    spec = ExperimentSpec()
    if args.weight_format:
        spec = spec.model_copy(update={"projection": spec.projection.model_copy(update={"weight_format": args.weight_format})})
    p = spec.projection
    dev = torch.device("cuda", 0)
    gen = torch.Generator(device=dev).manual_seed(spec.kernel.seed)
    weight = random_block_fp8_weight(p.output_size, p.hidden_size, weight_block_of(spec), dev, gen)
    print(f"weight {p.output_size}x{p.hidden_size} {p.weight_format}, bf16 activations, {torch.cuda.get_device_name(dev)}")
    head = f"{'backend':11} {'shape':10} {'M':>6} {'do_bench':>9} {'cudagraph':>9} {'TFLOP/s':>8} {'spx CUPTI':>9} {'Δ do_bench':>10}  spx figure"
    print(head + "\n" + "-" * len(head))
    for backend in args.backends:
        proj = build_projection(backend, weight, spec, dev)
        for shape, m in (("replicated", args.tokens), ("shard", rows)):
            x = torch.randn(m, p.hidden_size, device=dev).to(torch.bfloat16)
            proj(x)  # first call: JIT / autotune outside the timing
            torch.cuda.synchronize()
            us = triton.testing.do_bench(lambda proj=proj, x=x: proj(x), warmup=100, rep=500, return_mode="median") * 1e3
            with torch.cuda.stream(torch.cuda.Stream()):
                g_us = triton.testing.do_bench_cudagraph(lambda proj=proj, x=x: proj(x), rep=500, return_mode="median") * 1e3
            flops = 2 * m * p.hidden_size * p.output_size
            ref, where = spx_us.get((backend, shape), (None, "-"))
            ref_s = f"{ref:9.2f}" if ref else f"{'-':>9}"
            diff = f"{us - ref:10.2f}" if ref else f"{'-':>10}"
            print(f"{backend:11} {shape:10} {m:6d} {us:9.2f} {g_us:9.2f} {flops / us / 1e6:8.1f} {ref_s} {diff}  {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
