"""The projection microbenchmark's sweep: replicated GEMM vs split GEMM + all-gather over the token counts.

Method (docs/kernel-benchmark.md "Method", from the seed PR: docs/seed.md), point by point, each step in its own module:

- :mod:`spx.bench.context`: this rank's device, process group, weights in the checkpoint's format
  (``weightFormat``: FP8 e4m3 with UE8M0 scales in 32×32 blocks for DeepSeek-V4.1's MXFP8, or 128×128
  blocks) converted the way vLLM converts them for the kernel under test (:mod:`spx.bench.gemm`),
  and vLLM's CUDA-graph capture limit.
- :mod:`spx.bench.candidates`: ``replicated`` and ``split`` (``sp_shard``, GEMM, all-gather, trim, as
  vLLM issues them), and ``pad-free`` (the split with a pad-free shard: spx's proposal for vLLM, always
  measured beside the split; ``PointResult.padFree``).
- :mod:`spx.bench.correctness`: split vs replicated, replicated vs an fp32 reference, before timing.
- :mod:`spx.bench.timing`: the whole timing protocol (:func:`~spx.bench.timing.bench_time`): graph or
  eager per point (``kernel.execution``; ``auto`` follows vLLM: a graph up to
  ``max_cudagraph_capture_size``, eager above), warm-up, L2 flush, barrier, CUPTI span, host issue
  time with the GPU kept busy, max over ranks. On CPU (gloo) a host timer: a smoke run only.
- Here: :func:`measure_point` (one token count → one :class:`~spx.api.result.PointResult`) and
  :func:`run_kernel_bench` (the sweep). With fewer ranks than TP the shard GEMM is still measured
  and the gather's GPU time is modelled (``spec.kernel.gatherModel``; the result says ``gatherSource:
  modelled``) while its host cost is a real all-gather launch through a 1-rank group inside the
  split's eager host samples (:mod:`spx.bench.gather_launch`; ``gatherHostSource: measured``).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spx.analysis.stats import candidate_stats
from spx.api.base import utc_now
from spx.api.result import CandidateStats, KernelResult, PointResult
from spx.api.spec import ExperimentSpec
from spx.api.status import Environment
from spx.bench.candidates import Candidates, PointPlan, build_candidates, gather_path
from spx.bench.context import BenchContext, point_execution, preflight, setup, timing_protocol, warm_up_gpu
from spx.bench.correctness import check_correctness, check_pad_free, check_reference
from spx.bench.fingerprint import collect_environment
from spx.bench.gemm import kernel, reference_tolerance
from spx.bench.timing import Timing, TimingProtocol, bench_time
from spx.vocabulary import CANDIDATES, CPU_NOTE, GatherSource

if TYPE_CHECKING:
    import torch

__all__ = ["CANDIDATES", "FAULT_ENV", "FAULT_TOKENS_ENV", "BenchContext", "PointPlan", "measure_point",
           "preflight", "run_kernel_bench", "setup"]

FAULT_ENV = "SPX_FAULT_INJECT_RANK"  # tests: this rank raises at the first point...
FAULT_TOKENS_ENV = "SPX_FAULT_INJECT_TOKENS"  # ...or at this token count


def _stats(samples: list[float], kernels: list[str], host: list[float]) -> CandidateStats:
    stats = candidate_stats([round(v, 3) for v in samples], kernels)
    if not host:
        return stats
    host = [round(v, 3) for v in host]
    return stats.model_copy(update={"host_samples_us": host, "host_median_us": statistics.median(host)})


@dataclass
class _Sharded:
    """A sharded candidate's samples (µs) as the point reports them: span (+ modelled gather), host, gather."""

    span: list[float]
    host: list[float]
    gather: list[float]
    gather_host: float | None
    gather_host_source: GatherSource | None


