"""The all-gather *launch* the split issues where the gather itself is modelled (fewer ranks than TP).

With one GPU standing for TP ranks, the all-gather's GPU time is modelled (``spec.kernel.gatherModel``:
no peers, no link). Its host cost need not be: this rank alone forms a process group (NCCL on GPUs,
gloo on CPU) and the split's eager host samples issue a real ``all_gather_into_tensor`` of the shard
``[M_pad/TP, N]`` in the activation dtype (the tensor vLLM 0.33's ``sp_all_gather`` gathers,
``vllm/models/common/ops/sequence_parallel.py``) through it: torch.distributed's checks, the stream
synchronisation with NCCL's stream and the NCCL enqueue all run as they would with TP ranks. What a
1-rank group cannot show is the wait for peers and the link; the GPU span of the gather stays modelled
(the point's ``gatherSource`` stays ``modelled``). On the lent hosts one such launch issued in
17–27 µs (``benchmarks/gather_host_issue.py``), above ``gatherModel.hostUs``'s default 15 µs.

:func:`one_rank_group` makes the group (every rank calls it, in the same order);
:func:`build_gather_launch` the launch of one point.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def one_rank_group(device: torch.device, rank: int, world_size: int) -> Any:
    """A process group holding this rank alone; initialises torch.distributed if nothing has.

    ``world_size == 1`` without a process group: a 1-rank default group (NCCL on CUDA, gloo on CPU)
    over an in-process ``HashStore`` (no port, no rendezvous), returned as ``dist.group.WORLD``.
    Several ranks: ``dist.new_group([r])`` for every ``r`` in order (torch needs every rank to take
    part in each ``new_group``), returning this rank's. Must be called by every rank of the run.

    Raises:
        RuntimeError: torch.distributed cannot create the group (e.g. NCCL without a GPU).
    """
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        if world_size != 1:
            raise RuntimeError(f"{world_size} ranks but no process group: initialise it before one_rank_group")
        store = dist.HashStore()  # type: ignore[attr-defined]  # in-process: one rank needs no rendezvous
        dist.init_process_group(backend, store=store, rank=0, world_size=1,
                                device_id=device if device.type == "cuda" else None)
    if dist.get_world_size() == 1:
        return dist.group.WORLD
    mine = None
    for r in range(dist.get_world_size()):
        group = dist.new_group([r], backend=backend)
        if r == rank:
            mine = group
    return mine


@dataclass
class GatherLaunch:
    """``launch(shard)``: the all-gather of ``shard`` through a 1-rank group; returns its output.

    ``walls_us`` collects the host time (µs, ``perf_counter_ns``) of every call: the launch's own share
    of a split host sample (:attr:`spx.api.result.PointResult.gather_host_us`).
    """

    group: Any
    out: torch.Tensor
    walls_us: list[float] = field(default_factory=list)

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        t0 = time.perf_counter_ns()
        dist.all_gather_into_tensor(self.out, shard, group=self.group)
        self.walls_us.append((time.perf_counter_ns() - t0) / 1e3)
        return self.out


def build_gather_launch(group: Any, rows: int, n: int, dtype: torch.dtype, device: torch.device) -> GatherLaunch:
    """The launch of one point: ``[rows, n]`` shards of ``dtype`` on ``device`` (``rows`` = M_pad / TP)."""
    import torch

    return GatherLaunch(group=group, out=torch.empty(rows, n, dtype=dtype, device=device))
