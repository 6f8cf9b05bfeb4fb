"""Cross-check spx's CUPTI-span timing of the GEMM against independent timers (Triton's).

Builds the projection exactly as ``spx.bench`` does (same weight format, same seed, same backend
code) and times it three ways, none of them CUPTI:

- ``do_bench``: ``triton.testing.do_bench`` (CUDA events around each eager call, a 256 MB cache flush
  between calls, median): includes host launch overhead where the host falls behind the GPU;
- ``cudagraph``: ``triton.testing.do_bench_cudagraph`` (events around back-to-back graph replays, no
  flush, median): the GPU never idles, so at large M it runs at sustained-load clocks;
- ``events``: spx's own method with CUDA events instead of CUPTI: one captured graph, before each of
  200 replays a synchronize and a 2×L2 flush, events around the replay alone (median); it carries the
  graph launch (a few µs) that the CUPTI kernel span excludes.

A figure well *below* spx's CUPTI median means one of the timers is wrong.

Two shapes per backend, at ``--tokens`` M (default 8192) and TP (default 8):
- ``replicated``: ``[M, K] · Wᵀ``, compared with the result's replicated median at M tokens;
- ``shard``: ``[M/TP, K] · Wᵀ`` (1024 rows at 8192), compared with the result's ``shardGemmUs`` at M
  tokens (measured shard GEMM span) and its replicated median at M/TP tokens, where the sweep has it.

    python benchmarks/crosscheck_do_bench.py --backends humming,torch-bf16 [--tokens 8192] [result.json ...]
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


def _events_like_spx(proj, x, samples: int = 200) -> float:  # type: ignore[no-untyped-def]
    """Median µs of graph replays timed with CUDA events, each after a synchronize and a 2×L2 flush."""
    import statistics

    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            proj(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = proj(x)
    l2 = torch.cuda.get_device_properties(x.device).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device=x.device)
    times = []
    for i in range(samples + 20):
        torch.cuda.synchronize()
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if i >= 20:
            times.append(start.elapsed_time(end) * 1e3)
    del out
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--backends", default="humming,torch-bf16", help="comma-separated gemm backends")
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
    head = (f"{'backend':11} {'shape':10} {'M':>6} {'do_bench':>9} {'cudagraph':>9} {'events':>8} {'TFLOP/s':>8} "
            f"{'spx CUPTI':>9} {'Δ events':>9} {'Δ do_bench':>10}  spx figure (all µs)")
    print(head + "\n" + "-" * len(head))
    for backend in args.backends.split(","):
        proj = build_projection(backend, weight, spec, dev)
        for shape, m in (("replicated", args.tokens), ("shard", rows)):
            x = torch.randn(m, p.hidden_size, device=dev).to(torch.bfloat16)
            proj(x)  # first call: JIT / autotune outside the timing
            torch.cuda.synchronize()
            us = triton.testing.do_bench(lambda proj=proj, x=x: proj(x), warmup=100, rep=500, return_mode="median") * 1e3
            with torch.cuda.stream(torch.cuda.Stream()):
                g_us = triton.testing.do_bench_cudagraph(lambda proj=proj, x=x: proj(x), rep=500, return_mode="median") * 1e3
            e_us = _events_like_spx(proj, x)
            flops = 2 * m * p.hidden_size * p.output_size
            ref, where = spx_us.get((backend, shape), (None, "-"))
            ref_s = f"{ref:9.2f}" if ref else f"{'-':>9}"
            diff = f"{us - ref:10.2f}" if ref else f"{'-':>10}"
            ediff = f"{e_us - ref:9.2f}" if ref else f"{'-':>9}"
            print(f"{backend:11} {shape:10} {m:6d} {us:9.2f} {g_us:9.2f} {e_us:8.2f} {flops / e_us / 1e6:8.1f} {ref_s} {ediff} {diff}  {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