def _sharded_samples(ctx: BenchContext, cands: Candidates, timing: Timing, name: str, protocol: TimingProtocol,
                     launched: bool) -> _Sharded:
    """The split's or pad-free's samples with the gather's share: timed inside each sample on CPU, modelled
    (``spec.kernel.gatherModel``, added to each span) with fewer ranks than TP, its host launch measured
    inside each eager host sample where a real 1-rank launch ran."""
    samples = ctx.spec.kernel.samples
    span, host, gather = list(timing.span_us[name]), list(timing.host_us.get(name, [])), list(timing.gather_us[name])
    if ctx.device.type == "cpu" and cands.gathered:  # the gather's share of each sample, timed inside it
        walls = (cands.gather_walls if name == "split" else cands.pad_free_gather_walls)[-samples:]
        gather = walls if protocol.reduce_max is None else _reduced(protocol.reduce_max, walls)
    out = _Sharded(span, host, gather, None, "measured" if cands.gathered else None)
    if ctx.gather_source == "modelled" and ctx.tp > 1:
        model = ctx.spec.kernel.gather_model
        g = model.gather_us(cands.plan.padded_tokens, ctx.spec.projection.output_size, ctx.dtype.itemsize, ctx.tp)
        out.gather, out.span = [g] * len(span), [s + g for s in span]
        launch = cands.launch if name == "split" else cands.pad_free_launch
        if launched and launch is not None:  # measured inside each host sample
            walls = launch.walls_us[-samples:]
            walls = walls if protocol.reduce_max is None else _reduced(protocol.reduce_max, walls)
            out.gather_host, out.gather_host_source = statistics.median(walls), "measured"
        elif protocol.mode == "eager":  # inside a CUDA graph the gather costs the host nothing of its own
            out.gather_host, out.gather_host_source = model.host_us, "modelled"
            out.host = [h + model.host_us for h in host]
        else:
            out.gather_host_source = None
    return out


def _inject_fault(rank: int, tokens: int) -> None:
    """Tests: raise on rank ``SPX_FAULT_INJECT_RANK`` (at ``SPX_FAULT_INJECT_TOKENS`` tokens if set)."""
    at_tokens = os.environ.get(FAULT_TOKENS_ENV)
    if os.environ.get(FAULT_ENV) == str(rank) and at_tokens in (None, "", str(tokens)):
        raise RuntimeError(f"injected fault on rank {rank} at {tokens} tokens ({FAULT_ENV})")


def measure_point(ctx: BenchContext, tokens: int) -> PointResult | None:
    """Measure the three candidates at ``tokens``; returns the point on rank 0 (None on the others).

    Every rank must call it with the same ``tokens`` (it synchronises them). The point is timed in the
    mode :func:`spx.bench.context.point_execution` picks and says which and why. A sweep that
    measures extra token counts (an adaptive refinement) calls it once per count.

    Raises:
        RuntimeError: the correctness check failed (NaN left in an output, or the replicated output
            off the fp32 reference by more than the backend's tolerance), CUPTI saw no kernels,
            or a fault was injected through ``SPX_FAULT_INJECT_RANK`` [+ ``SPX_FAULT_INJECT_TOKENS``] (tests).
    """
    _inject_fault(ctx.rank, tokens)
    cands = build_candidates(ctx, tokens)
    plan = cands.plan
    mode, why = point_execution(ctx, tokens)
    protocol = timing_protocol(ctx, mode)
    checked: dict[str, float] = {}

    def check(outputs: dict[str, torch.Tensor]) -> None:
        checked["err"], checked["ref"] = check_correctness(ctx, outputs["replicated"], outputs["split"], plan)
        checked["rel"] = check_reference(ctx, cands, outputs["replicated"])
        checked["pad_free"] = check_pad_free(ctx, cands, outputs["pad-free"], outputs["split"])

    launched = mode == "eager" and cands.launch is not None  # the real 1-rank gather launch in the host samples
    timing = bench_time(cands.launches(), protocol, check, cands.host_launches() if launched else None)
    split, pad_free = (_sharded_samples(ctx, cands, timing, name, protocol, launched) for name in ("split", "pad-free"))
    for names in timing.kernels.values():
        ctx.kernels_seen.update(names)
    if ctx.rank != 0:
        return None
    kernels = timing.kernels
    if ctx.device.type == "cpu":
        sharded = ["cpu:linear", f"{ctx.gather_backend}:all_gather"]
        kernels = {"replicated": ["cpu:linear"], "split": sharded, "pad-free": sharded}
    split_stats = _stats(split.span, kernels.get("split", []), split.host)
    gather_med = statistics.median(split.gather) if ctx.tp > 1 else 0.0
    return PointResult(
        tokens=tokens,
        padded_tokens=plan.padded_tokens,
        rows_per_rank=plan.rows_per_rank,
        replicated=_stats(timing.span_us["replicated"], kernels.get("replicated", []), timing.host_us.get("replicated", [])),
        split=split_stats,
        shard_gemm_us=max(0.0, split_stats.median_us - gather_med),
        gather_us=gather_med if ctx.timer != "cuda-events" or ctx.gather_source == "modelled" else None,
        gather_source=ctx.gather_source,
        gather_path=gather_path(ctx, plan.padded_tokens),
        max_abs_error=checked["err"],
        max_abs_reference=checked["ref"],
        reference_rel_error=checked["rel"],
        execution=mode,
        execution_reason=why[:256],
        gather_host_us=split.gather_host,
        gather_host_source=split.gather_host_source,
        uncovered_samples=timing.uncovered,
        pad_free=_stats(pad_free.span, kernels.get("pad-free", []), pad_free.host),
        pad_free_rank=cands.pad_free_rank,
        pad_free_max_abs_diff=checked["pad_free"],
    )


