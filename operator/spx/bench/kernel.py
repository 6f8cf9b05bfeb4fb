"""The projection microbenchmark: replicated GEMM vs split GEMM + all-gather over a token sweep.

Method (docs/kernel-benchmark.md "Method", from the seed PR: docs/seed.md), point by point:

- ``replicated``: every rank computes ``X[M, K] · Wᵀ`` over all M tokens.
- ``split``: M is padded up to a multiple of TP (``M_pad``); rank r projects rows
  ``r·M_pad/TP … (r+1)·M_pad/TP``; an all-gather rebuilds ``[M_pad, N]``, trimmed to M (vLLM's
  ``sp_shard`` / ``sp_all_gather``).
- W is random, in the checkpoint's format (``weightFormat``: FP8 e4m3 with UE8M0 scales in 32×32 blocks
  for DeepSeek-V4.1's MXFP8, or 128×128 blocks), then converted the way vLLM converts it for the
  kernel under test (:mod:`spx.bench.gemm`).
- One CUDA graph per candidate and token count; before every measured replay an L2 flush (a write
  of 2× the L2 size) and a device-side barrier across ranks (a one-element all-reduce), both outside
  the timed interval.
- A sample is the CUPTI span of the replay's kernels (:mod:`spx.bench.timing`), one profiler
  session per point; CUDA events are a labelled fallback (``timer: cuda-events``), never used while
  the profiler runs. On CPU (gloo) a host timer is used and the run is a smoke run only.
- Each sample is the max over ranks; a point reports median and IQR of N samples; candidates
  alternate within every round (which goes first alternates too).
- Correctness before timing: outputs poisoned with NaN, one replay each, split compared with
  replicated; the max abs difference is reported. The replicated output is also compared with an fp32
  reference ``x.float() @ W_deq.float().T`` (relative Frobenius error, ``referenceRelError``); above
  :func:`spx.bench.gemm.reference_tolerance` the run fails before that point is timed.
- With fewer ranks than TP the shard GEMM is still measured and the gather is modelled
  (``spec.kernel.gatherModel``); the result says ``gatherSource: modelled``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spx.analysis.stats import candidate_stats
from spx.analysis.threshold import next_multiple
from spx.api.base import utc_now
from spx.api.result import KernelResult, PointResult
from spx.api.spec import ExperimentSpec
from spx.bench.fingerprint import collect_environment
from spx.bench.gemm import (
    activation_dtype,
    build_projection,
    reference_tolerance,
    resolve_gemm_backend,
    weight_block_of,
)

if TYPE_CHECKING:
    import torch

    from spx.bench.gemm import Projection

CANDIDATES = ("replicated", "split")
FAULT_ENV = "SPX_FAULT_INJECT_RANK"  # tests: this rank raises at the first point...
FAULT_TOKENS_ENV = "SPX_FAULT_INJECT_TOKENS"  # ...or at this token count
#: Warm-up replays per point run for at least this long as well as ``spec.kernel.warmup`` rounds: on
#: H200 with 5 warm-ups, the first ~12 samples of the 8192-token replicated GEMM ran 5-13 % slow
#: (222 vs 197 µs; clocks settling under the heavier load), pushing its IQR to 3.1 %.
MIN_WARMUP_S = 0.05


@dataclass
class BenchContext:
    """Everything fixed for a run: where, who, how."""

    spec: ExperimentSpec
    device: torch.device
    rank: int
    world_size: int
    tp: int
    gemm_backend: str
    gemm_backend_reason: str
    gather_backend: str  # nccl | gloo | vllm | modelled | none
    gather_source: str  # measured | modelled
    timer: str  # cupti | cuda-events | host
    cuda_graphs: bool
    projection: Projection
    dtype: torch.dtype
    reference_weight: torch.Tensor | None = None  # float32 [N, K], the dequantised weight
    flush: torch.Tensor | None = None
    barrier_tensor: torch.Tensor | None = None
    kernels_seen: set[str] = field(default_factory=set)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def _resolve_device(spec: ExperimentSpec, local_rank: int) -> torch.device:
    import torch

    want = spec.kernel.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("spec.kernel.device: cuda, but no CUDA GPU is visible; use device: cpu or auto")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _resolve_timer(spec: ExperimentSpec, device: torch.device) -> str:
    timer = spec.kernel.timer
    if device.type == "cpu":
        if timer not in ("auto", "host"):
            raise ValueError(f"spec.kernel.timer: {timer} needs a CUDA GPU; on CPU use timer: host or auto")
        return "host"
    if timer == "host":
        raise ValueError("spec.kernel.timer: host is for CPU smoke runs; on GPUs use cupti (default) or cuda-events")
    return "cupti" if timer == "auto" else timer


def _resolve_gather(spec: ExperimentSpec, device: torch.device, world_size: int, tp: int) -> tuple[str, str]:
    if tp == 1:
        return "none", "measured"
    want = spec.kernel.gather
    if want == "modelled" or world_size < tp:
        return "modelled", "modelled"
    if want == "auto":
        return ("nccl" if device.type == "cuda" else "gloo"), "measured"
    if want == "nccl" and device.type != "cuda":
        raise ValueError("spec.kernel.gather: nccl needs CUDA GPUs; on CPU use gather: gloo or auto")
    return want, "measured"


def preflight(spec: ExperimentSpec, device_type: str, world_size: int) -> list[str]:
    """Check, before any rank starts, that this host can run ``spec``; return notes on what will run.

    ``device_type`` is ``cuda`` or ``cpu`` (what the runner resolved), ``world_size`` the ranks.

    Raises:
        ValueError: a backend, gather or timer the device can't run (same messages as :func:`setup`).
        RuntimeError: ``vllm`` asked for without an importable vLLM.
    """
    import torch

    device = torch.device("cuda", 0) if device_type == "cuda" else torch.device("cpu")
    tp = spec.parallelism.tensor_parallel_size
    gemm, reason = resolve_gemm_backend(spec, device)
    gather, source = _resolve_gather(spec, device, world_size, tp)
    timer = _resolve_timer(spec, device)
    if gemm == "vllm" or gather == "vllm":
        from spx.bench import vllm_backend

        vllm_backend.ensure_vllm()
    return [f"gemm {gemm}, gather {gather} ({source}), timer {timer}, {world_size} rank(s) on {device_type}",
            f"gemm backend: {reason}"]


def setup(spec: ExperimentSpec) -> BenchContext:
    """Initialise this rank: device, process group (NCCL on GPUs, gloo on CPU), weights, backend.

    Reads the torchrun-style environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``); without it runs as a single rank.

    Raises:
        ValueError: more ranks than ``tensorParallelSize``, or a backend/timer the device can't run.
        RuntimeError: ``device: cuda`` without a GPU; ``gemmBackend: vllm`` without vLLM.
    """
    import torch
    import torch.distributed as dist

    from spx.bench.weights import random_block_fp8_weight

    rank, world_size = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    tp = spec.parallelism.tensor_parallel_size
    if world_size > tp:
        raise ValueError(
            f"{world_size} ranks but spec.parallelism.tensorParallelSize is {tp}: run with --nproc ≤ {tp}"
        )
    device = _resolve_device(spec, _env_int("LOCAL_RANK", rank))
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    gather_backend, gather_source = _resolve_gather(spec, device, world_size, tp)
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size,
                                device_id=device if device.type == "cuda" else None)
    gemm_backend, gemm_reason = resolve_gemm_backend(spec, device)
    gen = torch.Generator(device=device).manual_seed(spec.kernel.seed)
    proj = spec.projection
    weight = random_block_fp8_weight(proj.output_size, proj.hidden_size, weight_block_of(spec), device, gen)
    projection = build_projection(gemm_backend, weight, spec, device)
    activation = getattr(projection, "activation", None)  # humming: the input schema vLLM's rules chose
    if activation:
        gemm_reason += f"; runs {activation}"
    describe = getattr(projection, "describe", None)  # vllm: the quant method and kernel class vLLM chose
    if callable(describe):
        gemm_reason += "; vLLM chose " + ", ".join(f"{k}={v}" for k, v in describe().items())
    ctx = BenchContext(
        spec=spec,
        device=device,
        rank=rank,
        world_size=world_size,
        tp=tp,
        gemm_backend=gemm_backend,
        gemm_backend_reason=gemm_reason[:1024],  # KernelResult.gemmBackendReason max_length
        gather_backend=gather_backend,
        gather_source=gather_source,
        timer=_resolve_timer(spec, device),
        cuda_graphs=spec.kernel.cuda_graphs and device.type == "cuda",
        projection=projection,
        dtype=activation_dtype(spec),
        reference_weight=weight.dequantize(torch.float32),
    )
    if device.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20))
        if spec.kernel.l2_flush:
            ctx.flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
        ctx.barrier_tensor = torch.ones(1, dtype=torch.float32, device=device)
    return ctx


# --------------------------------------------------------------------------- candidates


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
        padded = next_multiple(tokens, tp)
        return cls(tokens, padded, padded // tp)


def _gather_fn(ctx: BenchContext, plan: PointPlan, n: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The all-gather of ``[rows, N]`` shards into ``[M_pad, N]`` (rank order = token order)."""
    import torch
    import torch.distributed as dist

    if ctx.gather_backend == "nccl":
        out = torch.empty(plan.padded_tokens, n, dtype=ctx.dtype, device=ctx.device)

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

        return vllm_backend.build_vllm_gather(ctx.spec, ctx.device, plan.padded_tokens, n, ctx.dtype)
    raise AssertionError(f"no gather function for gather backend {ctx.gather_backend}")


