"""Sizing and preflight of a local run, before any rank starts: device, rank count, time and memory.

Pure arithmetic plus a few reads of the host (visible GPUs, ``/proc/meminfo``, the cgroup's memory
limit, one short calibration GEMM on CPU). Everything here raises :class:`RunnerError` with the number
that decided it, so ``spx run`` refuses a run this machine cannot hold instead of spawning ranks that
run out of memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from spx.analysis.threshold import next_multiple
from spx.api import ExperimentSpec
from spx.vocabulary import ResolvedDevice

#: The one rule for a GPU-sized spec (docs/cli.md, ``spx run`` step 5): with ``kernel.device: auto`` and no GPU
#: visible, a sweep whose GEMMs add up to more than this (FLOPs per rank, warm-up and samples included:
#: :func:`point_flops`) is refused unless CPU is asked for. The V4.1 TP8 sweep is ~5e13, the CPU quickstart ~4e10.
#: A count of operations, not a time estimate, so the refusal is the same on every machine (a time estimate moves
#: 2-3× with the load of a shared host); the time estimate is checked against the run's own limit instead
#: (:func:`check_time_limit`).
GPU_SIZED_FLOPS = 1e12
#: Resident memory of one rank before any tensor (a CPU torch process with gloo: ~300 MiB measured
#: on torch 2.13; a CUDA context is larger but lives on the GPU).
RANK_BASE_BYTES = 400 << 20
#: Fraction of the available host memory a run may plan to use.
MEMORY_HEADROOM = 0.8
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


class RunnerError(RuntimeError):
    """The run could not be started: bad ``nproc``, no GPU for a CUDA spec, too large for this host."""


def visible_gpus() -> int:
    """Number of CUDA devices torch can see (0 without CUDA)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a bench dependency
        return 0
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # pragma: no cover - broken driver: behave as CPU
        return 0


def resolve_device(spec: ExperimentSpec, gpus: int | None = None) -> ResolvedDevice:
    """``cuda`` or ``cpu``: ``spec.kernel.device`` with ``auto`` resolved by what is visible."""
    if spec.kernel.device != "auto":
        return spec.kernel.device
    return "cuda" if (visible_gpus() if gpus is None else gpus) > 0 else "cpu"


def default_nproc(spec: ExperimentSpec, gpus: int | None = None) -> int:
    """Visible GPUs on CUDA, else 2 on CPU; capped at TP (fewer ranks than TP: ``gather: auto`` models the
    all-gather, an explicit backend is refused by :func:`preflight`)."""
    gpus = visible_gpus() if gpus is None else gpus
    device = resolve_device(spec, gpus)
    n = gpus if device == "cuda" else 2
    return max(1, min(n, spec.parallelism.tensor_parallel_size))


def check_nproc(spec: ExperimentSpec, nproc: int, device: ResolvedDevice, gpus: int | None = None) -> int:
    """Validate a requested rank count; returns it capped at TP.

    Raises:
        RunnerError: ``nproc < 1``, or a CUDA run with more ranks than visible GPUs.
    """
    if nproc < 1:
        raise RunnerError(f"--nproc must be >= 1 (got {nproc})")
    nproc = min(nproc, spec.parallelism.tensor_parallel_size)
    if device == "cuda":
        gpus = visible_gpus() if gpus is None else gpus
        if gpus == 0:
            raise RunnerError("spec.kernel.device is cuda but no CUDA GPU is visible on this host")
        if nproc > gpus:
            raise RunnerError(f"--nproc {nproc} ranks need {nproc} GPUs; only {gpus} visible")
    return nproc