def _reduced(reduce_max: Callable[..., None], values: list[float]) -> list[float]:
    import torch

    t = torch.tensor([values], dtype=torch.float64)
    reduce_max(t)
    return [float(v) for v in t[0].tolist()]


def _sweep(ctx: BenchContext, on_point: Callable[[PointResult], None] | None) -> list[PointResult]:
    """Every point of ``ctx.spec``'s sweep, measured on every rank (the list filled on rank 0 only): the listed
    token counts, or the adaptive sweep :mod:`spx.bench.adaptive` plans on rank 0."""
    from spx.bench.adaptive import planned_extra

    spec = ctx.spec
    points: list[PointResult] = []
    if spec.sweep.refine is not None or planned_extra(spec):  # spx.bench.adaptive: rank 0 plans, all measure
        from spx.bench.adaptive import adaptive_sweep, torch_broadcast

        def measure(counts: list[int]) -> list[PointResult] | None:
            got = [measure_point(ctx, t) for t in counts]
            return [p for p in got if p is not None] if ctx.rank == 0 else None

        return adaptive_sweep(spec, measure, torch_broadcast(ctx.rank, ctx.distributed), on_point) or []
    for tokens in spec.sweep.tokens:
        point = measure_point(ctx, tokens)
        if point is not None:
            points.append(point)
            if on_point is not None:
                on_point(point)
    return points


def _notes(ctx: BenchContext, env: Environment, points: list[PointResult]) -> list[str]:
    """The warnings a result carries: a CPU run, a reference ceiling, eager points, a modelled gather, CUDA events."""
    spec, cuda = ctx.spec, ctx.device.type == "cuda"
    notes = [CPU_NOTE] if ctx.device.type == "cpu" else []
    if kernel(ctx.gemm_backend).ceiling and cuda:
        notes.append(f"gemm {ctx.gemm_backend} is a cuBLAS reference ceiling, not the kernel vLLM runs for this weight")
    eager = [p.tokens for p in points if p.execution == "eager"]
    if eager and cuda:
        notes.append(f"timed eagerly at {len(eager)} token count(s) (above max_cudagraph_capture_size "
                     f"{ctx.capture_size} or forced): host issue times measured on {env.host_cpu or 'this host'}")
    if ctx.gather_source == "modelled" and ctx.tp > 1 and ctx.launch_group is not None and eager:
        backend = "nccl" if cuda else "gloo"
        notes.append(f"the split's eager host samples issue a real all-gather launch of the shard through a "
                     f"1-rank {backend} group (gatherHostSource measured: the launch path, no peers to wait "
                     "for); the gather's GPU time is modelled")
    elif ctx.gather_source == "modelled" and ctx.tp > 1:
        notes.append(f"the split's host time includes a modelled all-gather issue time of "
                     f"{spec.kernel.gather_model.host_us:g} µs (gatherModel.hostUs), not a measurement")
    if ctx.timer == "cuda-events":
        notes.append("timer cuda-events: samples include host launch overhead (~10-15 µs on H200)")
    if ctx.gather_source == "modelled":
        notes.append(f"gather modelled ({ctx.world_size} rank(s) < TP {ctx.tp}): {spec.kernel.gather_model.describe()}")
    return notes


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
        points = _sweep(ctx, on_point)
        if ctx.rank != 0:
            return None
        env = collect_environment(ctx.device, ctx.world_size, sorted(ctx.kernels_seen))
        notes = _notes(ctx, env, points)
        return KernelResult(
            experiment=experiment,
            spec=spec,
            environment=env,
            world_size=ctx.world_size,
            gemm_backend=ctx.gemm_backend,
            gemm_backend_reason=ctx.gemm_backend_reason,
            reference_tolerance=reference_tolerance(ctx.gemm_backend, spec.projection.weight_format),
            gather_backend=ctx.gather_backend,
            gather_source=ctx.gather_source,
            timer=ctx.timer,
            device=ctx.device_type,
            cuda_graphs=ctx.cuda_graphs,
            execution=spec.kernel.execution,
            max_cudagraph_capture_size=ctx.capture_size,
            capture_size_reason=ctx.capture_size_reason[:256],
            points=points,
            warnings=notes,
            started_at=started,
            finished_at=utc_now(),
            wall_seconds=round(time.monotonic() - t0, 3),
        )
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
