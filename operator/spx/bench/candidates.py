"""The candidates of one point: the replicated GEMM, the split (``sp_shard``, GEMM, all-gather, trim) and
``pad-free`` (the split with :func:`spx.bench.sequence_parallel.pad_free_shard`).

- ``replicated``: every rank computes ``X[M, K] · Wᵀ`` over all M tokens.
- ``split``: what vLLM 0.33's split path of ``fused_wqa_wkv`` issues
  (``vllm/models/deepseek_v41/attention.py``, through :mod:`spx.bench.sequence_parallel`): ``sp_shard``
  pads M to a multiple of TP (``M_pad``) and keeps rank r's rows ``r·M_pad/TP … (r+1)·M_pad/TP``; the
  GEMM; the all-gather of ``[M_pad/TP, N]`` shards into ``[M_pad, N]`` (rank order = token order);
  the trim to M. With a modelled gather (fewer ranks than TP) the candidate issues ``sp_shard`` and the
  GEMM; the gather's GPU time and host time are added from ``spec.kernel.gatherModel`` (labelled
  modelled) and the trim is issued on a buffer of the gathered shape.
- ``pad-free``: the split with each rank's rows taken as a view and only a short trailing shard padded
  (spx's proposal for vLLM, measured always beside the split). With a modelled gather it plays rank
  TP − 1, the rank that pads when M % TP ≠ 0 (the slowest rank: the all-gather waits for it); with a
  real gather each rank plays itself. Same gather and trim as the split.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spx.api.result import rows_per_rank
from spx.bench.context import BenchContext
from spx.bench.gather_launch import GatherLaunch, build_gather_launch
from spx.bench.sequence_parallel import pad_free_shard, resolve_sp_shard, sp_trim

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
    separates the gather's kernels (``pad_free_gather_walls`` the pad-free's); ``sp_source`` says whose ``sp_shard`` runs (``vllm`` or ``port``).
    ``split_launched`` (modelled gather with a launch group only): the split plus the real 1-rank
    all-gather launch, for the host samples; ``launch`` its launch (whose ``walls_us`` time each call);
    ``pad_free_launched`` / ``pad_free_launch`` the same for ``pad-free``. ``pad_free_rank``: the rank
    ``pad-free`` plays (:func:`pad_free_rank`).
    """

    replicated: Callable[[], torch.Tensor]
    split: Callable[[], torch.Tensor]
    pad_free: Callable[[], torch.Tensor]
    pad_free_rank: int
    x: torch.Tensor
    plan: PointPlan
    gathered: bool
    sp_source: str
    gather_walls: list[float] = field(default_factory=list)
    pad_free_gather_walls: list[float] = field(default_factory=list)
    split_launched: Callable[[], torch.Tensor] | None = None
    pad_free_launched: Callable[[], torch.Tensor] | None = None
    launch: GatherLaunch | None = None
    pad_free_launch: GatherLaunch | None = None

    def launches(self) -> dict[str, Callable[[], torch.Tensor]]:
        """``{"replicated": …, "split": …, "pad-free": …}`` for :func:`spx.bench.timing.bench_time`."""
        return {"replicated": self.replicated, "split": self.split, "pad-free": self.pad_free}

    def host_launches(self) -> dict[str, Callable[[], torch.Tensor]]:
        """What the host samples time instead (``bench_time(host_launches=…)``): the split and pad-free with
        the real launch where it stands in for the modelled gather's host cost, else nothing."""
        if self.split_launched is None or self.pad_free_launched is None:
            return {}
        return {"split": self.split_launched, "pad-free": self.pad_free_launched}


def activations(ctx: BenchContext, tokens: int, k: int, salt: int = 0) -> torch.Tensor:
    """Random ``X[tokens, k]`` in the activation dtype, identical on every rank (TP replicates them)."""
    import torch

    gen = torch.Generator(device=ctx.device).manual_seed(ctx.spec.kernel.seed * 1_000_003 + tokens + salt)
    return torch.randn(tokens, k, generator=gen, device=ctx.device, dtype=torch.float32).to(ctx.dtype)