@dataclass(frozen=True)
class RunEstimate:
    """What a sweep costs on this host, before it runs.

    Attributes:
        peak_rank_bytes: the largest point's peak memory of one rank (bytes), ``RANK_BASE_BYTES`` included.
        peak_tokens: the token count that peak belongs to.
        total_bytes: ``peak_rank_bytes × nproc``: what the host (CPU) must hold at once.
        seconds: estimated wall time of the sweep (``None`` on CUDA: not estimated, GPUs are fast).
        gflops: the calibrated CPU GEMM rate the time is based on (GFLOP/s over all cores; ``None`` on CUDA).
    """

    peak_rank_bytes: int
    peak_tokens: int
    total_bytes: int
    seconds: float | None = None
    gflops: float | None = None

    def describe(self, nproc: int) -> str:
        """e.g. ``≈ 25 min of GEMMs and ≈ 6.2 GiB (3.1 GiB per rank × 2, at 16384 tokens)``.

        The time counts the GEMMs only (start-up, ~2-5 s on 2 cores, and the gathers come on top)."""
        head = ""
        if self.seconds is not None:
            t = fmt_seconds(self.seconds)
            head = f"{'' if t.startswith('<') else '≈ '}{t} of GEMMs and "
        return (f"{head}≈ {fmt_bytes(self.total_bytes)} ({fmt_bytes(self.peak_rank_bytes)} per rank × {nproc}, "
                f"at {self.peak_tokens:,} tokens)")


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: ``3.1 GiB``."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n / 1024:.0f} KiB"


def fmt_seconds(s: float) -> str:
    """``< 1 s``, ``42 s``, ``25 min``, ``3.2 h``."""
    if s < 1:
        return "< 1 s"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def point_bytes(spec: ExperimentSpec, tokens: int) -> int:
    """Peak bytes one rank allocates at ``tokens`` (``M``), without :data:`RANK_BASE_BYTES`.

    From :func:`spx.bench.candidates.build_candidates` and ``spx.bench.correctness.check_correctness``: ``X`` drawn in fp32 then
    cast (``4·M·K + b·M·K``), the padded shard input (``b·M_pad·K``), the replicated output, the gathered
    output, the gathered shards and their concatenation (``4 · b·M_pad·N``), and the fp32 comparison
    copies (``3 · 4·M·N``); the FP8 weight with its dequantised copy (``N·K·(1 + b)``). ``b`` is the
    activation dtype's size.
    """
    k, n = spec.projection.hidden_size, spec.projection.output_size
    b = _DTYPE_BYTES.get(spec.projection.activation_dtype, 2)
    m_pad = next_multiple(tokens, spec.parallelism.tensor_parallel_size)
    return tokens * k * (4 + b) + m_pad * k * b + 4 * m_pad * n * b + 12 * tokens * n + n * k * (1 + b)


def point_flops(spec: ExperimentSpec, tokens: int, nproc: int) -> float:
    """GEMM FLOPs one rank runs for one point: ``(warmup + samples + 2)`` rounds of the replicated
    ``2·M·K·N`` and the shard ``2·(M_pad/TP)·K·N``."""
    k, n = spec.projection.hidden_size, spec.projection.output_size
    tp = spec.parallelism.tensor_parallel_size
    rows = next_multiple(tokens, tp) // tp
    rounds = spec.kernel.warmup + spec.kernel.samples + 2
    return float(rounds * (2 * tokens * k * n + 2 * rows * k * n))


#: The most weight elements the CPU calibration GEMM allocates (32 MiB in bf16): a projection larger than
#: this is calibrated on its first ``CALIBRATION_MAX_WEIGHT // K`` output rows, so the calibration never
#: holds more than a fraction of what the memory check allowed (the rate barely depends on ``N`` there).
CALIBRATION_MAX_WEIGHT = 1 << 24


