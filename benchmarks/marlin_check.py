"""Build (if needed), check and time vLLM 0.33's MXFP8 Marlin GEMM on this GPU, outside the sweep.

    python benchmarks/marlin_check.py --vllm-src vllm-0.33.0.tar.gz --build build/marlin
    python benchmarks/marlin_check.py --lib build/marlin/spx_marlin.so          # already built

For the V4.1 ``fused_wqa_wkv`` shape (N = 1280 + 512, K = 5120, 32×32 UE8M0 blocks): the relative
Frobenius error of Marlin's output against ``x.float() @ W_dequant.float().T`` at several M (fresh random
data each, outputs poisoned with NaN first), that a CUDA-graph replay gives the eager result bit for
bit, and the median time (``triton.testing.do_bench`` on a graph replay, µs; includes launch overhead,
unlike the sweep's CUPTI spans) at M = 8192 and its TP8 shard of 1024 rows. Prints a table; ``--json``
writes the numbers. Needs a CUDA GPU of SM80+.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

N_OUT, K_IN = 1280 + 512, 5120
CHECK_M = (1, 6, 16, 100, 1024, 2048, 8192)
TIME_M = (1024, 8192)
REL_TOL = 1e-2  # bf16 activations and bf16 output (8 mantissa bits): ~4e-3 expected


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", type=Path, help="a built spx_marlin.so (sets SPX_MARLIN_LIB)")
    p.add_argument("--vllm-src", type=Path, help="vLLM 0.33.0 sdist or folder: build the library first")
    p.add_argument("--build", type=Path, default=ROOT / "build" / "marlin", help="build folder")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args()

    import torch
    import triton.testing

    from spx.api.spec import ExperimentSpec
    from spx.bench.gemm import marlin
    from spx.bench.weights import quantize_weight_block_fp8

    result: dict[str, object] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.vllm_src:
        from spx.bench.gemm.marlin_build import build

        t0 = time.monotonic()
        lib = build(args.vllm_src, args.build)
        result["build_s"] = round(time.monotonic() - t0, 1)
        args.lib = lib
    if args.lib:
        os.environ[marlin.MARLIN_LIB_ENV] = str(args.lib)
    device = torch.device("cuda", 0)
    ok, source = marlin.marlin_available(device)
    if not ok:
        print(f"error: {source}", file=sys.stderr)
        return 2
    result["ops"] = source
    spec = ExperimentSpec.model_validate(
        {"projection": {"name": "fused_wqa_wkv", "hiddenSize": K_IN, "outputSizes": [1280, 512],
                        "weightFormat": "mxfp8-block32-ue8m0", "activationDtype": "bfloat16"},
         "parallelism": {"tensorParallelSize": 8}, "sweep": {"tokens": [8192]}}
    )
    gen = torch.Generator(device=device).manual_seed(0)
    w = torch.randn(N_OUT, K_IN, generator=gen, device=device) * K_IN**-0.5
    weight = quantize_weight_block_fp8(w, 32)
    proj = marlin.build_marlin_projection(weight, spec, device)
    w_ref = weight.dequantize(torch.float32)
    rows = []
    for m in CHECK_M:
        x = torch.randn(m, K_IN, generator=gen, device=device, dtype=torch.bfloat16)
        ref = x.float() @ w_ref.T
        y = proj(x)
        graph_out = torch.full((m, N_OUT), float("nan"), device=device, dtype=torch.bfloat16)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            graph_out.copy_(proj(x))
        graph_out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        rel = float((y.float() - ref).norm() / ref.norm())
        rows.append({"m": m, "rel_err": rel, "graph_equal": bool(torch.equal(graph_out, y)),
                     "nan": bool(y.isnan().any())})
    times = {}
    for m in TIME_M:
        x = torch.randn(m, K_IN, generator=gen, device=device, dtype=torch.bfloat16)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            proj(x)
        times[m] = float(triton.testing.do_bench(g.replay, warmup=100, rep=500, return_mode="median")) * 1e3
    result["check"] = rows
    result["do_bench_us"] = times
    print(f"Marlin MXFP8 on {result['gpu']} (ops: {source})")
    print(f"{'M':>6} {'rel err':>10} {'graph==eager':>13}")
    for r in rows:
        print(f"{r['m']:>6} {r['rel_err']:>10.2e} {str(r['graph_equal']):>13}")
    for m, us in times.items():
        flops = 2 * m * N_OUT * K_IN
        print(f"do_bench M={m}: {us:.1f} µs ({flops / us / 1e6:.1f} TFLOP/s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    bad = [r for r in rows if r["rel_err"] > REL_TOL or r["nan"] or not r["graph_equal"]]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