def pad_free_rank(ctx: BenchContext) -> int:
    """The rank the ``pad-free`` candidate plays: this rank with a real gather; TP − 1 (the rank that pads
    when M % TP ≠ 0) when the gather is modelled on fewer ranks than TP."""
    return ctx.tp - 1 if ctx.world_size < ctx.tp else ctx.rank


def _timed(gather: Callable[[torch.Tensor], torch.Tensor], walls: list[float]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``gather`` with its host wall time (µs) appended to ``walls`` per call (CPU: no CUPTI)."""

    def timed_gather(shard: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter_ns()
        out = gather(shard)
        walls.append((time.perf_counter_ns() - t0) / 1e3)
        return out

    return timed_gather


def _sharded(proj: Callable[[torch.Tensor], torch.Tensor], shard: Callable[[torch.Tensor], torch.Tensor],
             x: torch.Tensor, tokens: int, gather: Callable[[torch.Tensor], torch.Tensor] | None,
             trim_buffer: torch.Tensor | None, launch: GatherLaunch | None = None) -> Callable[[], torch.Tensor]:
    """shard → GEMM → gather → trim (or, with a modelled gather: the real 1-rank ``launch`` if given and the
    trim on ``trim_buffer``, returning the rank's shard output)."""

    def run() -> torch.Tensor:
        y = proj(shard(x))
        if gather is not None:
            return sp_trim(gather(y), tokens)
        if launch is not None:
            launch(y)
        if trim_buffer is not None:  # modelled gather: the trim vLLM issues, on a buffer of its shape
            sp_trim(trim_buffer, tokens)
        return y

    return run


def build_candidates(ctx: BenchContext, tokens: int) -> Candidates:
    """Random activations ``X[M, K]`` and the three candidates of the point at ``tokens`` (module docstring)."""
    import torch

    plan = PointPlan.of(tokens, ctx.tp)
    n = ctx.spec.projection.output_size
    x = activations(ctx, tokens, ctx.spec.projection.hidden_size)
    proj = ctx.projection
    shard_fn, sp_source = resolve_sp_shard(ctx.tp, ctx.rank, use_vllm=ctx.gather_backend == "vllm")
    pf_rank = pad_free_rank(ctx)

    def pf_shard(t: torch.Tensor) -> torch.Tensor:
        return pad_free_shard(t, ctx.tp, pf_rank)

    gathered = not (ctx.gather_source == "modelled" or ctx.gather_backend == "none")
    walls: tuple[list[float], list[float]] = ([], [])
    gathers: list[Callable[[torch.Tensor], torch.Tensor] | None] = [None, None]
    if gathered:  # one gather (own output buffer, own host walls on CPU) per sharded candidate
        gathers = [gather_fn(ctx, plan.padded_tokens, n) for _ in range(2)]
        if ctx.device.type == "cpu":
            gathers = [_timed(g, w) for g, w in zip(gathers, walls, strict=True) if g is not None]
    trim_buffer = torch.empty(plan.padded_tokens, n, dtype=ctx.dtype, device=ctx.device) if ctx.tp > 1 else None
    cands = Candidates(replicated=lambda: proj(x), split=_sharded(proj, shard_fn, x, tokens, gathers[0], trim_buffer),
                       pad_free=_sharded(proj, pf_shard, x, tokens, gathers[1], trim_buffer), pad_free_rank=pf_rank,
                       x=x, plan=plan, gathered=gathered, sp_source=sp_source, gather_walls=walls[0],
                       pad_free_gather_walls=walls[1])
    if not gathered and ctx.launch_group is not None:
        # as split / pad-free, with the real 1-rank launch where the gather goes (one launch each: own walls)
        launch, pf_launch = (build_gather_launch(ctx.launch_group, plan.rows_per_rank, n, ctx.dtype, ctx.device)
                             for _ in range(2))
        cands.split_launched = _sharded(proj, shard_fn, x, tokens, None, trim_buffer, launch)
        cands.pad_free_launched = _sharded(proj, pf_shard, x, tokens, None, trim_buffer, pf_launch)
        cands.launch, cands.pad_free_launch = launch, pf_launch
    return cands
