"""The timer: the whole measurement protocol of a set of candidates behind one function, :func:`bench_time`.

Like FlashInfer's ``bench_gpu_time_with_cupti`` and vLLM's ``do_bench_cudagraph``
(``benchmarks/kernels/``), the benchmark builds the candidates (zero-argument callables returning
their output tensor) and the timer owns everything else, in this order:

1. **Build the launches** (:class:`TimingProtocol` ``mode``): ``graph`` captures each candidate in a
   CUDA graph after two eager warm-up calls on a side stream (inside ``capture_context``, e.g. vLLM's
   ``graph_capture`` for its custom all-gather) and launches ``graph.replay``; ``eager`` launches the
   candidate itself, op by op from Python, as vLLM runs batches larger than its largest capture size;
   ``host`` (CPU smoke runs) is eager on the CPU.
2. **Correctness first**: graph outputs are poisoned with NaN and replayed once; the ``check``
   callback sees every candidate's output before anything is timed (it raises to stop the point).
3. **Warm-up**: ``warmup`` rounds and at least ``min_warmup_s`` (clocks settle).
4. **Spans**: before every timed launch, outside the timed interval, ``prepare``: synchronise, L2
   flush (``flush``: a write of 2× the L2), cross-rank ``barrier`` (a device-side one-element
   all-reduce), and in ``eager`` mode a GPU *cover* (``torch.cuda._sleep``) longer than the host
   needs to issue the candidate, so the kernels run back to back and the span is GPU time only.
   The sample is the CUPTI span (:mod:`spx.bench.cupti`) of the launch's kernels, all samples in one
   profiler session; CUDA events are a labelled fallback (``cuda-events``, never inside a profiler);
   on CPU a host wall timer.
5. **Host issue time** (GPU modes): a second pass without the profiler (its callbacks would inflate
   the host); the GPU is kept busy by the cover before each launch, so the host never waits on it
   and ``perf_counter_ns`` around the launch is the time the host needs to issue the candidate. A
   sample whose cover ran out (the stream was idle right after the issue) is retried with a cover
   twice as long; :attr:`Timing.uncovered` counts those left idle. Eagerly, a candidate may be
   replaced in this pass by a host launch (``bench_time(host_launches=…)``: the split with a real
   1-rank all-gather launch where the gather's GPU time is modelled).
6. **Max over ranks** (``reduce_max``): each sample is the max over ranks of that rank's value.

Candidates alternate within every round, and which goes first alternates too (:func:`alternating`).
The low-level timers (:func:`time_cupti`, :func:`time_cuda_events`, :func:`time_host`,
:func:`time_host_issue`) take ``{name: launch}`` and are public for benchmarks that need only one step.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spx.bench.cupti import ANNOTATION_PREFIX, SampleSpan, extract_spans, is_gather_kernel
from spx.vocabulary import ResolvedTimer, TimingMode

if TYPE_CHECKING:
    import torch

__all__ = [
    "ANNOTATION_PREFIX", "Launches", "SampleSpan", "Timing", "TimingProtocol", "alternating", "bench_time",
    "capture", "extract_spans", "is_gather_kernel", "time_cuda_events", "time_cupti", "time_host",
    "time_host_issue",
]

Launches = Mapping[str, Callable[[], object]]
#: Warm-up per point runs for at least this long as well as ``warmup`` rounds: on H200 with 5
#: warm-ups, the first ~12 samples of the 8192-token replicated GEMM ran 5-13 % slow (222 vs 197 µs;
#: clocks settling under the heavier load), pushing its IQR to 3.1 %.
MIN_WARMUP_S = 0.05
#: GPU cover before each eager launch (µs of ``torch.cuda._sleep`` at ≤ 2 GHz): above the host issue
#: time of any candidate here (one eager Humming call issues in 60-110 µs on the lent H200's host).
COVER_US = 1500.0
#: Longest cover a retry may ask for (µs).
MAX_COVER_US = 50_000.0
#: SM clock the cover's cycle count assumes (Hz); a slower clock only makes the cover longer.
_COVER_CLOCK_HZ = 2.0e9


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


def gpu_cover(cover_us: float) -> None:
    """Queue a GPU busy-wait of at least ``cover_us`` µs (``torch.cuda._sleep``; cycles at ≤ 2 GHz)."""
    import torch

    torch.cuda._sleep(int(cover_us * 1e-6 * _COVER_CLOCK_HZ))


def time_host_issue(
    launch: Launches, samples: int, prepare: Callable[[], None] = _noop, cover_us: float = COVER_US
) -> tuple[dict[str, list[float]], int]:
    """Host time (µs) to issue each launch while the GPU is kept busy, and how many samples ran uncovered.

    Per sample: ``prepare()``, a GPU cover of ``cover_us`` (:func:`gpu_cover`), then ``perf_counter_ns``
    around the launch. If the stream is idle right after the issue the cover ran out (the host may
    have waited on the GPU): the sample is retried with twice the cover, up to :data:`MAX_COVER_US`;
    the second value returned counts samples still uncovered then (kept, and reported).
    """
    import torch

    out: dict[str, list[float]] = {name: [] for name in launch}
    uncovered = 0
    stream = torch.cuda.current_stream()
    for _, name in alternating(list(launch), samples):
        while True:
            prepare()
            gpu_cover(cover_us)
            t0 = time.perf_counter_ns()
            launch[name]()
            dt = (time.perf_counter_ns() - t0) / 1e3
            idle = stream.query()
            if not idle or cover_us >= MAX_COVER_US:
                uncovered += int(idle)
                break
            cover_us = min(2 * cover_us, MAX_COVER_US)
        out[name].append(dt)
    torch.cuda.synchronize()
    return out, uncovered


def capture(fn: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor]:
    """Capture ``fn`` into a CUDA graph after two eager warm-up calls on a side stream.

    Returns ``(graph, output)``: the ``torch.cuda.CUDAGraph`` and the tensor its replays write. Keep
    every tensor ``fn`` reads alive while the graph is replayed (a graph does not own them).
    """
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


@dataclass(frozen=True)
class TimingProtocol:
    """How :func:`bench_time` measures (module docstring, steps 1-6).

    Attributes:
        mode: ``graph`` (CUDA-graph replays), ``eager`` (op by op, GPU covered) or ``host`` (CPU).
        timer: ``cupti`` (kernel spans), ``cuda-events`` (fallback, includes launch overhead) or ``host``.
        samples: timed samples per candidate; warmup: untimed rounds (plus ``min_warmup_s`` seconds).
        flush: an int32 tensor of 2× the L2 size, zeroed before every sample (``None``: no flush).
        barrier: cross-rank barrier before every sample (``None``: one rank).
        reduce_max: in-place max over ranks of a float64 tensor (``None``: one rank).
        capture_context: context manager factory around graph capture (vLLM's ``graph_capture``).
        host_time: measure the host issue time (step 5) on GPUs.
        cover_us: the GPU cover before each eager launch and each host-timed launch (µs).
    """

    mode: TimingMode
    timer: ResolvedTimer
    samples: int
    warmup: int
    min_warmup_s: float = MIN_WARMUP_S
    flush: torch.Tensor | None = None
    barrier: Callable[[], None] | None = None
    reduce_max: Callable[[torch.Tensor], None] | None = None
    capture_context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
    host_time: bool = True
    cover_us: float = COVER_US


@dataclass
class Timing:
    """What :func:`bench_time` measured, per candidate name; every list has ``samples`` entries (µs).

    Attributes:
        span_us: the GPU span per sample (CUPTI), or the CUDA-event / host wall time; max over ranks.
        host_us: host issue time per sample (GPU modes; the host wall time on CPU); max over ranks.
        gather_us: span of the collective kernels inside each sample (CUPTI only, else 0).
        kernels: kernel names CUPTI saw per candidate (``cpu:<name>`` labels on CPU).
        outputs: each candidate's output of the correctness run (before timing).
        uncovered: host samples whose GPU cover ran out (see :func:`time_host_issue`).
    """

    span_us: dict[str, list[float]]
    host_us: dict[str, list[float]]
    gather_us: dict[str, list[float]]
    kernels: dict[str, list[str]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    uncovered: int = 0


def _max_over_ranks(protocol: TimingProtocol, rows: dict[str, list[float]]) -> dict[str, list[float]]:
    if protocol.reduce_max is None or not rows:
        return rows
    import torch

    names = list(rows)
    t = torch.tensor([rows[n] for n in names], dtype=torch.float64)
    protocol.reduce_max(t)
    return dict(zip(names, t.tolist(), strict=True))


def _prepared(candidates: Mapping[str, Callable[[], torch.Tensor]], protocol: TimingProtocol,
              ) -> tuple[dict[str, Callable[[], object]], dict[str, torch.Tensor], dict[str, Any]]:
    """Steps 1-2 of the module docstring: each candidate's launch (its graph's replay in ``graph`` mode, the
    callable itself in ``eager``), its output from one run, and the graphs (kept alive while they are timed)."""
    launch: dict[str, Callable[[], object]] = {}
    outputs: dict[str, torch.Tensor] = {}
    graphs: dict[str, Any] = {}
    if protocol.mode == "graph":
        ctx = protocol.capture_context() if protocol.capture_context else contextlib.nullcontext()
        with ctx:
            for name in candidates:
                graphs[name], outputs[name] = capture(candidates[name])
                launch[name] = graphs[name].replay
        for out in outputs.values():  # poison, then one replay each: every element must be rewritten
            out.fill_(float("nan"))
        for name in candidates:
            launch[name]()
    else:
        for name in candidates:
            launch[name] = candidates[name]
            outputs[name] = candidates[name]()
    return launch, outputs, graphs


def _warm_up(launch: Mapping[str, Callable[[], object]], host_launch: Mapping[str, Callable[[], object]],
             prepare: Callable[[], None], protocol: TimingProtocol) -> None:
    """Step 3: every launch (and its host-issue stand-in) at least ``warmup`` rounds and ``min_warmup_s`` seconds."""
    deadline, rounds = time.monotonic() + protocol.min_warmup_s, 0
    while rounds < protocol.warmup or time.monotonic() < deadline:
        for name in launch:
            prepare()
            launch[name]()
            if host_launch[name] is not launch[name]:
                prepare()
                host_launch[name]()
        rounds += 1


def _gpu_timing(launch: Mapping[str, Callable[[], object]], outputs: dict[str, torch.Tensor],
                prepare: Callable[[], None], protocol: TimingProtocol) -> Timing:
    """Step 4: the GPU spans of every launch (CUPTI, or the CUDA-events fallback), per candidate."""
    names, samples = list(launch), protocol.samples
    timing = Timing(span_us={}, host_us={}, gather_us={}, outputs=outputs)
    if protocol.timer == "cupti":
        spans = time_cupti(dict(launch), samples, prepare)
        for name in names:
            timing.span_us[name] = [s.span_us for s in spans[name]]
            timing.gather_us[name] = [s.gather_us for s in spans[name]]
            timing.kernels[name] = sorted({k for s in spans[name] for k in s.kernels})
    else:  # cuda-events: includes launch overhead; a labelled fallback
        timing.span_us = time_cuda_events(dict(launch), samples, prepare)
        timing.gather_us = {name: [0.0] * samples for name in names}
        timing.kernels = {name: [] for name in names}
    return timing


def bench_time(
    candidates: Mapping[str, Callable[[], torch.Tensor]],
    protocol: TimingProtocol,
    check: Callable[[dict[str, torch.Tensor]], None] | None = None,
    host_launches: Launches | None = None,
) -> Timing:
    """Measure every candidate under ``protocol`` (the six steps of the module docstring).

    ``candidates`` map a name to a zero-argument callable returning its output tensor; in ``graph``
    mode they must be capturable. ``check(outputs)`` runs once, after the correctness run and before
    any timing, with each candidate's output. ``host_launches`` (eager and host modes) replace a
    candidate's launch in the host-issue pass only (step 5) and join the warm-up: the split with a
    real 1-rank all-gather launch whose GPU time is modelled, not spanned
    (:mod:`spx.bench.gather_launch`).

    Raises:
        RuntimeError: CUPTI saw no GPU activity for a launch; anything ``check`` raises.
    """
    if protocol.mode == "host":
        return _bench_host(candidates, protocol, check, host_launches)
    import torch

    launch, outputs, graphs = _prepared(candidates, protocol)
    torch.cuda.synchronize()
    if check is not None:
        check(outputs)

    def settle() -> None:
        torch.cuda.synchronize()
        if protocol.flush is not None:
            protocol.flush.zero_()
        if protocol.barrier is not None:
            protocol.barrier()

    def prepare() -> None:
        settle()
        if protocol.mode == "eager":
            gpu_cover(protocol.cover_us)

    host_launch = {**launch, **(host_launches or {})} if protocol.mode == "eager" else launch  # a graph's host cost is its replay
    _warm_up(launch, host_launch, prepare, protocol)
    torch.cuda.synchronize()
    timing = _gpu_timing(launch, outputs, prepare, protocol)
    if protocol.host_time:
        timing.host_us, timing.uncovered = time_host_issue(host_launch, protocol.samples, settle, protocol.cover_us)
    del graphs
    timing.span_us = _max_over_ranks(protocol, timing.span_us)
    timing.host_us = _max_over_ranks(protocol, timing.host_us)
    timing.gather_us = _max_over_ranks(protocol, timing.gather_us)
    return timing


def _bench_host(
    candidates: Mapping[str, Callable[[], torch.Tensor]],
    protocol: TimingProtocol,
    check: Callable[[dict[str, torch.Tensor]], None] | None,
    host_launches: Launches | None = None,
) -> Timing:
    """CPU: eager, host wall timer (span = host time); a smoke run of the pipeline only.

    With ``host_launches`` the host samples come from a second pass in which they replace their
    candidates (span = the first pass's walls).
    """
    outputs = {name: fn() for name, fn in candidates.items()}
    if check is not None:
        check(outputs)
    host_launch: dict[str, Callable[[], object]] = {**candidates, **(host_launches or {})}
    for _ in range(protocol.warmup):
        for name, fn in candidates.items():
            fn()
            if host_launch[name] is not fn:
                host_launch[name]()
    barrier = protocol.barrier or _noop
    walls = _max_over_ranks(protocol, time_host(dict(candidates), protocol.samples, barrier))
    host = walls
    if host_launches:
        host = _max_over_ranks(protocol, time_host(host_launch, protocol.samples, barrier))
    return Timing(
        span_us=walls,
        host_us={name: list(v) for name, v in host.items()},
        gather_us={name: [0.0] * protocol.samples for name in candidates},
        kernels={name: [] for name in candidates},
        outputs=outputs,
    )
