"""The two candidates of one point: the replicated GEMM and the split (``sp_shard``, GEMM, all-gather, trim).

- ``replicated``: every rank computes ``X[M, K] · Wᵀ`` over all M tokens.
- ``split``: what vLLM 0.33's split path of ``fused_wqa_wkv`` issues
  (``vllm/models/deepseek_v41/attention.py``, through :mod:`spx.bench.sequence_parallel`): ``sp_shard``
  pads M to a multiple of TP (``M_pad``) and keeps rank r's rows ``r·M_pad/TP … (r+1)·M_pad/TP``; the
  GEMM; the all-gather of ``[M_pad/TP, N]`` shards into ``[M_pad, N]`` (rank order = token order);
  the trim to M. With a modelled gather (fewer ranks than TP) the candidate issues ``sp_shard`` and the
  GEMM; the gather's GPU time and host time are added from ``spec.kernel.gatherModel`` (labelled
  modelled) and the trim is issued on a buffer of the gathered shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spx.api.result import rows_per_rank
from spx.bench.context import BenchContext
from spx.bench.sequence_parallel import resolve_sp_shard, sp_trim

if TYPE_CHECKING:
    import torch



@dataclass
class PointPlan:
    """Shapes of one token count: M, M padded to a multiple of TP, rows per rank."""

    tokens: int
    padded_tokens: int
    rows_per_rank: int

    @classmethod
    def of(cls, tokens: int, tp: int) -> PointPlan:
        """``M = tokens`` padded up to a multiple of ``tp``, split into ``tp`` equal shards.

        Raises:
            ValueError: when ``tokens < 1`` or ``tp < 1``.
        """
        rows = rows_per_rank(tokens, tp)
        return cls(tokens, rows * tp, rows)


def gather_fn(ctx: BenchContext, padded_tokens: int, n: int, dtype: torch.dtype | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The all-gather of ``[rows, n]`` shards into ``[padded_tokens, n]`` (rank order = token order).

    ``nccl``: ``all_gather_into_tensor`` into a preallocated output; ``gloo``: ``all_gather`` + cat;
    ``vllm``: vLLM's ``sp_all_gather`` (:func:`spx.bench.vllm_backend.build_vllm_gather`).

    Raises:
        AssertionError: for a gather backend with nothing to run (``modelled``, ``none``).
    """
    import torch
    import torch.distributed as dist

    dtype = dtype or ctx.dtype
    if ctx.gather_backend == "nccl":
        out = torch.empty(padded_tokens, n, dtype=dtype, device=ctx.device)

        def nccl_gather(shard: torch.Tensor) -> torch.Tensor:
            dist.all_gather_into_tensor(out, shard)
            return out

        return nccl_gather
    if ctx.gather_backend == "gloo":

        def gloo_gather(shard: torch.Tensor) -> torch.Tensor:
            parts = [torch.empty_like(shard) for _ in range(ctx.world_size)]
            dist.all_gather(parts, shard.contiguous())
            return torch.cat(parts)

        return gloo_gather
    if ctx.gather_backend == "vllm":
        from spx.bench import vllm_backend

        return vllm_backend.build_vllm_gather(ctx.spec, ctx.device, padded_tokens, n, dtype)
    raise AssertionError(f"no gather function for gather backend {ctx.gather_backend}")


def gather_path(ctx: BenchContext, padded_tokens: int) -> str:
    """Which all-gather ran at this size: ``nccl``/``gloo``, vLLM's ``custom``/``nccl``, ``modelled`` or ``none``."""
    if ctx.gather_backend == "vllm":
        from spx.bench.vllm_backend import GATHER_PATHS

        return f"vllm-{GATHER_PATHS.get(padded_tokens, 'unknown')}"
    return ctx.gather_backend


@dataclass
class Candidates:
    """The callables of one point and the tensors they read (kept alive for CUDA graphs).

    ``gather_walls`` collects the host wall time (µs) of every gather call on CPU, where no CUPTI
    separates the gather's kernels; ``sp_source`` says whose ``sp_shard`` runs (``vllm`` or ``port``).
    """

    replicated: Callable[[], torch.Tensor]
    split: Callable[[], torch.Tensor]
    x: torch.Tensor
    plan: PointPlan
    gathered: bool
    sp_source: str
    gather_walls: list[float] = field(default_factory=list)

    def launches(self) -> dict[str, Callable[[], torch.Tensor]]:
        """``{"replicated": …, "split": …}`` for :func:`spx.bench.timing.bench_time`."""
        return {"replicated": self.replicated, "split": self.split}


def activations(ctx: BenchContext, tokens: int, k: int, salt: int = 0) -> torch.Tensor:
    """Random ``X[tokens, k]`` in the activation dtype, identical on every rank (TP replicates them)."""
    import torch

    gen = torch.Generator(device=ctx.device).manual_seed(ctx.spec.kernel.seed * 1_000_003 + tokens + salt)
    return torch.randn(tokens, k, generator=gen, device=ctx.device, dtype=torch.float32).to(ctx.dtype)


def build_candidates(ctx: BenchContext, tokens: int) -> Candidates:
    """Random activations ``X[M, K]`` and both candidates of the point at ``tokens`` (module docstring)."""
    import torch

    plan = PointPlan.of(tokens, ctx.tp)
    n = ctx.spec.projection.output_size
    x = activations(ctx, tokens, ctx.spec.projection.hidden_size)
    proj = ctx.projection
    shard_fn, sp_source = resolve_sp_shard(ctx.tp, ctx.rank, use_vllm=ctx.gather_backend == "vllm")
    gathered = not (ctx.gather_source == "modelled" or ctx.gather_backend == "none")
    gather = gather_fn(ctx, plan.padded_tokens, n) if gathered else None
    walls: list[float] = []
    if gather is not None and ctx.device.type == "cpu":
        inner = gather

        def timed_gather(shard: torch.Tensor) -> torch.Tensor:
            t0 = time.perf_counter_ns()
            out = inner(shard)
            walls.append((time.perf_counter_ns() - t0) / 1e3)
            return out

        gather = timed_gather
    trim_buffer = torch.empty(plan.padded_tokens, n, dtype=ctx.dtype, device=ctx.device) if ctx.tp > 1 else None

    def replicated() -> torch.Tensor:
        return proj(x)

    def split() -> torch.Tensor:
        y = proj(shard_fn(x))
        if gather is not None:
            return sp_trim(gather(y), tokens)
        if trim_buffer is not None:  # modelled gather: the trim vLLM issues, on a buffer of its shape
            sp_trim(trim_buffer, tokens)
        return y

    return Candidates(replicated=replicated, split=split, x=x, plan=plan, gathered=gathered, sp_source=sp_source,
                      gather_walls=walls)
