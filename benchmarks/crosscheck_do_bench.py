"""Cross-check spx's CUPTI-span timing of the replicated GEMM against an independent timer.

Builds the projection exactly as ``spx.bench`` does (same weights, same backend code) and times it
with ``triton.testing.do_bench`` (CUDA events around each call, a 256 MB cache flush between calls,
median). do_bench includes the host launch overhead the CUPTI span excludes, so expect it a few µs
to ~15 µs *higher*; a larger gap, or a lower do_bench figure, means one of the two is wrong.

    python benchmarks/crosscheck_do_bench.py [--tokens 8192] [result.json ...]

Prints: backend, tokens, do_bench median µs, and the spx replicated median from each result.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("results", nargs="*", type=Path, help="spx result.json files to compare with")
    args = ap.parse_args()

    import torch
    import triton

    from spx.api import ExperimentSpec
    from spx.bench.gemm import build_projection
    from spx.bench.weights import random_fp8_block_weight

    spx_us: dict[str, float] = {}
    for path in args.results:
        doc = json.loads(path.read_text())
        for p in doc["points"]:
            if p["tokens"] == args.tokens:
                spx_us[doc["gemmBackend"]] = p["replicated"]["medianUs"]
    spec = ExperimentSpec()
    dev = torch.device("cuda", 0)
    gen = torch.Generator(device=dev).manual_seed(spec.kernel.seed)
    weight = random_fp8_block_weight(spec.projection.output_size, spec.projection.hidden_size, dev, gen)
    x = torch.randn(args.tokens, spec.projection.hidden_size, device=dev).to(torch.bfloat16)
    flops = 2 * args.tokens * spec.projection.hidden_size * spec.projection.output_size
    print(f"{'backend':11} {'tokens':>6} {'do_bench µs':>11} {'TFLOP/s':>8} {'spx CUPTI µs':>12} {'diff µs':>8}")
    for backend in ("torch-bf16", "torch-fp8"):
        proj = build_projection(backend, weight, spec, dev)
        us = triton.testing.do_bench(lambda proj=proj: proj(x), warmup=100, rep=500, return_mode="median") * 1e3
        ref = spx_us.get(backend)
        diff = f"{us - ref:8.2f}" if ref else "       -"
        ref_s = f"{ref:12.2f}" if ref else "           -"
        print(f"{backend:11} {args.tokens:6d} {us:11.2f} {flops / us / 1e6:8.1f} {ref_s} {diff}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