@dataclass
class Candidates:
    """The two callables of one point and the tensors they read (kept alive for CUDA graphs)."""

    replicated: Callable[[], torch.Tensor]
    shard_gemm: Callable[[], torch.Tensor]
    gather: Callable[[torch.Tensor], torch.Tensor] | None
    x: torch.Tensor
    plan: PointPlan

    def split(self) -> torch.Tensor:
        y = self.shard_gemm()
        if self.gather is None:
            return y
        return self.gather(y)[: self.plan.tokens]


def build_candidates(ctx: BenchContext, tokens: int) -> Candidates:
    """Random activations ``X[M, K]`` (identical on every rank, as TP replicates them) and both candidates."""
    import torch

    plan = PointPlan.of(tokens, ctx.tp)
    k, n = ctx.spec.projection.hidden_size, ctx.spec.projection.output_size
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.spec.kernel.seed * 1_000_003 + tokens)
    x = torch.randn(tokens, k, generator=gen, device=ctx.device, dtype=torch.float32).to(ctx.dtype)
    pad = plan.padded_tokens - tokens
    shard_rank = ctx.rank
    lo, hi = shard_rank * plan.rows_per_rank, (shard_rank + 1) * plan.rows_per_rank
    proj = ctx.projection

    def replicated() -> torch.Tensor:
        return proj(x)

    def shard_gemm() -> torch.Tensor:
        xp = torch.nn.functional.pad(x, (0, 0, 0, pad)) if pad else x
        return proj(xp[lo:hi])

    gather = None if ctx.gather_source == "modelled" or ctx.gather_backend == "none" else _gather_fn(ctx, plan, n)
    return Candidates(replicated=replicated, shard_gemm=shard_gemm, gather=gather, x=x, plan=plan)


