"""An eager multi-layer step on one GPU: the projection in every layer, a GPU-only filler, one sync per step.

vLLM 0.33 runs DeepSeek-V4.1 prefill batches above its CUDA-graph capture limit eagerly, op by op from
Python, and synchronises the host once per step (the model runner reads the sampled tokens). The
split then changes the step's time by Δg or Δh depending on which side of the queue is the
bottleneck (:mod:`spx.research.step_queue`). This module builds and times such a step in the shape of
a kernel benchmark, as vLLM's ``benchmarks/kernels/bench_block_fp8_gemm.py`` is: a builder
(:func:`build_layers`, :func:`make_step`), a declared sweep (``benchmarks/eager_step.py``) and a
generic timer (:func:`time_steps`).

One layer: the projection as :mod:`spx.bench.candidates` builds it, with distinct weights and
activations per layer (no layer reads another's from L2) —

- ``replicated``: the GEMM over all M tokens;
- ``split``: ``sp_shard`` (pad to a multiple of TP, this rank's rows), the GEMM on ``M_pad/TP`` rows, a
  real all-gather launch of the shard through a 1-rank NCCL group (:mod:`spx.bench.gather_launch`: the
  host's launch path; its GPU work is a 1-rank copy, not an 8-rank gather), the trim;
- ``pad-free``: the same with :func:`spx.bench.sequence_parallel.pad_free_shard` (rank TP − 1's rows:
  the one rank that pads its own short shard; spx's proposal for vLLM);

then ``host_ops`` one-element ops (standing for the small host-heavy ops of a layer: norms, rotary,
casts) and the **filler**: ``torch.cuda._sleep`` for ``filler_us`` µs, a GPU-only kernel standing for
attention and MoE (one launch, a few µs of host). Two ways to time the arms, run side by side:

- **per arm** (:func:`make_step`, :func:`time_steps`): one step closure per arm, alternating per round;
- **switched** (:func:`make_switched_step`, :func:`time_switched`): one step whose layers read the arm
  from an :class:`ArmSwitch` at every call, as DeepSeek-V4.1's forward reads the module global
  ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` (``vllm/models/deepseek_v41/attention.py``); the switch is set
  between steps, outside the timed window, in a seeded random order per round — the one-server step A/B's
  design (issue 34), whose figures must agree with the per-arm ones.

What this cannot show: the real attention/MoE's
own host cost and their interleaving with the projection, the 8-rank gather's GPU time and waits.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spx.bench.candidates import Candidates, build_candidates
from spx.bench.context import BenchContext
from spx.bench.timing import alternating, gpu_cover
from spx.vocabulary import MEASURED_CANDIDATES

if TYPE_CHECKING:
    import torch

def build_layers(ctx: BenchContext, tokens: int, projections: list[Callable[[torch.Tensor], torch.Tensor]]) -> list[Candidates]:
    """One :class:`~spx.bench.candidates.Candidates` per layer at ``tokens``, each with its own projection.

    ``projections`` are built by :func:`build_projections`; the activations of layer ``i`` are drawn
    with salt ``i`` (distinct per layer). With a modelled gather each layer has ``split_launched``.
    """
    layers = []
    for i, proj in enumerate(projections):
        layer_ctx = dataclasses.replace(ctx, projection=proj)
        cands = build_candidates(layer_ctx, tokens)
        if i:
            from spx.bench.candidates import activations

            cands.x.copy_(activations(ctx, tokens, ctx.spec.projection.hidden_size, salt=i))
        layers.append(cands)
    return layers


def build_projections(ctx: BenchContext, count: int) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    """``count`` projections of the context's backend, each with its own random MXFP8 weight (seed + i)."""
    import torch

    from spx.bench.gemm import build_projection, weight_block_of
    from spx.bench.weights import random_block_fp8_weight

    proj = ctx.spec.projection
    out = [ctx.projection]
    for i in range(1, count):
        gen = torch.Generator(device=ctx.device).manual_seed(ctx.spec.kernel.seed + i)
        weight = random_block_fp8_weight(proj.output_size, proj.hidden_size, weight_block_of(ctx.spec), ctx.device, gen)
        out.append(build_projection(ctx.gemm_backend, weight, ctx.spec, ctx.device))
    return out


def split_op(cands: Candidates) -> Callable[[], torch.Tensor]:
    """The split as the step issues it: with the real 1-rank gather launch where one exists."""
    return cands.split_launched or cands.split


def arm_op(cands: Candidates, arm: str) -> Callable[[], torch.Tensor]:
    """One layer's projection in ``arm`` (``replicated``, ``split`` or ``pad-free``, with the real 1-rank
    gather launch where one exists).

    Raises:
        ValueError: an unknown arm.
    """
    if arm not in MEASURED_CANDIDATES:
        raise ValueError(f"arm must be one of {MEASURED_CANDIDATES}, got {arm!r}")
    if arm == "replicated":
        return cands.replicated
    if arm == "split":
        return split_op(cands)
    return cands.pad_free_launched or cands.pad_free


def _layer_tail(scratch: torch.Tensor, host_ops: int, filler_us: float) -> Callable[[], None]:
    """What follows the projection in a layer: ``host_ops`` one-element ``add_`` ops, then the filler."""
    cuda = scratch.device.type == "cuda"

    def tail() -> None:
        for _ in range(host_ops):
            scratch.add_(1.0)
        if cuda and filler_us > 0:
            gpu_cover(filler_us)

    return tail


