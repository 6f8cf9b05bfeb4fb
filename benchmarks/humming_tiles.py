"""Humming's tile choice per token count: the replicated GEMM's M rows and the TP shard's ceil(M / TP) rows.

Humming (humming-kernels 0.1.19, the kernel vLLM 0.33 runs for these MXFP8 linears on SM90) picks its
tuning config (block shape M×N×K, warp shape, stages, …) by M from a heuristic
(``humming.tune.get_heuristics_config``, ``humming/tune/base.py`` ``get_config``: the block's M is the
multiple of 16 that wastes the fewest rows), so the replicated and the shard GEMM step at different
counts: the dips of the speed-up curve. Needs a CUDA SM90 GPU and humming; prints one table row per count:

    python benchmarks/humming_tiles.py --tokens 32 48 64 80 96 128 160 192 216 256 384 512 768 1024 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KEYS = ("block_shape", "warp_shape", "num_stages", "num_ctas_per_sm")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experiment", default=str(REPO / "examples" / "deepseek-v41-tp8.yaml"))
    p.add_argument("--tokens", type=int, nargs="+", required=True)
    p.add_argument("--json", type=Path, help="also write every config (all keys) here")
    args = p.parse_args()
    import torch
    from humming.tune import get_heuristics_config

    from spx.api import load_experiment
    from spx.bench.gemm import weight_block_of
    from spx.bench.gemm.humming import prepare_humming_linear
    from spx.bench.weights import random_block_fp8_weight

    spec = load_experiment(Path(args.experiment).read_text(), args.experiment).spec
    tp = spec.parallelism.tensor_parallel_size
    dev = torch.device("cuda", 0)
    n, k = sum(spec.projection.output_sizes), spec.projection.hidden_size
    w = random_block_fp8_weight(n, k, weight_block_of(spec), dev, torch.Generator(device=dev).manual_seed(0))
    lc = prepare_humming_linear(w, list(spec.projection.output_sizes), torch.bfloat16, dev).layer_config
    rows: dict[str, Any] = {}
    print(f"| tokens | replicated rows | its config | shard rows (TP{tp}) | its config |")
    print("| ---: | ---: | --- | ---: | --- |")
    for m in args.tokens:
        shard = math.ceil(m / tp)
        cfgs = {r: dict(get_heuristics_config(lc, shape_m=r, device=dev)) for r in (m, shard)}
        rows[str(m)] = {"replicated": cfgs[m], "shard_rows": shard, "shard": cfgs[shard]}
        short = {r: ", ".join(f"{key} {c.get(key)}" for key in KEYS if key in c) for r, c in cfgs.items()}
        print(f"| {m} | {m} | {short[m]} | {shard} | {short[shard]} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