# --------------------------------------------------------------------------- correctness


def check_correctness(ctx: BenchContext, replicated_out: torch.Tensor, split_out: torch.Tensor, plan: PointPlan) -> tuple[float, float]:
    """Max |split − replicated| (max over ranks) and max |replicated|.

    With a modelled gather the rank's own shard is compared with the matching replicated rows.

    Raises:
        RuntimeError: an output still holds NaN after the poisoned run (not fully written).
    """
    import torch

    if ctx.gather_source == "modelled" and ctx.tp > 1:
        lo = ctx.rank * plan.rows_per_rank
        hi = min(lo + plan.rows_per_rank, plan.tokens)
        ref = replicated_out[lo:hi].float()
        got = split_out[: max(0, hi - lo)].float()
    else:
        ref, got = replicated_out.float(), split_out.float()
    for name, t in (("replicated", ref), ("split", got)):
        if not torch.isfinite(t).all():
            raise RuntimeError(
                f"{name} output at {plan.tokens} tokens holds NaN/inf after the run: not every element was written"
            )
    err = (got - ref).abs().max() if got.numel() else torch.zeros((), device=ref.device)
    ref_max = ref.abs().max() if ref.numel() else torch.zeros((), device=ref.device)
    both = torch.stack([err, ref_max]).to(torch.float64 if ctx.device.type == "cpu" else torch.float32)
    _all_reduce_max(ctx, both)
    return float(both[0]), float(both[1])


