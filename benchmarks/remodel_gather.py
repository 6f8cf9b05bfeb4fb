"""Crossover and threshold of one-GPU runs under each gather prior (the shard GEMM as measured).

    python benchmarks/remodel_gather.py examples/results/h200-1gpu/{humming,marlin,torch-bf16}

For each run directory (its result.json, gather modelled) prints the break-even, first winning token
count, recommended threshold and the split's speedup at 1024/2048/8192 tokens under the
``h20-calibrated`` prior (vLLM's custom all-gather / NCCL fitted on the seed's H20 table) and the
``datasheet`` prior (10 µs + 360 GB/s), via :func:`spx.analysis.remodel.remodel_gather`. Pure
arithmetic on recorded samples: runs anywhere.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spx.analysis.judge import judge
from spx.analysis.remodel import remodel_gather
from spx.api.gather_model import GatherModelSpec
from spx.api.result import KernelResult

PRIORS = ("h20-calibrated", "datasheet")
AT = (1024, 2048, 8192)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+", type=Path, help="run directories holding result.json")
    args = p.parse_args()
    header = ["backend", "prior", "break-even", "first win", "threshold", *(f"× @{t}" for t in AT)]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for d in args.dirs:
        result = KernelResult.model_validate(json.loads((d / "result.json").read_text()))
        for prior in PRIORS:
            k = judge(remodel_gather(result, GatherModelSpec(prior=prior)), result.spec).kernel
            assert k is not None
            speed = {pt.tokens: pt.speedup for pt in k.points}
            be = f"{k.crossover_tokens:,.0f} ({k.crossover_confidence})" if k.crossover_tokens else "none"
            print(" | ".join([result.gemm_backend, prior, be, f"{k.first_winning_tokens or '-'}",
                              f"{k.recommended_threshold_tokens or '-'}",
                              *(f"{speed[t]:.2f}" if t in speed else "-" for t in AT)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
