"""Everything fixed for a run of the projection microbenchmark: device, ranks, backends, timer, capture limit.

:func:`setup` initialises this rank (device, process group, weights, GEMM backend) into a
:class:`BenchContext`; :func:`preflight` checks before any rank starts that the host can run the spec.
:func:`timing_protocol` turns the context into the :class:`~spx.bench.timing.TimingProtocol` of one
point (graph or eager: :func:`spx.analysis.execution.graph_or_eager`).

Which timers, gathers and GEMM backends need CUDA is one rule, the vocabulary's :data:`~spx.vocabulary.CUDA_TIMERS`
and :data:`~spx.vocabulary.CUDA_GEMM_BACKENDS` (and ``nccl``): :mod:`spx.api.combinations` refuses them for
``device: cpu`` before a pod exists, this module for a device that resolved to the CPU at run time.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spx.analysis.execution import graph_or_eager, max_cudagraph_capture_size, serving_batch_args
from spx.api.spec import ExperimentSpec
from spx.bench.gemm import build_projection, resolve_gemm_backend, weight_block_of
from spx.bench.gemm.projection import activation_dtype
from spx.bench.timing import TimingProtocol
from spx.vocabulary import (
    CUDA_GATHER_BACKENDS,
    CUDA_TIMERS,
    ExecutionMode,
    GatherSource,
    ResolvedDevice,
    ResolvedGatherBackend,
    ResolvedGemmBackend,
    ResolvedTimer,
)

if TYPE_CHECKING:
    import torch

    from spx.bench.gemm.projection import Projection
    from spx.bench.weights import BlockFp8Weight

@dataclass
class BenchContext:
    """Everything fixed for a run: where, who, how.

    ``capture_size`` is vLLM's ``max_cudagraph_capture_size`` for this GPU and spec (tokens) and
    ``capture_size_reason`` how it was derived; ``cuda_graphs`` whether graphs may be used at all.
    """

    spec: ExperimentSpec
    device: torch.device
    rank: int
    world_size: int
    tp: int
    gemm_backend: ResolvedGemmBackend
    gemm_backend_reason: str
    gather_backend: ResolvedGatherBackend
    gather_source: GatherSource
    timer: ResolvedTimer
    cuda_graphs: bool
    projection: Projection
    dtype: torch.dtype
    reference_weight: torch.Tensor | None = None  # float32 [N, K], the dequantised weight
    flush: torch.Tensor | None = None
    barrier_tensor: torch.Tensor | None = None
    kernels_seen: set[str] = field(default_factory=set)
    capture_size: int = 512
    capture_size_reason: str = ""
    launch_group: Any = None  # modelled gather: this rank's 1-rank group for the real launch (spx.bench.gather_launch)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def device_type(self) -> ResolvedDevice:
        """``cuda`` or ``cpu``: where this rank runs (``KernelResult.device``)."""
        return "cuda" if self.device.type == "cuda" else "cpu"


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


def _resolve_timer(spec: ExperimentSpec, device: torch.device) -> ResolvedTimer:
    """``spec.kernel.timer`` on ``device``: ``auto`` is cupti on GPUs, host on CPU.

    Raises:
        ValueError: a CUDA timer (:data:`~spx.vocabulary.CUDA_TIMERS`) on CPU, or ``host`` on a GPU.
    """
    timer = spec.kernel.timer
    if device.type == "cpu":
        if timer in CUDA_TIMERS:
            raise ValueError(f"spec.kernel.timer: {timer} needs a CUDA GPU; on CPU use timer: host or auto")
        return "host"
    if timer == "host":
        raise ValueError("spec.kernel.timer: host is for CPU smoke runs; on GPUs use cupti (default) or cuda-events")
    return "cupti" if timer == "auto" else timer


def _resolve_gather(
    spec: ExperimentSpec, device: torch.device, world_size: int, tp: int
) -> tuple[ResolvedGatherBackend, GatherSource]:
    """``(backend, source)`` of the all-gather: ``auto`` models it with fewer ranks than TP (and says so in
    the result: ``gatherSource: modelled``); an explicit ``nccl``/``gloo``/``vllm`` asks for a measured
    gather, so fewer ranks than TP is refused instead of modelled behind the user's back.

    Raises:
        ValueError: ``nccl`` on CPU; an explicit backend with fewer ranks than ``tensorParallelSize``.
    """
    if tp == 1:
        return "none", "measured"
    want = spec.kernel.gather
    if want == "modelled":
        return "modelled", "modelled"
    if want in CUDA_GATHER_BACKENDS and device.type != "cuda":
        raise ValueError("spec.kernel.gather: nccl needs CUDA GPUs; on CPU use gather: gloo or auto")
    if world_size < tp:
        if want == "auto":
            return "modelled", "modelled"
        raise ValueError(
            f"spec.kernel.gather: {want} measures the all-gather between spec.parallelism.tensorParallelSize={tp} "
            f"ranks, but this run has {world_size}: run {tp} ranks (--nproc {tp}; {tp} GPUs on CUDA), or set "
            "gather: auto or modelled to model the gather (spec.kernel.gatherModel)")
    if want == "auto":
        return ("nccl" if device.type == "cuda" else "gloo"), "measured"
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
    ``MASTER_PORT``); without it runs as a single rank. With a modelled gather (fewer ranks than TP)
    each rank also gets a 1-rank group (``launch_group``; a 1-rank default group when alone) through
    which the split's eager host samples issue the real all-gather launch (:mod:`spx.bench.gather_launch`).

    Raises:
        ValueError: more ranks than ``tensorParallelSize``, or a backend/timer the device can't run.
        RuntimeError: ``device: cuda`` without a GPU; ``gemmBackend: vllm`` without vLLM.
    """
    import torch
    import torch.distributed as dist

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
    gemm_backend, gemm_reason, weight, projection = _projection(spec, device)
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
        cuda_graphs=spec.kernel.cuda_graphs and device.type == "cuda" and spec.kernel.execution != "eager",
        projection=projection,
        dtype=activation_dtype(spec),
        reference_weight=weight.dequantize(torch.float32),
    )
    ctx.capture_size, ctx.capture_size_reason = capture_size_of(spec, device)
    if gather_source == "modelled" and tp > 1:  # the gather's GPU time is modelled, its launch is issued for real
        from spx.bench.gather_launch import one_rank_group

        ctx.launch_group = one_rank_group(device, rank, world_size)
    if device.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20))
        if spec.kernel.l2_flush:
            ctx.flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
        ctx.barrier_tensor = torch.ones(1, dtype=torch.float32, device=device)
    return ctx