def reference_error(ctx: BenchContext, x: torch.Tensor, replicated_out: torch.Tensor) -> float:
    """Relative Frobenius error ‖y − y_ref‖ / ‖y_ref‖ of the replicated output (max over ranks).

    ``y_ref = x.float() @ W_deq.float().T`` in float32 (no TF32), ``W_deq`` the dequantised checkpoint
    weight; ``x`` ``[M, K]`` the activations, ``replicated_out`` ``[M, N]``.
    """
    import torch

    assert ctx.reference_weight is not None
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = x.float() @ ctx.reference_weight.t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    rel = torch.linalg.vector_norm(replicated_out.float() - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30)
    t = rel.reshape(1).to(torch.float64 if ctx.device.type == "cpu" else torch.float32)
    _all_reduce_max(ctx, t)
    return float(t[0])


def _all_reduce_max(ctx: BenchContext, t: torch.Tensor) -> None:
    import torch.distributed as dist

    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)


def _barrier(ctx: BenchContext) -> None:
    import torch.distributed as dist

    if not ctx.distributed:
        return
    if ctx.barrier_tensor is not None:
        dist.all_reduce(ctx.barrier_tensor)  # device-side: the GPU waits for every rank
    else:
        dist.barrier()


# --------------------------------------------------------------------------- timing


@dataclass
class RawSamples:
    """Per-sample µs of one rank (before the max over ranks)."""

    replicated: list[float]
    split: list[float]
    gather: list[float]
    kernels: dict[str, list[str]]


def _capture(fn: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor]:
    """Capture ``fn`` into a CUDA graph after two eager warm-up calls on a side stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    torch.cuda.synchronize()
    return graph, out


def _capture_context(ctx: BenchContext) -> contextlib.AbstractContextManager[Any]:
    """vLLM's ``graph_capture`` for ``gather: vllm`` (registers the custom all-gather's buffers), else nothing."""
    if ctx.gather_backend == "vllm":
        from spx.bench.vllm_backend import vllm_graph_capture

        return vllm_graph_capture(ctx.device)
    return contextlib.nullcontext()


def gather_path(ctx: BenchContext, padded_tokens: int) -> str:
    """Which all-gather ran at this size: ``nccl``/``gloo``, vLLM's ``custom``/``nccl``, ``modelled`` or ``none``."""
    if ctx.gather_backend == "vllm":
        from spx.bench.vllm_backend import GATHER_PATHS

        return f"vllm-{GATHER_PATHS.get(padded_tokens, 'unknown')}"
    return ctx.gather_backend


def _time_gpu(ctx: BenchContext, cands: Candidates) -> tuple[RawSamples, float, float, float]:
    import torch

    from spx.bench.timing import time_cuda_events, time_cupti

    fns: dict[str, Callable[[], torch.Tensor]] = {"replicated": cands.replicated, "split": cands.split}
    launch: dict[str, Callable[[], Any]] = {}
    outputs: dict[str, torch.Tensor] = {}
    graphs = {}
    if ctx.cuda_graphs:
        with _capture_context(ctx):
            for name, fn in fns.items():
                graphs[name], outputs[name] = _capture(fn)
                launch[name] = graphs[name].replay
        for out in outputs.values():  # poison, then one replay each: every element must be rewritten
            out.fill_(float("nan"))
        for name in CANDIDATES:
            launch[name]()
        torch.cuda.synchronize()
    else:
        for name, fn in fns.items():
            launch[name] = fn
            outputs[name] = fn()
        torch.cuda.synchronize()
    max_err, ref_max = check_correctness(ctx, outputs["replicated"], outputs["split"], cands.plan)
    rel_err = _check_reference(ctx, cands, outputs["replicated"])

    def prepare() -> None:
        torch.cuda.synchronize()
        if ctx.flush is not None:
            ctx.flush.zero_()
        _barrier(ctx)

    samples, warmup = ctx.spec.kernel.samples, ctx.spec.kernel.warmup
    deadline, rounds = time.monotonic() + MIN_WARMUP_S, 0
    while rounds < warmup or time.monotonic() < deadline:
        for name in CANDIDATES:
            prepare()
            launch[name]()
        rounds += 1
    torch.cuda.synchronize()

    raw = RawSamples([], [], [], {})
    launches = {name: launch[name] for name in CANDIDATES}
    if ctx.timer == "cupti":
        spans = time_cupti(launches, samples, prepare)
        for name in CANDIDATES:
            getattr(raw, name).extend(s.span_us for s in spans[name])
            raw.kernels[name] = sorted({k for s in spans[name] for k in s.kernels})
        raw.gather = [s.gather_us for s in spans["split"]]
    else:  # cuda-events: includes launch overhead; a labelled fallback
        times = time_cuda_events(launches, samples, prepare)
        raw.replicated, raw.split, raw.gather = times["replicated"], times["split"], [0.0] * samples
        raw.kernels = {name: [] for name in CANDIDATES}
    del graphs
    return raw, max_err, ref_max, rel_err


