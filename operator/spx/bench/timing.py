"""Timers generic over "a dict of launch functions", and the CUPTI span extraction they rest on.

The timers (:func:`time_cupti`, :func:`time_cuda_events`, :func:`time_host`) take ``{name: launch}``
(zero-argument callables: a CUDA graph's ``replay``, an eager function), a sample count and a
``prepare`` callable run before every timed launch, outside the timed interval (an L2 flush, a barrier
across ranks); they alternate the launch order every round so no candidate always goes first, and
return ``{name: samples}``. This is the shape of vLLM's ``benchmarks/kernels`` helpers and FlashInfer's
``bench_gpu_time``: the benchmark builds the candidates, the timer only times them.

Per-sample GPU time of one launch from CUPTI kernel records (torch.profiler / kineto):

The sample is the *span* of the GPU activities the launch issued: first kernel start → last kernel
end, measured by CUPTI on the device's clock. Unlike CUDA events around ``graph.replay()`` it
excludes the host's launch overhead (~10-15 µs on H200 for a tiny GEMM), which would otherwise
swamp the small-token points (docs/kernel-benchmark.md, "Method").

How the activities of one sample are found: every timed launch is wrapped in a
``record_function("spx/<candidate>/<i>")`` range; the CUDA runtime calls made inside that CPU range
(``cudaGraphLaunch`` for a graph replay, ``cudaLaunchKernel``… eagerly) carry correlation ids, and
CUPTI tags each GPU activity with the correlation id of the runtime call that issued it.
"""

from __future__ import annotations

import re
import time
import warnings
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ANNOTATION_PREFIX = "spx/"
_GATHER_KERNEL = re.compile(r"nccl|allgather|all_gather|cross_device|gloo", re.IGNORECASE)


def is_gather_kernel(name: str) -> bool:
    """True for collective kernels (NCCL ``ncclDevKernel_AllGather_*``, vLLM's custom all-gather)."""
    return bool(_GATHER_KERNEL.search(name))


@dataclass
class SampleSpan:
    """GPU activity of one timed launch: span (µs), the gather kernels' span (µs), kernel names."""

    span_us: float
    gather_us: float
    kernels: list[str] = field(default_factory=list)


def _is_gpu(event: Any) -> bool:
    return str(event.device_type()).endswith("CUDA")


def extract_spans(events: list[Any]) -> dict[str, SampleSpan]:
    """Map each ``spx/<candidate>/<i>`` annotation to the span of the GPU activities it launched.

    ``events`` are kineto events (``prof.profiler.kineto_results.events()``).

    Raises:
        RuntimeError: an annotation launched no GPU activity CUPTI saw (CUPTI unavailable, or the
            profiler did not record CUDA activity): use ``timer: cuda-events`` on such systems.
    """
    annotations = [
        e for e in events if not _is_gpu(e) and e.name().startswith(ANNOTATION_PREFIX) and e.duration_ns() > 0
    ]
    # Runtime calls per CPU thread, sorted by start: each annotation's calls are found by bisection
    # (O((A + R) log R) instead of scanning every runtime call per annotation).
    runtime_by_tid: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if not _is_gpu(e) and e.correlation_id() and e.name().startswith(("cuda", "cu", "nccl")):
            runtime_by_tid[e.start_thread_id()].append((e.start_ns(), e.correlation_id()))
    starts_by_tid: dict[int, list[int]] = {}
    for tid, calls in runtime_by_tid.items():
        calls.sort(key=lambda c: c[0])
        starts_by_tid[tid] = [start for start, _ in calls]
    gpu_by_corr: dict[int, list[Any]] = defaultdict(list)
    for e in events:
        if _is_gpu(e) and not e.is_user_annotation() and not e.name().startswith(ANNOTATION_PREFIX):
            # CUPTI's correlation id of the runtime call that issued it. Not linked_correlation_id():
            # that is the CPU op's external id, a different id space whose values collide with runtime
            # ids (seen on H200: an L2-flush fill kernel attributed to a replay, a 6.3 ms "sample").
            gpu_by_corr[e.correlation_id()].append(e)

    spans: dict[str, SampleSpan] = {}
    for ann in annotations:
        start, end, tid = ann.start_ns(), ann.end_ns(), ann.start_thread_id()
        calls, starts = runtime_by_tid.get(tid, []), starts_by_tid.get(tid, [])
        lo, hi = bisect_left(starts, start), bisect_right(starts, end)
        corr = {c for _, c in calls[lo:hi]}
        gpu = {id(g): g for c in corr for g in gpu_by_corr.get(c, [])}.values()
        if not gpu:
            raise RuntimeError(
                f"CUPTI recorded no GPU activity for {ann.name()}: the profiler saw no CUDA kernels "
                "(is CUPTI available?); set spec.kernel.timer: cuda-events to time with CUDA events instead"
            )
        first = min(g.start_ns() for g in gpu)
        last = max(g.end_ns() for g in gpu)
        gathers = [g for g in gpu if is_gather_kernel(g.name())]
        gather_ns = (max(g.end_ns() for g in gathers) - min(g.start_ns() for g in gathers)) if gathers else 0
        spans[ann.name()] = SampleSpan(
            span_us=(last - first) / 1e3,
            gather_us=gather_ns / 1e3,
            kernels=sorted({g.name() for g in gpu}),
        )
    return spans


