"""Run an experiment on this host: size it, start one process per rank, keep what they measured.

The steps live in their own modules: :mod:`spx.runner.sizing` (device, rank count, the time and memory
estimate that refuses a run this host cannot hold), :mod:`spx.runner.launch` (torch's elastic launcher,
per-rank logs) and :mod:`spx.runner.forensics` (which rank caused a failure and which log holds its
traceback). This module runs them in order and keeps the results. Progress is the caller's: pass a
:class:`RunProgress` (``spx run`` draws a bar on a terminal and prints a line per point otherwise).

Files under ``out_dir``:

- ``points.partial.jsonl`` — rank 0 appends each :class:`~spx.api.PointResult` as one JSON line as
  soon as a token count is measured; the parent tails it for progress and keeps it on failure.
- ``result.json`` — the :class:`~spx.api.KernelResult`: rank 0's document on success; on failure a
  partial one rebuilt from ``points.partial.jsonl`` with ``complete = False`` and ``error`` set.
- ``logs/`` — see :mod:`spx.runner.launch`.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from spx.api import Environment, ExperimentSpec, KernelResult, PointResult
from spx.api.base import utc_now
from spx.rundir import RunDirectory
from spx.runner.forensics import RankFailure, rank_failures
from spx.runner.launch import BENCH_ENTRY, launch, launch_environment, launcher_logging
from spx.runner.sizing import (
    RunEstimate,
    RunnerError,
    check_fits,
    check_nproc,
    check_time_limit,
    default_nproc,
    preflight,
    resolve_device,
    visible_gpus,
)
from spx.vocabulary import LOGS_DIR, POINTS_FILE, ResolvedDevice

PointCallback = Callable[[PointResult], None]


class RunProgress(Protocol):
    """What a local run reports while it runs (the CLI's progress bar or progress lines)."""

    def start(self, total: int, nproc: int, device: str, estimate: RunEstimate | None, added: int = 0) -> None:
        """The ranks are about to start: ``total`` listed token counts on ``nproc`` ``device`` ranks, and up to
        ``added`` more that an adaptive sweep (``sweep.refine``) may add (their points carry ``added_because``)."""

    def point(self, point: PointResult) -> None:
        """Rank 0 finished a token count."""

    def stop(self) -> None:
        """The run ended (any outcome)."""


@dataclass
class LocalRunOutcome:
    """What :func:`run_local` produced. ``result`` is always set (partial on failure)."""

    result: KernelResult
    out_dir: Path
    log_dir: Path
    nproc: int
    device: ResolvedDevice
    failures: list[RankFailure] = field(default_factory=list)
    estimate: RunEstimate | None = None

    @property
    def ok(self) -> bool:
        """True when the result is complete and carries no error."""
        return self.result.complete and self.result.error is None

    @property
    def error(self) -> str | None:
        """The result's error message (``None`` on success)."""
        return self.result.error

    @property
    def failed_rank(self) -> int | None:
        """The root-cause rank (first of ``failures``), ``None`` when no rank failed."""
        return self.failures[0].rank if self.failures else None


class _PointTail:
    """Reads complete lines appended to ``points.partial.jsonl``; thread-safe, idempotent."""

    def __init__(self, path: Path, on_point: PointCallback | None) -> None:
        self.path = path
        self.on_point = on_point
        self.points: list[PointResult] = []
        self.bad_lines: list[str] = []
        self._offset = 0
        self._lock = threading.Lock()

    def drain(self) -> None:
        with self._lock:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return
            end = chunk.rfind(b"\n")
            if end < 0:
                return
            self._offset += end + 1
            for raw in chunk[: end + 1].splitlines():
                if not raw.strip():
                    continue
                try:
                    point = PointResult.model_validate_json(raw)
                except ValueError as err:
                    self.bad_lines.append(f"{raw[:200]!r}: {err}")
                    continue
                self.points.append(point)
                if self.on_point is not None:
                    self.on_point(point)

    def run(self, stop: threading.Event, interval: float = 0.2) -> None:
        while not stop.wait(interval):
            self.drain()


def partial_result(
    spec: ExperimentSpec,
    points: list[PointResult],
    *,
    experiment: str,
    nproc: int,
    device: ResolvedDevice,
    error: str,
    started_at: str | None = None,
    wall_seconds: float | None = None,
) -> KernelResult:
    """A ``complete = False`` :class:`KernelResult` from the points rank 0 streamed before the failure.

    Backend, timer and gather fields are the spec's requests (``auto`` unresolved): the rank that
    would have resolved them is gone; a warning says so.
    """
    tp = spec.parallelism.tensor_parallel_size
    gather_source = points[-1].gather_source if points else ("measured" if nproc >= tp else "modelled")
    env = Environment(device=device, python=platform.python_version(), node=platform.node())
    with contextlib.suppress(Exception):
        import torch

        env.torch = str(torch.__version__)
    with contextlib.suppress(Exception):
        from spx import __version__

        env.spx = __version__
    return KernelResult(
        experiment=experiment,
        spec=spec,
        environment=env,
        world_size=nproc,
        gemm_backend=spec.kernel.gemm_backend,
        gather_backend=spec.kernel.gather,
        gather_source=gather_source,
        timer=spec.kernel.timer,
        device=device,
        cuda_graphs=spec.kernel.cuda_graphs,
        points=points,
        warnings=[
            f"partial result rebuilt by the local runner from {POINTS_FILE} ({len(points)} of "
            f"{len(spec.sweep.tokens)} token counts); gemmBackend/gatherBackend/timer are the spec's "
            "requests, not what ran"
        ],
        complete=False,
        error=error,
        started_at=started_at,
        finished_at=utc_now(),
        wall_seconds=wall_seconds,
    )


def plan(spec: ExperimentSpec, nproc: int | None = None, *, device_asked: bool | None = None,
         bench: str = BENCH_ENTRY, timeout_s: float | None = None) -> tuple[ResolvedDevice, int, RunEstimate | None]:
    """``(device, nproc, estimate)`` of a run, checked before anything starts.

    ``device_asked`` defaults to ``spec.kernel.device == "cpu"``: a CPU run that was asked for. The checks run in
    this order, so the first thing to fix is named first: the backends this host can run (a spec's ``vllm``
    backend without vLLM installed), then the memory and the GPU-sized rule (:func:`~spx.runner.sizing.check_fits`),
    then the time estimate against the run's own limit (``timeout_s``, default ``spec.timeoutSeconds``).

    Raises:
        RunnerError: an impossible ``nproc``/device, a backend the device cannot run, a sweep too large for
            this host's memory, a GPU-sized spec on a CPU that was not asked for, or an estimate over the limit.
    """
    gpus = visible_gpus()
    device = resolve_device(spec, gpus)
    n = check_nproc(spec, default_nproc(spec, gpus) if nproc is None else nproc, device, gpus)
    if bench != BENCH_ENTRY:
        return device, n, None
    asked = spec.kernel.device == "cpu" if device_asked is None else device_asked
    preflight(spec, device, n)
    est = check_fits(spec, device, n, device_asked=asked)
    check_time_limit(est, spec.timeout_seconds if timeout_s is None else timeout_s,
                     "spec.timeoutSeconds" if timeout_s is None else "the timeout", n)
    return device, n, est


@dataclass
class _Attempt:
    """What the launcher left: rank 0's result document (JSON) or an error, and the failed ranks."""

    result_json: str | None = None
    error: str | None = None
    failures: list[RankFailure] = field(default_factory=list)

    def result(self) -> KernelResult | None:
        """Rank 0's :class:`KernelResult`; ``None`` (and ``error`` set) when it returned none or an invalid one."""
        if self.result_json is None:
            return None
        try:
            return KernelResult.model_validate_json(self.result_json)
        except ValueError as err:
            self.error = f"rank 0 returned an invalid result document: {err}"
            return None


def run_local(
    spec: ExperimentSpec,
    out_dir: str | os.PathLike[str],
    *,
    nproc: int | None = None,
    experiment: str = "local",
    on_point: PointCallback | None = None,
    progress: RunProgress | None = None,
    timeout_s: float | None = None,
    bench: str = BENCH_ENTRY,
    device_asked: bool | None = None,
) -> LocalRunOutcome:
    """Run ``spec``'s kernel bench on this host with ``nproc`` ranks; never raises for a rank's failure.

    Args:
        spec: the validated experiment spec.
        out_dir: where ``result.json``, ``points.partial.jsonl`` and ``logs/`` go (created).
        nproc: ranks to start; default :func:`~spx.runner.sizing.default_nproc`; capped at TP.
        experiment: name recorded in the result.
        on_point: called in this process for each point rank 0 finishes (from a tail thread).
        progress: told when the ranks start, of every point, and when the run ends.
        timeout_s: wall-clock limit (default ``spec.timeoutSeconds``); on expiry all ranks are
            stopped and a partial result is kept.
        bench: ``module:function`` each rank runs, importable in a fresh interpreter; the
            default is the kernel bench (only it is sized and preflighted).
        device_asked: see :func:`plan`.

    Returns:
        The outcome; ``outcome.result.complete`` is False and ``outcome.result.error`` names the
        failing rank when the run failed. ``result.json`` is written either way (whole or not at all:
        :func:`spx.files.write_atomic`).

    Raises:
        RunnerError: before anything starts (:func:`plan`).
        OSError: ``result.json`` cannot be written (a full disk); ``points.partial.jsonl`` keeps the points.
    """
    device, n, est = plan(spec, nproc, device_asked=device_asked, bench=bench, timeout_s=timeout_s)
    out = Path(out_dir)
    run_dir = RunDirectory(out)
    run_dir.fresh_outputs()
    points_path = run_dir.points_path
    tail = _PointTail(points_path, lambda p: _tell(p, progress, on_point))
    started_at, t0 = utc_now(), time.monotonic()
    if progress is not None:
        refine = spec.sweep.refine  # an adaptive sweep adds at most maxAddedPoints counts
        progress.start(len(spec.sweep.tokens), n, device, est, added=refine.max_added_points if refine else 0)
    try:
        attempt = _launch_watched(spec, out, n, experiment, bench, device, tail, timeout_s)
    finally:
        if progress is not None:
            progress.stop()
    result = attempt.result() or partial_result(
        spec, tail.points, experiment=experiment, nproc=n, device=device, error=attempt.error or "unknown failure",
        started_at=started_at, wall_seconds=time.monotonic() - t0,
    )
    run_dir.write_result(result)
    if result.complete:  # the streamed points are all in result.json now; keep them only for a failed run
        points_path.unlink(missing_ok=True)
    return LocalRunOutcome(result=result, out_dir=out, log_dir=out / LOGS_DIR, nproc=n, device=device,
                           failures=attempt.failures, estimate=est)


def _tell(point: PointResult, progress: RunProgress | None, on_point: PointCallback | None) -> None:
    if progress is not None:
        progress.point(point)
    if on_point is not None:
        on_point(point)


def _launch_watched(spec: ExperimentSpec, out: Path, n: int, experiment: str, bench: str, device: str,
                    tail: _PointTail, timeout_s: float | None) -> _Attempt:
    """Start the ranks with the points tail and the timeout watchdog running; every way the launcher ends,
    as an :class:`_Attempt` (a rank's failure, the timeout, an interrupt, the launcher's own failure)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    log_dir = out / LOGS_DIR
    limit = float(spec.timeout_seconds if timeout_s is None else timeout_s)
    limit_source = "spec.timeoutSeconds" if timeout_s is None else "timeout"
    stop, timed_out = threading.Event(), threading.Event()

    def _watchdog() -> None:
        if not stop.wait(limit):
            timed_out.set()
            os.kill(os.getpid(), signal.SIGTERM)

    attempt = _Attempt()
    with launcher_logging(log_dir), launch_environment(device, n):
        tail_thread = threading.Thread(target=tail.run, args=(stop,), name="spx-points-tail", daemon=True)
        tail_thread.start()
        threading.Thread(target=_watchdog, name="spx-timeout", daemon=True).start()
        try:
            attempt.result_json = launch(spec, out, n, experiment, bench).get(0)
            if attempt.result_json is None:
                attempt.error = "rank 0 finished without returning a result"
        except ChildFailedError as exc:
            attempt.failures = rank_failures(exc, log_dir, n)
            attempt.error = f"rank {attempt.failures[0].rank} failed: {attempt.failures[0].message}"
        except SignalException as exc:
            attempt.error = (f"timed out after {limit:g} s ({limit_source}); all ranks stopped" if timed_out.is_set()
                             else f"interrupted ({exc.sigval.name}); all ranks stopped")
        except KeyboardInterrupt:
            attempt.error = "interrupted (SIGINT); all ranks stopped"
        except Exception as exc:  # the launcher itself failed (rendezvous, spawn)
            attempt.error = f"launcher failed: {type(exc).__name__}: {exc}"
        finally:
            stop.set()
            tail_thread.join(timeout=5)
            tail.drain()
    return attempt


__all__ = [
    "LocalRunOutcome", "RankFailure", "RunProgress", "RunnerError", "default_nproc", "partial_result", "plan",
    "run_local",
]
