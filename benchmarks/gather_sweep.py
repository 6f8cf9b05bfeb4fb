"""All-gather-only sweep: time ``all_gather_into_tensor`` of ``[M_pad/TP, N]`` shards, fit the gather model.

For the issue "Measure the crossover on 8× H200": measures the gather of the split candidate alone
(same shapes: N = 1792 bf16, M from the DeepSeek-V4.1 sweep, padded to a multiple of TP) with the
kernel bench's method (CUDA graph per size, L2 flush + device barrier before each replay, CUPTI span,
max over ranks, median of N) and fits ``latency + (TP−1)/TP · bytes / busBW`` to it
(:func:`spx.analysis.gather_fit.fit_gather_model`): the numbers to put into ``spec.kernel.gatherModel``.

    torchrun --nproc-per-node 8 benchmarks/gather_sweep.py [--out gather.json]      # GPUs (NCCL)
    torchrun --nproc-per-node 2 benchmarks/gather_sweep.py --cpu                    # CPU smoke (gloo)

Rank 0 prints a table (tokens, shard rows, bytes, median µs, IQR %, model µs) and the fit.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

TOKENS = [6, 12, 24, 48, 96, 384, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--n", type=int, default=1792, help="output width N (1280 + 512)")
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--cpu", action="store_true", help="gloo + host timer (pipeline smoke run only)")
    ap.add_argument("--out", type=Path, default=None, help="write the points and the fit as JSON here")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from spx.analysis.gather_fit import fit_gather_model
    from spx.analysis.stats import candidate_stats
    from spx.analysis.threshold import next_multiple
    from spx.api import GatherModelSpec
    from spx.bench.timing import capture, extract_spans

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world < 2:
        raise SystemExit("run under torchrun with --nproc-per-node >= 2: an all-gather needs ranks")
    cuda = not args.cpu and torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size // 4, dtype=torch.int32,
                        device=device) if cuda else None
    barrier = torch.ones(1, device=device)
    rows_out = []
    for m in [int(t) for t in args.tokens.split(",")]:
        padded = next_multiple(m, world)
        shard = torch.randn(padded // world, args.n, device=device).to(torch.bfloat16)
        out = torch.empty(padded, args.n, device=device, dtype=torch.bfloat16)
        samples: list[float] = []
        if cuda:
            graph, _ = capture(lambda out=out, shard=shard: (dist.all_gather_into_tensor(out, shard), out)[1])
            for _ in range(5):
                graph.replay()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for i in range(args.samples):
                    torch.cuda.synchronize()
                    flush.zero_()
                    dist.all_reduce(barrier)
                    with record_function(f"spx/gather/{i}"):
                        graph.replay()
                torch.cuda.synchronize()
            spans = extract_spans(list(prof.profiler.kineto_results.events()))
            samples = [spans[f"spx/gather/{i}"].span_us for i in range(args.samples)]
        else:
            parts = [torch.empty_like(shard) for _ in range(world)]
            for _ in range(args.samples):
                dist.barrier()
                t0 = time.perf_counter_ns()
                dist.all_gather(parts, shard)
                samples.append((time.perf_counter_ns() - t0) / 1e3)
        t = torch.tensor(samples, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        stats = candidate_stats(t.cpu().tolist())
        rows_out.append({"tokens": m, "rowsPerRank": padded // world, "bytes": padded * args.n * 2,
                         "medianUs": stats.median_us, "iqrPct": stats.iqr_pct})
    dist.destroy_process_group()
    if rank != 0:
        return 0
    fit = fit_gather_model([r["bytes"] for r in rows_out], [r["medianUs"] for r in rows_out], world)
    model = GatherModelSpec(latency_us=fit.latency_us, bus_bandwidth_gbps=fit.bus_bandwidth_gbps)
    calibrated, datasheet = GatherModelSpec(), GatherModelSpec(prior="datasheet")
    print(("CPU smoke run: timings say nothing about GPUs\n" if not cuda else "")
          + f"all-gather of [M_pad/{world}, {args.n}] bf16 over {world} ranks ({'NCCL' if cuda else 'gloo'})")
    print(f"{'tokens':>6} {'rows':>5} {'bytes':>10} {'median µs':>10} {'IQR %':>6} {'fit µs':>8} "
          f"{'h20-cal. µs':>11} {'datasheet µs':>12}")
    for r in rows_out:
        padded = r["bytes"] // (args.n * 2)
        fit_us = model.gather_us(padded, args.n, 2, world)
        cal_us = calibrated.gather_us(padded, args.n, 2, world)
        sheet_us = datasheet.gather_us(padded, args.n, 2, world)
        print(f"{r['tokens']:6d} {r['rowsPerRank']:5d} {r['bytes']:10d} {r['medianUs']:10.2f} {r['iqrPct']:6.2f} "
              f"{fit_us:8.2f} {cal_us:11.2f} {sheet_us:12.2f}")
    print(f"fit (one regime: torch's all_gather_into_tensor is NCCL at every size, not vLLM's custom all-gather): "
          f"latencyUs {fit.latency_us:.2f}, busBandwidthGbps {fit.bus_bandwidth_gbps:.1f} "
          f"(worst relative residual {fit.max_rel_residual:.1%}); priors: {calibrated.describe()} | {datasheet.describe()}")
    if args.out:
        args.out.write_text(json.dumps({"worldSize": world, "n": args.n, "device": device.type, "points": rows_out,
                                        "fit": {"latencyUs": fit.latency_us, "busBandwidthGbps": fit.bus_bandwidth_gbps,
                                                "maxRelResidual": fit.max_rel_residual}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