def calibrate_cpu_gflops(spec: ExperimentSpec, seconds: float = 0.3) -> float:
    """GFLOP/s of ``spec``'s own projection GEMM (``[512, K] · [N, K]ᵀ`` in its activation dtype, ``N`` capped
    at :data:`CALIBRATION_MAX_WEIGHT` ``// K``) on this host's CPU with all threads: the median of the timed calls
    after one warm-up (a shared machine's rate varies by 2-3× from second to second; the median of a few calls
    is what a sweep sees). Its tensors are drawn in the activation dtype (no fp32 copy of the weight)."""
    import statistics

    import torch

    dt = getattr(torch, spec.projection.activation_dtype)
    k = spec.projection.hidden_size
    n = max(1, min(spec.projection.output_size, CALIBRATION_MAX_WEIGHT // k))
    rows = min(512, max(spec.sweep.tokens))
    a, w = torch.randn(rows, k, dtype=dt), torch.randn(n, k, dtype=dt)
    torch.nn.functional.linear(a, w)
    times: list[float] = []
    t0 = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - t0 < seconds and len(times) < 50):
        t = time.perf_counter()
        torch.nn.functional.linear(a, w)
        times.append(time.perf_counter() - t)
    return 2 * rows * k * n / max(statistics.median(times), 1e-9) / 1e9


def estimate(spec: ExperimentSpec, device: ResolvedDevice, nproc: int, cpu_gflops: float | None = None) -> RunEstimate:
    """Peak memory (and on CPU the time, at ``cpu_gflops``) of ``spec``'s sweep with ``nproc`` ranks.

    Each rank gets ``1/nproc`` of the CPU's rate (the runner splits the threads evenly).
    """
    peak_tokens = max(spec.sweep.tokens, key=lambda t: point_bytes(spec, t))
    peak = point_bytes(spec, peak_tokens) + RANK_BASE_BYTES
    seconds = None
    if device == "cpu" and cpu_gflops:
        per_rank = cpu_gflops * 1e9 / nproc
        seconds = sum(point_flops(spec, t, nproc) for t in spec.sweep.tokens) / per_rank
    return RunEstimate(peak, peak_tokens, peak * nproc if device == "cpu" else peak, seconds, cpu_gflops)


def host_memory_available() -> int | None:
    """Bytes this process may still allocate: ``MemAvailable`` of ``/proc/meminfo``, capped by the
    cgroup v2 limit (``memory.max − memory.current``) where one is set; ``None`` when unknown."""
    avail: int | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            left = int(limit) - used
            avail = left if avail is None else min(avail, left)
    except (OSError, ValueError):
        pass
    return avail


def gpu_memory_bytes() -> int | None:
    """Total memory of CUDA device 0 (bytes), ``None`` without CUDA."""
    try:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else None
    except Exception:  # pragma: no cover - broken driver
        return None


def check_fits(
    spec: ExperimentSpec, device: ResolvedDevice, nproc: int, *, device_asked: bool, cpu_gflops: float | None = None,
    available: int | None = None,
) -> RunEstimate:
    """Refuse, before spawning, a run this host cannot hold or that is GPU-sized on a CPU.

    ``device_asked``: the user chose CPU explicitly (``--device cpu`` or ``spec.kernel.device: cpu``);
    without it a CPU run whose GEMMs exceed :data:`GPU_SIZED_FLOPS` is refused (the one rule; the time estimate
    is checked against the run's own limit by :func:`check_time_limit`).

    On CPU the memory check comes before the calibration GEMM (:func:`calibrate_cpu_gflops`), which
    allocates at most :data:`CALIBRATION_MAX_WEIGHT` weight elements.

    Raises:
        RunnerError: the memory estimate exceeds ``MEMORY_HEADROOM`` of the available memory, or the spec
            is GPU-sized and CPU was not asked for. The message gives the estimate and the fix.
    """
    largest = max(spec.sweep.tokens)
    if device == "cpu":  # memory first: the calibration below allocates (a little of) the projection
        avail = host_memory_available() if available is None else available
        est = estimate(spec, device, nproc, cpu_gflops)
        if avail is not None and est.total_bytes > MEMORY_HEADROOM * avail:
            raise RunnerError(_memory_refusal(spec, est, nproc, avail))
        if cpu_gflops is None:
            cpu_gflops = calibrate_cpu_gflops(spec)
    est = estimate(spec, device, nproc, cpu_gflops)
    if device == "cpu":
        flops = sum(point_flops(spec, t, nproc) for t in spec.sweep.tokens)
        if not device_asked and flops > GPU_SIZED_FLOPS:
            raise RunnerError(
                f"no GPU is visible and this experiment is GPU-sized: its GEMMs add up to {flops:.1e} FLOPs per rank "
                f"(hiddenSize {spec.projection.hidden_size}, {len(spec.sweep.tokens)} token counts up to {largest:,}), "
                f"over the {GPU_SIZED_FLOPS:.0e} a CPU run takes unasked (docs/cli.md, spx run). Pass --device cpu (or "
                "set spec.kernel.device: cpu) to run it on CPU anyway (a smoke run: CPU timings say nothing about "
                "GPUs), or try examples/quickstart.yaml"
            )
    else:
        total = gpu_memory_bytes() if available is None else available
        if total is not None and est.peak_rank_bytes > MEMORY_HEADROOM * total:
            raise RunnerError(
                f"a rank needs ≈ {fmt_bytes(est.peak_rank_bytes)} of GPU memory at {est.peak_tokens:,} tokens, more "
                f"than the GPU holds ({fmt_bytes(total)}): lower spec.sweep.tokens (largest {largest:,})"
            )
    return est


def check_time_limit(est: RunEstimate | None, limit_s: float, limit_name: str, nproc: int) -> None:
    """Refuse a sweep whose estimated time (:attr:`RunEstimate.seconds`, CPU only) exceeds its own time limit:
    it would burn the cores until the limit stops it, and keep a partial result at best.

    Raises:
        RunnerError: the estimate and the limit, and the fixes (fewer or smaller token counts, fewer samples,
            or a larger limit).
    """
    if est is None or est.seconds is None or est.seconds <= limit_s:
        return
    raise RunnerError(
        f"this sweep cannot finish within its time limit: it would take {est.describe(nproc)}, and {limit_name} is "
        f"{limit_s:g} s; lower spec.sweep.tokens (largest {est.peak_tokens:,}) or "
        f"spec.kernel.samples, or raise {limit_name}"
    )


def _memory_refusal(spec: ExperimentSpec, est: RunEstimate, nproc: int, avail: int) -> str:
    """Why a CPU run does not fit in ``avail`` bytes, and the fix: fewer or smaller token counts, fewer ranks,
    or (when one rank's weights alone are too much) a smaller projection."""
    k, n = spec.projection.hidden_size, spec.projection.output_size
    b = _DTYPE_BYTES.get(spec.projection.activation_dtype, 2)
    weights = n * k * (1 + b)  # the weight and its dequantised copy (point_bytes), on every rank
    if nproc * weights + nproc * RANK_BASE_BYTES > MEMORY_HEADROOM * avail:
        fix = (f"the weights alone need {fmt_bytes(weights)} per rank (hiddenSize {k:,} × outputSizes total {n:,}): "
               "use a smaller spec.projection, or a machine with more memory")
    else:
        fix = f"lower spec.sweep.tokens (largest {max(spec.sweep.tokens):,}) or --nproc"
    return (f"a run this machine cannot hold: the sweep needs {est.describe(nproc)} of memory, more than this host "
            f"can hold ({fmt_bytes(avail)} available): {fix}")


def preflight(spec: ExperimentSpec, device: ResolvedDevice, nproc: int) -> list[str]:
    """:func:`spx.bench.kernel.preflight`: the backend, gather and timer this host can run.

    Raises:
        RunnerError: a backend, gather or timer the device cannot run, or vLLM missing.
    """
    from spx.bench.kernel import preflight as bench_preflight

    try:
        return bench_preflight(spec, device, nproc)
    except (ValueError, RuntimeError) as exc:
        raise RunnerError(str(exc)) from None


__all__ = [
    "GPU_SIZED_FLOPS", "RunEstimate", "RunnerError", "check_fits", "check_nproc", "check_time_limit", "default_nproc", "estimate",
    "host_memory_available", "point_bytes", "preflight", "resolve_device", "visible_gpus",
]
