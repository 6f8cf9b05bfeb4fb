"""Host time to issue one NCCL all-gather, with the GPU kept busy (a 1-rank group on one GPU).

Prints the median and quartiles (µs) of ``dist.all_gather_into_tensor`` issue times for the split's
``[M/8, 1792]`` bf16 shards, timed by :func:`spx.bench.timing.time_host_issue`. One rank is the launch
path only (no peers to wait for): a lower reference for ``kernel.gatherModel.hostUs``, not an 8-rank
measurement.

    python benchmarks/gather_host_issue.py [--tokens 1024,2048,8192]
"""

from __future__ import annotations

import argparse
import os
import statistics


def main() -> None:
    import torch
    import torch.distributed as dist

    from spx.bench.timing import time_host_issue

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="1024,2048,8192")
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
    try:
        for m in (int(t) for t in args.tokens.split(",")):
            shard = torch.randn(m // 8, 1792, device=device).to(torch.bfloat16)
            out = torch.empty_like(shard)
            for _ in range(10):
                dist.all_gather_into_tensor(out, shard)
            torch.cuda.synchronize()
            times, uncovered = time_host_issue({"gather": lambda out=out, shard=shard: dist.all_gather_into_tensor(out, shard)}, 50)
            q1, q2, q3 = statistics.quantiles(times["gather"], n=4, method="inclusive")
            print(f"nccl all_gather_into_tensor issue, 1 rank, shard [{m // 8}, 1792] bf16: median {q2:.1f} µs "
                  f"(q1 {q1:.1f}, q3 {q3:.1f}; {uncovered} uncovered)")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