def _check_reference(ctx: BenchContext, cands: Candidates, replicated_out: torch.Tensor) -> float:
    """:func:`reference_error` of this point; raises before any timing when it exceeds the tolerance.

    Raises:
        RuntimeError: relative error above :func:`spx.bench.gemm.reference_tolerance` (every rank sees
            the same value, so every rank raises).
    """
    rel = reference_error(ctx, cands.x, replicated_out)
    tol = reference_tolerance(ctx.gemm_backend, ctx.spec.projection.weight_format)
    if not rel <= tol:  # also catches NaN
        raise RuntimeError(
            f"gemm {ctx.gemm_backend} at {cands.plan.tokens} tokens: replicated output differs from the fp32 "
            f"dequantized reference by {rel:.3g} (relative Frobenius) > tolerance {tol:.3g}; the kernel or its "
            "weight conversion is wrong, so its timings would mean nothing"
        )
    return rel


def _time_host(ctx: BenchContext, cands: Candidates) -> tuple[RawSamples, float, float, float]:
    from spx.bench.timing import time_host

    rep_out, split_out = cands.replicated(), cands.split()
    max_err, ref_max = check_correctness(ctx, rep_out, split_out, cands.plan)
    rel_err = _check_reference(ctx, cands, rep_out)
    for _ in range(ctx.spec.kernel.warmup):
        cands.replicated()
        cands.split()
    gather_us: list[float] = []

    def split() -> None:  # the gather's share of each split sample is timed inside it
        y = cands.shard_gemm()
        t1 = time.perf_counter_ns()
        if cands.gather is not None:
            cands.gather(y)[: cands.plan.tokens]
        gather_us.append((time.perf_counter_ns() - t1) / 1e3 if cands.gather is not None else 0.0)

    times = time_host({"replicated": cands.replicated, "split": split}, ctx.spec.kernel.samples, lambda: _barrier(ctx))
    kernels = {"replicated": ["cpu:linear"], "split": ["cpu:linear", f"{ctx.gather_backend}:all_gather"]}
    return RawSamples(times["replicated"], times["split"], gather_us, kernels), max_err, ref_max, rel_err


def _max_over_ranks(ctx: BenchContext, raw: RawSamples) -> RawSamples:
    import torch

    t = torch.tensor([raw.replicated, raw.split, raw.gather], dtype=torch.float64)
    if ctx.distributed:
        t = t.to(ctx.device) if ctx.device.type == "cuda" else t
        _all_reduce_max(ctx, t)
        t = t.cpu()
    rows = t.tolist()
    return RawSamples(rows[0], rows[1], rows[2], raw.kernels)


def measure_point(ctx: BenchContext, tokens: int) -> PointResult | None:
    """Measure both candidates at ``tokens``; returns the point on rank 0 (None on the others).

    Raises:
        RuntimeError: the correctness check failed (NaN left in an output, or the replicated output
            off the fp32 reference by more than the backend's tolerance), CUPTI saw no kernels,
            or a fault was injected through ``SPX_FAULT_INJECT_RANK`` [+ ``SPX_FAULT_INJECT_TOKENS``] (tests).
    """
    at_tokens = os.environ.get(FAULT_TOKENS_ENV)
    if os.environ.get(FAULT_ENV) == str(ctx.rank) and at_tokens in (None, "", str(tokens)):
        raise RuntimeError(f"injected fault on rank {ctx.rank} at {tokens} tokens ({FAULT_ENV})")
    cands = build_candidates(ctx, tokens)
    raw, max_err, ref_max, rel_err = _time_gpu(ctx, cands) if ctx.device.type == "cuda" else _time_host(ctx, cands)
    plan = cands.plan
    if ctx.gather_source == "modelled" and ctx.tp > 1:
        model = ctx.spec.kernel.gather_model
        g = model.gather_us(plan.padded_tokens, ctx.spec.projection.output_size, ctx.dtype.itemsize, ctx.tp)
        raw.gather = [g] * len(raw.split)
        raw.split = [s + g for s in raw.split]
    raw = _max_over_ranks(ctx, raw)
    for names in raw.kernels.values():
        ctx.kernels_seen.update(names)
    if ctx.rank != 0:
        return None
    split_stats = candidate_stats([round(v, 3) for v in raw.split], raw.kernels.get("split", []))
    gather_med = statistics.median(raw.gather) if ctx.tp > 1 else 0.0
    return PointResult(
        tokens=tokens,
        padded_tokens=plan.padded_tokens,
        rows_per_rank=plan.rows_per_rank,
        replicated=candidate_stats([round(v, 3) for v in raw.replicated], raw.kernels.get("replicated", [])),
        split=split_stats,
        shard_gemm_us=max(0.0, split_stats.median_us - gather_med),
        gather_us=gather_med if ctx.timer != "cuda-events" or ctx.gather_source == "modelled" else None,
        gather_source=ctx.gather_source,  # type: ignore[arg-type]
        gather_path=gather_path(ctx, plan.padded_tokens),
        max_abs_error=max_err,
        max_abs_reference=ref_max,
        reference_rel_error=rel_err,
    )