def make_step(layers: list[Candidates], arm: str, filler_us: float, host_ops: int, scratch: torch.Tensor) -> Callable[[], None]:
    """The step of one arm: per layer the projection (:func:`arm_op`), ``host_ops`` one-element ``add_`` ops
    on ``scratch``, then the filler (:func:`spx.bench.timing.gpu_cover` of ``filler_us``; none on CPU or at 0).

    Raises:
        ValueError: an unknown arm.
    """
    ops = [arm_op(c, arm) for c in layers]
    tail = _layer_tail(scratch, host_ops, filler_us)

    def step() -> None:
        for op in ops:
            op()
            tail()

    return step


@dataclass
class ArmSwitch:
    """The arm every layer of a switched step reads at each call (the stand-in for vLLM's module global);
    ``seen`` counts, per arm, the layer calls that ran it (every switch is confirmed by the forward)."""

    arm: str = "replicated"
    seen: dict[str, int] = field(default_factory=dict)

    def set(self, arm: str) -> None:
        """Switch to ``arm``.

        Raises:
            ValueError: an unknown arm.
        """
        if arm not in MEASURED_CANDIDATES:
            raise ValueError(f"arm must be one of {MEASURED_CANDIDATES}, got {arm!r}")
        self.arm = arm


def make_switched_step(layers: list[Candidates], switch: ArmSwitch, filler_us: float, host_ops: int,
                       scratch: torch.Tensor) -> Callable[[], None]:
    """One step for every arm: each layer reads ``switch.arm`` when it runs and issues that arm's projection
    (:func:`arm_op`), then the layer tail as :func:`make_step` does."""
    table: list[dict[str, Callable[[], torch.Tensor]]] = [{arm: arm_op(c, arm) for arm in MEASURED_CANDIDATES} for c in layers]
    tail = _layer_tail(scratch, host_ops, filler_us)

    seen = switch.seen

    def step() -> None:
        for ops in table:
            arm = switch.arm
            ops[arm]()
            seen[arm] = seen.get(arm, 0) + 1
            tail()

    return step


@dataclass
class StepSamples:
    """Per timed step (µs): host wall from issue start to after the sync, host issue time (until the last
    op is issued), and the CUDA-event time from the first op to the last (empty on CPU)."""

    wall_us: list[float] = field(default_factory=list)
    issue_us: list[float] = field(default_factory=list)
    event_us: list[float] = field(default_factory=list)


def _time_one(step: Callable[[], None], rec: StepSamples, cuda: bool) -> None:
    """One step from an idle GPU to its end-of-step synchronize, appended to ``rec`` (µs)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    start = end = None
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
    t0 = time.perf_counter_ns()
    step()
    t1 = time.perf_counter_ns()
    if end is not None:
        end.record()
    if cuda:
        torch.cuda.synchronize()
    t2 = time.perf_counter_ns()
    rec.wall_us.append((t2 - t0) / 1e3)
    rec.issue_us.append((t1 - t0) / 1e3)
    if start is not None and end is not None:
        rec.event_us.append(start.elapsed_time(end) * 1e3)


def time_steps(steps: Mapping[str, Callable[[], None]], samples: int, warmup: int, device: torch.device) -> dict[str, StepSamples]:
    """Time whole steps of per-arm closures, alternating arms every round (which goes first alternates too).

    Each step starts on an idle GPU (a synchronize before it) and ends with one synchronize, as
    vLLM's model runner does once per step. Returns ``samples`` entries per arm.
    """
    cuda = device.type == "cuda"
    scratch = StepSamples()
    for _ in range(warmup):
        for step in steps.values():
            _time_one(step, scratch, cuda)
    out = {name: StepSamples() for name in steps}
    for _, name in alternating(list(steps), samples):
        _time_one(steps[name], out[name], cuda)
    return out


def time_switched(step: Callable[[], None], switch: ArmSwitch, arms: Sequence[str], samples: int, warmup: int,
                  device: torch.device, seed: int = 0) -> dict[str, StepSamples]:
    """Time one switched step (:func:`make_switched_step`) per arm and round, the arms of each round in a
    seeded random order; the switch is set before the step's leading synchronize, outside the timed
    window. Returns ``samples`` entries per arm (round ``i`` of every arm is entry ``i``: paired).

    Raises:
        ValueError: an unknown arm.
    """
    cuda = device.type == "cuda"
    rng = random.Random(seed)
    scratch = StepSamples()
    for _ in range(warmup):
        for arm in arms:
            switch.set(arm)
            _time_one(step, scratch, cuda)
    out = {arm: StepSamples() for arm in arms}
    for _ in range(samples):
        for arm in rng.sample(list(arms), len(arms)):
            switch.set(arm)
            _time_one(step, out[arm], cuda)
    return out


def filler_gpu_us(filler_us: float, device: torch.device, repeats: int = 20) -> float | None:
    """The filler's measured GPU time (µs, CUDA events around ``repeats`` back-to-back fillers); None on CPU."""
    import torch

    if device.type != "cuda" or filler_us <= 0:
        return None if device.type != "cuda" else 0.0
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    for _ in range(repeats):
        gpu_cover(filler_us)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end) * 1e3 / repeats)
