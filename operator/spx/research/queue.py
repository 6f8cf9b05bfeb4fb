"""An eager step as a queue: host issue + in-order GPU execution, and what replacing one op does to it.

vLLM runs a batch above its CUDA-graph capture limit eagerly: the host issues the forward op by op into
one CUDA stream and synchronises once at the step's end (the model runner waits for the sampled
tokens). The GPU runs the ops in order. So (times in µs):

- op ``k`` is issued when the host has spent the issue times of ops ``0 … k``:
  ``issued_k = issued_{k−1} + host_k``;
- it starts on the GPU at ``max(issued_k, end_{k−1})`` and ends ``gpu_k`` later;
- a synchronising op (``sync``: a host read of a GPU value, e.g. a CPU copy of a tensor) makes the host
  wait for the GPU before it issues the next op, emptying the queue;
- the step ends at the final sync: ``max(issued_last, end_last)`` = ``end_last``.

In the steady state of ``L`` identical layers of host time ``H = Σ host`` and GPU time ``G = Σ gpu``
per layer, the step lasts about ``L · max(H, G)``. Replacing one op per layer (the replicated projection
by the split: host difference Δh, GPU difference Δg) moves it by ``L · (max(H + Δh, G + Δg) − max(H, G))``
(:func:`steady_state_effect_us`):

- **host-bound** (``H + Δh ≥ G + Δg`` and ``H ≥ G``): by ``L · Δh``;
- **gpu-bound** (``G + Δg ≥ H + Δh`` and ``G ≥ H``): by ``L · Δg``;
- **at the pivot** (the replacement moves the bottleneck): by something strictly between the two;

never by the difference of the per-op ``max(host, gpu)``, which describes no regime (docs/kernel-benchmark.md,
"Regimes"). :func:`simulate` computes a step exactly (the first layer's lead and the last op's tail
included); ``tests/unit/test_research_queue.py`` table-tests both on synthetic steps of known Δg and Δh.
Which regime a real step is in depends on the whole layer (attention, MoE and their host costs) and on
the node's host: only a measurement of the step settles it (the step A/B, :mod:`spx.api.step`). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spx.api.status import KernelRegime


@dataclass(frozen=True)
class Op:
    """One op of an eager step: ``host_us`` to issue it, ``gpu_us`` to run it; ``sync``: the host waits for
    the GPU after issuing it (the queue empties)."""

    host_us: float
    gpu_us: float
    name: str = ""
    sync: bool = False

    def __post_init__(self) -> None:
        """Refuse a time that is not finite and ≥ 0 (naming the op)."""
        for field, v in (("host_us", self.host_us), ("gpu_us", self.gpu_us)):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"op {self.name or '?'}: {field} must be finite and >= 0 µs, got {v}")


@dataclass(frozen=True)
class StepTiming:
    """:func:`simulate`'s outcome, µs: ``step_us`` (first issue → the end-of-step sync), the host's total
    issue time, the GPU's busy time, and its idle time inside the step (``step − busy``)."""

    step_us: float
    host_us: float
    gpu_busy_us: float

    @property
    def gpu_idle_us(self) -> float:
        """µs the GPU waited for the host inside the step."""
        return self.step_us - self.gpu_busy_us


def simulate(ops: Sequence[Op]) -> StepTiming:
    """The step of ``ops`` issued in order into one stream with one sync at the end (module docstring)."""
    issued = gpu_end = 0.0
    for op in ops:
        issued += op.host_us
        gpu_end = max(issued, gpu_end) + op.gpu_us
        if op.sync:
            issued = gpu_end
    return StepTiming(max(issued, gpu_end), sum(o.host_us for o in ops), sum(o.gpu_us for o in ops))


def layered(layer: Sequence[Op], layers: int) -> list[Op]:
    """``layers`` copies of one layer's ops, in order.

    Raises:
        ValueError: ``layers < 1``.
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    return [op for _ in range(layers) for op in layer]


def replacement_effect_us(layer: Sequence[Op], index: int, replacement: Op, layers: int) -> float:
    """How much replacing ``layer[index]`` by ``replacement`` in every layer moves the step, µs per layer
    (exact, by :func:`simulate`; negative: the step gets shorter).

    Raises:
        IndexError: ``index`` is not an op of ``layer``. ValueError: ``layers < 1``.
    """
    before = simulate(layered(layer, layers)).step_us
    changed = [*layer[:index], replacement, *layer[index + 1:]] if 0 <= index < len(layer) else None
    if changed is None:
        raise IndexError(f"index {index} is not an op of a {len(layer)}-op layer")
    return (simulate(layered(changed, layers)).step_us - before) / layers


def steady_state_effect_us(host_us: float, gpu_us: float, delta_host_us: float, delta_gpu_us: float) -> float:
    """``max(H + Δh, G + Δg) − max(H, G)``: the steady-state effect per layer of a replacement (module docstring)."""
    return max(host_us + delta_host_us, gpu_us + delta_gpu_us) - max(host_us, gpu_us)


def regime(layer: Sequence[Op]) -> KernelRegime:
    """The steady-state bottleneck of a layer: ``host-bound`` when its host time ≥ its GPU time, else ``gpu-bound``."""
    host, gpu = sum(o.host_us for o in layer), sum(o.gpu_us for o in layer)
    return "host-bound" if host >= gpu else "gpu-bound"