def _projection(spec: ExperimentSpec, device: torch.device) -> tuple[ResolvedGemmBackend, str, BlockFp8Weight, Projection]:
    """The GEMM backend this rank runs and why, the random weight (seeded by ``spec.kernel.seed``) and its
    projection; the reason also says what the backend's kernel runs (Humming's input schema, vLLM's choice)."""
    import torch

    from spx.bench.weights import random_block_fp8_weight

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
    return gemm_backend, gemm_reason, weight, projection



def all_reduce_max(ctx: BenchContext, t: torch.Tensor) -> None:
    """In place: ``t`` becomes its elementwise max over ranks (nothing with one rank)."""
    import torch.distributed as dist

    if ctx.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)


def barrier(ctx: BenchContext) -> None:
    """Wait for every rank: a device-side one-element all-reduce on GPUs, ``dist.barrier`` on CPU."""
    import torch.distributed as dist

    if not ctx.distributed:
        return
    if ctx.barrier_tensor is not None:
        dist.all_reduce(ctx.barrier_tensor)  # device-side: the GPU waits for every rank
    else:
        dist.barrier()



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


def capture_size_of(spec: ExperimentSpec, device: torch.device) -> tuple[int, str]:
    """vLLM's ``max_cudagraph_capture_size`` for ``spec`` on ``device`` and why (:mod:`spx.analysis.execution`).

    ``spec.kernel.maxCudagraphCaptureSize`` wins; else ``--max-num-seqs`` and ``--speculative-config``
    from ``spec.serving.extraArgs`` when given, and the GPU's compute capability.

    Raises:
        ValueError: unreadable ``--max-num-seqs`` / ``--speculative-config`` values.
    """
    import torch

    cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    args = spec.serving.extra_args if spec.serving is not None else []
    seqs, spec_tokens = serving_batch_args(args)
    return max_cudagraph_capture_size(cap, seqs, spec_tokens, spec.kernel.max_cudagraph_capture_size)


def point_execution(ctx: BenchContext, tokens: int) -> tuple[ExecutionMode, str]:
    """How the point of ``tokens`` is timed here and why: vLLM's rule, then what this device can do."""
    mode, reason = graph_or_eager(tokens, ctx.spec.kernel.execution, ctx.capture_size)
    if ctx.device.type != "cuda":
        return "eager", f"CPU smoke run: eager only (on a GPU {reason})"
    if mode == "graph" and not ctx.cuda_graphs:
        return "eager", "kernel.cudaGraphs false: eager"
    return mode, reason


def _capture_context(ctx: BenchContext) -> contextlib.AbstractContextManager[Any]:
    """vLLM's ``graph_capture`` for ``gather: vllm`` (registers the custom all-gather's buffers), else nothing."""
    if ctx.gather_backend == "vllm":
        from spx.bench.vllm_backend import vllm_graph_capture

        return vllm_graph_capture(ctx.device)
    return contextlib.nullcontext()


def timing_protocol(ctx: BenchContext, mode: ExecutionMode) -> TimingProtocol:
    """The :class:`~spx.bench.timing.TimingProtocol` of a point timed in ``mode`` on this rank.

    GPU: ``mode`` with the context's timer, L2 flush buffer, device-side barrier and max over ranks;
    CPU: ``host`` (eager, host wall timer; a smoke run).
    """
    def reduce_max(t: torch.Tensor) -> None:
        if ctx.distributed:
            moved = t.to(ctx.device) if ctx.device.type == "cuda" else t
            all_reduce_max(ctx, moved)
            t.copy_(moved.cpu())

    kernel = ctx.spec.kernel
    return TimingProtocol(
        mode="host" if ctx.device.type != "cuda" else mode,
        timer=ctx.timer,
        samples=kernel.samples,
        warmup=kernel.warmup,
        flush=ctx.flush,
        barrier=(lambda: barrier(ctx)) if ctx.distributed else None,
        reduce_max=reduce_max if ctx.distributed else None,
        capture_context=lambda: _capture_context(ctx),
    )
