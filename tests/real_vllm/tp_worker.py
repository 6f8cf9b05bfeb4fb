"""One rank of the 2-rank CPU check in ``test_layer.py``: vLLM's TP group over gloo, the real layer, and
``_fused_wqa_wkv_gemm``'s split path (``sp_shard`` → layer → ``sp_all_gather``) against the replicated
layer; vLLM's ``sp_all_gather`` through ``build_vllm_gather``. Writes ``rank<r>.json`` into argv[1].

Run by the test with ``RANK``, ``WORLD_SIZE=2``, ``MASTER_ADDR``, ``MASTER_PORT`` set.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch

# run as a script: its own folder (blockweights, v41spec) is sys.path[0]
from blockweights import random_block_weight
from v41spec import v41_spec

from spx.bench import vllm_backend


def main() -> None:
    out_dir = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    spec = v41_spec(tensor_parallel_size=2)
    weight = random_block_weight(spec.projection.output_size, spec.projection.hidden_size, 32, seed=7)
    proj = vllm_backend.build_vllm_projection(spec, "cpu", weight)
    from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

    report: dict[str, object] = {
        "rank": rank,
        "tpRank": get_tensor_model_parallel_rank(),
        "tpWorldSize": get_tensor_model_parallel_world_size(),
        "info": proj.describe(),
        "points": [],
    }
    gen = torch.Generator().manual_seed(11)
    for tokens in (1, 7, 64, 129):
        x = torch.randn(tokens, spec.projection.hidden_size, generator=gen).to(torch.bfloat16)  # same on both ranks
        replicated = proj(x)
        split = proj.split(x)
        report["points"].append({  # type: ignore[union-attr]
            "tokens": tokens,
            "shape": list(split.shape),
            "maxAbsDiff": (split.float() - replicated.float()).abs().max().item(),
            "maxAbs": replicated.float().abs().max().item(),
        })
    n = spec.projection.output_size
    gather = vllm_backend.build_vllm_gather(spec, "cpu", 8, n, torch.bfloat16)
    shard = torch.full((4, n), float(rank + 1), dtype=torch.bfloat16)
    gathered = gather(shard)
    report["gather"] = {"shape": list(gathered.shape), "rows": gathered[:, 0].float().tolist(), "path": gather.path}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