def warm_up_gpu(ctx: BenchContext, seconds: float = 0.5) -> None:
    """Run the largest replicated GEMM for ``seconds`` so clocks leave idle (345 MHz on an idle H200) first.

    Without it the first points of a sweep are measured while the SM clock ramps up.
    """
    import torch

    if ctx.device.type != "cuda":
        return
    proj = ctx.spec.projection
    x = torch.randn(max(ctx.spec.sweep.tokens), proj.hidden_size, device=ctx.device).to(ctx.dtype)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(10):
            ctx.projection(x)
        torch.cuda.synchronize()


def run_kernel_bench(
    spec: ExperimentSpec,
    *,
    experiment: str = "local",
    on_point: Callable[[PointResult], None] | None = None,
) -> KernelResult | None:
    """Run the whole sweep on this rank. Call once per rank process (torchrun-style environment).

    Returns the :class:`~spx.api.result.KernelResult` on rank 0, ``None`` on other ranks. ``on_point``
    is called on rank 0 after each token count with that point (progress, partial results).

    Raises:
        ValueError / RuntimeError: see :func:`setup` and :func:`measure_point`; the process group is
            destroyed either way.
    """
    import torch.distributed as dist

    started, t0 = utc_now(), time.monotonic()
    ctx = setup(spec)
    try:
        warm_up_gpu(ctx)
        points: list[PointResult] = []
        for tokens in spec.sweep.tokens:
            point = measure_point(ctx, tokens)
            if point is not None:
                points.append(point)
                if on_point is not None:
                    on_point(point)
        if ctx.rank != 0:
            return None
        notes = []
        if ctx.device.type == "cpu":
            notes.append("CPU smoke run: timings say nothing about GPUs")
        if ctx.gemm_backend in ("torch-bf16", "torch-fp8") and ctx.device.type == "cuda":
            notes.append(f"gemm {ctx.gemm_backend} is a cuBLAS reference ceiling, not the kernel vLLM runs for this weight")
        if ctx.timer == "cuda-events":
            notes.append("timer cuda-events: samples include host launch overhead (~10-15 µs on H200)")
        if ctx.gather_source == "modelled":
            m = spec.kernel.gather_model
            notes.append(f"gather modelled ({ctx.world_size} rank(s) < TP {ctx.tp}): {m.describe()}")
        return KernelResult(
            experiment=experiment,
            spec=spec,
            environment=collect_environment(ctx.device, ctx.world_size, sorted(ctx.kernels_seen)),
            world_size=ctx.world_size,
            gemm_backend=ctx.gemm_backend,
            gemm_backend_reason=ctx.gemm_backend_reason,
            reference_tolerance=reference_tolerance(ctx.gemm_backend, spec.projection.weight_format),
            gather_backend=ctx.gather_backend,
            gather_source=ctx.gather_source,  # type: ignore[arg-type]
            timer=ctx.timer,
            device=ctx.device.type,
            cuda_graphs=ctx.cuda_graphs,
            points=points,
            warnings=notes,
            started_at=started,
            finished_at=utc_now(),
            wall_seconds=round(time.monotonic() - t0, 3),
        )
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