Launches = Mapping[str, Callable[[], object]]


def alternating(names: Sequence[str], samples: int) -> Iterator[tuple[int, str]]:
    """``(sample index, name)`` for ``samples`` rounds over ``names``, the order reversed every other round."""
    for i in range(samples):
        for name in names if i % 2 == 0 else names[::-1]:
            yield i, name


def _noop() -> None:
    return None


def time_cupti(launch: Launches, samples: int, prepare: Callable[[], None] = _noop) -> dict[str, list[SampleSpan]]:
    """``samples`` CUPTI spans (µs) of each launch, in one profiler session.

    Each timed launch runs inside ``record_function("spx/<name>/<i>")``; :func:`extract_spans` maps the
    GPU activities it issued back to it. The caller has warmed up and synchronised.

    Raises:
        RuntimeError: CUPTI saw no GPU activity for a launch (see :func:`extract_spans`).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    names = list(launch)
    with warnings.catch_warnings():  # one session per call: torch warns it is not accumulating
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i, name in alternating(names, samples):
                prepare()
                with record_function(f"{ANNOTATION_PREFIX}{name}/{i}"):
                    launch[name]()
            torch.cuda.synchronize()
    spans = extract_spans(list(prof.profiler.kineto_results.events()))
    return {name: [spans[f"{ANNOTATION_PREFIX}{name}/{i}"] for i in range(samples)] for name in names}


def time_cuda_events(launch: Launches, samples: int, prepare: Callable[[], None] = _noop) -> dict[str, list[float]]:
    """``samples`` CUDA-event times (µs) of each launch; includes the host's launch overhead (a fallback)."""
    import torch

    out: dict[str, list[float]] = {name: [] for name in launch}
    for _, name in alternating(list(launch), samples):
        prepare()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        launch[name]()
        end.record()
        end.synchronize()
        out[name].append(start.elapsed_time(end) * 1e3)
    return out


def time_host(launch: Launches, samples: int, prepare: Callable[[], None] = _noop) -> dict[str, list[float]]:
    """``samples`` host wall times (µs, ``perf_counter_ns``) of each launch: CPU smoke runs only."""
    out: dict[str, list[float]] = {name: [] for name in launch}
    for _, name in alternating(list(launch), samples):
        prepare()
        t0 = time.perf_counter_ns()
        launch[name]()
        out[name].append((time.perf_counter_ns() - t0) / 1e3)
    return out
