"""Run an experiment on this host: one process per rank, through torch's elastic launcher.

The launcher is :func:`torch.distributed.launcher.api.elastic_launch` (the library behind
``torchrun``): a c10d rendezvous on ``localhost:0`` picks the port, ``max_restarts=0`` makes the
first failing rank end the whole group (the agent sends SIGTERM, then SIGKILL after
``SHUTDOWN_TIMEOUT_S``), and each rank's entry point is wrapped in
:func:`torch.distributed.elastic.multiprocessing.errors.record`, which writes the exception
(``"RuntimeError: injected fault on rank 1"`` + traceback) to that rank's error file. The runner
reads those error files and names the root-cause rank: the one whose error file was written first
(a rank that merely lost its peer fails later); ranks without an error file (killed by a signal,
``os._exit``) come last and are described by their exit code plus the tail of their stderr log.

Files under ``out_dir``:

- ``points.partial.jsonl`` — rank 0 appends each :class:`~spx.api.PointResult` as one JSON line as
  soon as a token count is measured; the parent tails it for progress and keeps it on failure.
- ``result.json`` — the :class:`~spx.api.KernelResult`: rank 0's document on success; on failure a
  partial one rebuilt from ``points.partial.jsonl`` with ``complete = False`` and ``error`` set.
- ``logs/rank<N>.stdout.log``, ``logs/rank<N>.stderr.log``, ``logs/rank<N>.error.json`` per rank and
  ``logs/launcher.log`` (the elastic agent's own log).

torch is imported lazily (inside functions): importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spx.api import Environment, ExperimentSpec, KernelResult, PointResult
from spx.api.base import utc_now

POINTS_FILE = "points.partial.jsonl"
RESULT_FILE = "result.json"
LOGS_DIR = "logs"
LAUNCHER_LOG = "launcher.log"
#: Loggers of the launcher whose records go to ``logs/launcher.log`` during a run.
LAUNCHER_LOGGERS = ("torch.distributed", "torch.multiprocessing")
#: Seconds the agent waits after SIGTERM before it SIGKILLs the remaining ranks.
SHUTDOWN_TIMEOUT_S = 5
#: Lines of a rank's stderr quoted when it died without an error file.
STDERR_TAIL_LINES = 15
#: ``module:function`` each rank runs (signature of ``spx.bench.kernel.run_kernel_bench``).
BENCH_ENTRY = "spx.bench.kernel:run_kernel_bench"

#: Error text of a rank that failed only because a peer went away (not the root cause).
PEER_LOSS_PATTERNS = (
    "Connection closed by peer",
    "remote worker crashing",
    "Connection reset by peer",
    "Broken pipe",
    "remote process exited",
    "NCCL communicator was aborted",
    "DistNetworkError",
)

PointCallback = Callable[[PointResult], None]


class RunnerError(RuntimeError):
    """The run could not be started (bad ``nproc``, no GPU for a CUDA spec)."""


@dataclass
class RankFailure:
    """One rank that failed, as the launcher reported it."""

    rank: int
    exitcode: int
    message: str
    error_file: str | None = None
    stderr_log: str | None = None


@dataclass
class LocalRunOutcome:
    """What :func:`run_local` produced. ``result`` is always set (partial on failure)."""

    result: KernelResult
    out_dir: Path
    log_dir: Path
    nproc: int
    device: str
    failures: list[RankFailure] = field(default_factory=list)

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


# --------------------------------------------------------------------------------------------
# Sizing


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


def resolve_device(spec: ExperimentSpec, gpus: int | None = None) -> str:
    """``cuda`` or ``cpu``: ``spec.kernel.device`` with ``auto`` resolved by what is visible."""
    if spec.kernel.device != "auto":
        return spec.kernel.device
    return "cuda" if (visible_gpus() if gpus is None else gpus) > 0 else "cpu"


def default_nproc(spec: ExperimentSpec, gpus: int | None = None) -> int:
    """Visible GPUs on CUDA, else 2 on CPU; capped at TP (fewer ranks than TP: the gather is modelled)."""
    gpus = visible_gpus() if gpus is None else gpus
    device = resolve_device(spec, gpus)
    n = gpus if device == "cuda" else 2
    return max(1, min(n, spec.parallelism.tensor_parallel_size))


def check_nproc(spec: ExperimentSpec, nproc: int, device: str, gpus: int | None = None) -> int:
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


# --------------------------------------------------------------------------------------------
# Rank side (runs in each spawned process)


def _append_point(path: str, point: PointResult) -> None:
    line = point.model_dump_json(by_alias=True) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()


def _load_bench(entry: str) -> Callable[..., KernelResult | None]:
    import importlib

    module, _, attr = entry.partition(":")
    fn: Callable[..., KernelResult | None] = getattr(importlib.import_module(module), attr)
    return fn


def _rank_main(spec_json: str, out_dir: str, experiment: str, bench: str) -> str | None:
    """Entry point of one rank (env: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).

    Returns rank 0's :class:`KernelResult` as JSON, ``None`` on other ranks; raises on error
    (``record`` writes the exception to this rank's error file for the parent).
    """
    from functools import partial

    run_bench = _load_bench(bench)
    spec = ExperimentSpec.model_validate_json(spec_json)
    on_point = partial(_append_point, os.path.join(out_dir, POINTS_FILE))
    result = run_bench(spec, experiment=experiment, on_point=on_point)
    return None if result is None else result.model_dump_json(by_alias=True)


def rank_entry(spec_json: str, out_dir: str, experiment: str, bench: str = BENCH_ENTRY) -> str | None:
    """Picklable top-level entry point given to the launcher (``record``-wrapped at call time)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_rank_main)(spec_json, out_dir, experiment, bench)


# --------------------------------------------------------------------------------------------
# Parent side


def _supported_fields(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that are fields of dataclass ``cls`` (torch's launcher dataclasses
    gain fields across versions: ``LaunchConfig.shutdown_timeout`` is torch >= 2.12, the GPU
    images may run an older torch)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def _flat_logs_specs(log_dir: Path) -> Any:
    """A ``LogsSpecs`` writing ``rank<N>.{stdout,stderr}.log`` and ``rank<N>.error.json`` flat in ``log_dir``."""
    from torch.distributed.elastic.multiprocessing import LogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import LogsDest

    class FlatLogsSpecs(LogsSpecs):
        def __init__(self, root: Path) -> None:
            super().__init__(log_dir=str(root), redirects=Std.ALL, tee=Std.NONE)
            self._root = root

        @property
        def root_log_dir(self) -> str:
            return str(self._root)

        def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
            self._root.mkdir(parents=True, exist_ok=True)
            stdouts, stderrs, errors = {}, {}, {}
            for local_rank, env in envs.items():
                rank = env.get("RANK", str(local_rank))
                stdouts[local_rank] = str(self._root / f"rank{rank}.stdout.log")
                stderrs[local_rank] = str(self._root / f"rank{rank}.stderr.log")
                errors[local_rank] = str(self._root / f"rank{rank}.error.json")
                for p in (stdouts[local_rank], stderrs[local_rank], errors[local_rank]):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(p)
                env["TORCHELASTIC_ERROR_FILE"] = errors[local_rank]
            return LogsDest(
                stdouts=stdouts, stderrs=stderrs, tee_stdouts={}, tee_stderrs={}, error_files=errors,
                **_supported_fields(LogsDest, {
                    "filtered_stdout": str(self._root / "filtered_stdout.log"),
                    "filtered_stderr": str(self._root / "filtered_stderr.log"),
                }),
            )

    return FlatLogsSpecs(log_dir)


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


def _error_message(data: Any) -> str:
    """The human part of a ``record`` error file's ``message`` (str, or dict with ``message``)."""
    if isinstance(data, dict):
        msg = data.get("message")
        if isinstance(msg, dict):
            return str(msg.get("message", "")) or json.dumps(msg)[:500]
        if msg:
            return str(msg)
    return ""


def _tail(path: str | None, lines: int = STDERR_TAIL_LINES) -> str:
    if not path:
        return ""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _read_error_file(path: Path) -> str:
    try:
        return _error_message(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return ""


def _rank_failures(exc: Any, log_dir: Path, nproc: int) -> list[RankFailure]:
    """The failed ranks, root cause first, from ``ChildFailedError.failures`` and the error files.

    The agent reports the ranks it saw fail when it polled; the faulting rank may still have been
    exiting (and then got SIGTERM), so every rank's ``rank<N>.error.json`` is read as well.
    Order: ranks whose error is not merely "lost a peer" (gloo "Connection closed by peer", NCCL
    "remote process exited", …) first; then ranks with an error file, by the file's mtime (ns; the
    launcher's own timestamp has 1 s resolution); then ranks without one (signals, hard exits).
    """
    reported = {int(rank): f for rank, f in exc.failures.items()}
    out: list[tuple[tuple[int, int, int], RankFailure]] = []
    for rank in sorted(set(reported) | set(range(nproc))):
        f = reported.get(rank)
        err_path = log_dir / f"rank{rank}.error.json"
        err_file = str(err_path) if err_path.is_file() else None
        if f is None and err_file is None:
            continue  # stopped by the agent without an error of its own
        exitcode = int(f.exitcode) if f is not None else 1
        stderr_log = str(log_dir / f"rank{rank}.stderr.log")
        message = _read_error_file(err_path) if err_file else ""
        if not message:
            if exitcode < 0:
                with contextlib.suppress(ValueError):
                    message = f"killed by signal {signal.Signals(-exitcode).name}"
                message = message or f"killed by signal {-exitcode}"
            else:
                message = f"exited with code {exitcode} without a Python exception"
            tail = _tail(stderr_log)
            if tail:
                message += "; last lines of its stderr:\n" + tail
        mtime = os.stat(err_path).st_mtime_ns if err_file else 1 << 62
        secondary = any(p in message for p in PEER_LOSS_PATTERNS)
        key = (int(secondary), 0 if err_file else 1, mtime)
        out.append((key, RankFailure(rank, exitcode, message, err_file, stderr_log)))
    out.sort(key=lambda kv: (kv[0], kv[1].rank))
    return [rf for _, rf in out]


@contextlib.contextmanager
def _launcher_logging(log_dir: Path) -> Iterator[None]:
    """Send the launcher's own log records to ``logs/launcher.log`` instead of the terminal.

    torch attaches stderr handlers to its loggers; they are detached for the run (the agent's
    "failed (exitcode: 1)" traceback dump would bury the one-line error) and restored after.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_dir / LAUNCHER_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = []
    for name in LAUNCHER_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate, logger.level))
        for h in list(logger.handlers):
            logger.removeHandler(h)
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, handlers, propagate, level in saved:
            logger.removeHandler(handler)
            for h in handlers:
                logger.addHandler(h)
            logger.propagate = propagate
            logger.setLevel(level)
        handler.close()


@contextlib.contextmanager
def _launch_environment(device: str, nproc: int) -> Iterator[None]:
    """Environment the ranks inherit: one OpenMP thread pool share per CPU rank; restored after.

    Also saves and restores the signal handlers and ``TORCHELASTIC_SIGNALS_TO_HANDLE`` the elastic
    agent installs in this process.
    """
    saved_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "TORCHELASTIC_SIGNALS_TO_HANDLE")}
    if device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    in_main = threading.current_thread() is threading.main_thread()
    sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT]
    saved_handlers = {s: signal.getsignal(s) for s in sigs} if in_main else {}
    if in_main:
        from torch.distributed.elastic.multiprocessing.api import _terminate_process_handler

        # From here on SIGTERM/SIGINT raise SignalException (as they will once the agent has started),
        # so an interrupt or the timeout watchdog always goes through the agent's shutdown path.
        for s in sigs:
            signal.signal(s, _terminate_process_handler)
    try:
        yield
    finally:
        for s, h in saved_handlers.items():
            signal.signal(s, h)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def partial_result(
    spec: ExperimentSpec,
    points: list[PointResult],
    *,
    experiment: str,
    nproc: int,
    device: str,
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


def run_local(
    spec: ExperimentSpec,
    out_dir: str | os.PathLike[str],
    *,
    nproc: int | None = None,
    experiment: str = "local",
    on_point: PointCallback | None = None,
    progress: Any = None,
    timeout_s: float | None = None,
    bench: str = BENCH_ENTRY,
) -> LocalRunOutcome:
    """Run ``spec``'s kernel bench on this host with ``nproc`` ranks; never raises for a rank's failure.

    Args:
        spec: the validated experiment spec.
        out_dir: where ``result.json``, ``points.partial.jsonl`` and ``logs/`` go (created).
        nproc: ranks to start; default :func:`default_nproc`; capped at TP.
        experiment: name recorded in the result.
        on_point: called in this process for each point rank 0 finishes (from a tail thread).
        progress: a ``rich.console.Console`` to draw a progress bar over points on, or ``None``.
        timeout_s: wall-clock limit (default ``spec.timeoutSeconds``); on expiry all ranks are
            stopped and a partial result is kept.
        bench: ``module:function`` each rank runs, importable in a fresh interpreter; the
            default is the kernel bench.

    Returns:
        The outcome; ``outcome.result.complete`` is False and ``outcome.result.error`` names the
        failing rank when the run failed. ``result.json`` is written either way.

    Raises:
        RunnerError: before anything starts, for an impossible ``nproc``/device.
    """
    gpus = visible_gpus()
    device = resolve_device(spec, gpus)
    n = check_nproc(spec, default_nproc(spec, gpus) if nproc is None else nproc, device, gpus)
    if bench == BENCH_ENTRY:
        from spx.bench.kernel import preflight

        try:
            preflight(spec, device, n)
        except (ValueError, RuntimeError) as exc:
            raise RunnerError(str(exc)) from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_dir = out / LOGS_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    points_path = out / POINTS_FILE
    with contextlib.suppress(FileNotFoundError):
        points_path.unlink()
    with contextlib.suppress(FileNotFoundError):
        (out / RESULT_FILE).unlink()
    points_path.touch()

    bar = None
    task = None
    user_on_point = on_point

    def _on_point(p: PointResult) -> None:
        if bar is not None and task is not None:
            bar.update(task, advance=1, description=f"tokens={p.tokens} done")
        if user_on_point is not None:
            user_on_point(p)

    tail = _PointTail(points_path, _on_point)
    stop = threading.Event()
    timed_out = threading.Event()
    limit = float(spec.timeout_seconds if timeout_s is None else timeout_s)
    limit_source = "spec.timeoutSeconds" if timeout_s is None else "timeout"

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=n,
        run_id=f"spx-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.2,
        start_method="spawn",
        logs_specs=_flat_logs_specs(log_dir),
        **_supported_fields(LaunchConfig, {"shutdown_timeout": SHUTDOWN_TIMEOUT_S}),
    )

    started_at = utc_now()
    t0 = time.monotonic()
    error: str | None = None
    failures: list[RankFailure] = []
    result_json: str | None = None
    tail_thread = threading.Thread(target=tail.run, args=(stop,), name="spx-points-tail", daemon=True)

    def _watchdog() -> None:
        if not stop.wait(limit):
            timed_out.set()
            os.kill(os.getpid(), signal.SIGTERM)

    watchdog = threading.Thread(target=_watchdog, name="spx-timeout", daemon=True)

    with contextlib.ExitStack() as stack:
        if progress is not None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            bar = stack.enter_context(
                Progress(
                    SpinnerColumn(),
                    TextColumn("[progress.description]{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=progress,
                    transient=False,
                )
            )
            task = bar.add_task(f"starting {n} {device} ranks", total=len(spec.sweep.tokens))
        stack.enter_context(_launcher_logging(log_dir))
        stack.enter_context(_launch_environment(device, n))
        tail_thread.start()
        watchdog.start()
        try:
            returns = elastic_launch(config, rank_entry)(
                spec.model_dump_json(by_alias=True), str(out), experiment, bench
            )
            result_json = returns.get(0) if isinstance(returns, dict) else None
            if result_json is None:
                error = "rank 0 finished without returning a result"
        except ChildFailedError as exc:
            failures = _rank_failures(exc, log_dir, n)
            first = failures[0]
            error = f"rank {first.rank} failed: {first.message}"
        except SignalException as exc:
            if timed_out.is_set():
                error = f"timed out after {limit:g} s ({limit_source}); all ranks stopped"
            else:
                error = f"interrupted ({exc.sigval.name}); all ranks stopped"
        except KeyboardInterrupt:
            error = "interrupted (SIGINT); all ranks stopped"
        except Exception as exc:  # the launcher itself failed (rendezvous, spawn)
            error = f"launcher failed: {type(exc).__name__}: {exc}"
        finally:
            stop.set()
            tail_thread.join(timeout=5)
            tail.drain()

    wall = time.monotonic() - t0
    result: KernelResult | None = None
    if result_json is not None:
        try:
            result = KernelResult.model_validate_json(result_json)
        except ValueError as err:
            error = f"rank 0 returned an invalid result document: {err}"
    if result is None:
        result = partial_result(
            spec, tail.points, experiment=experiment, nproc=n, device=device,
            error=error or "unknown failure", started_at=started_at, wall_seconds=wall,
        )
    (out / RESULT_FILE).write_text(result.model_dump_json(by_alias=True, indent=1) + "\n", encoding="utf-8")
    if result.complete:  # the streamed points are all in result.json now; keep them only for a failed run
        points_path.unlink(missing_ok=True)
    return LocalRunOutcome(result=result, out_dir=out, log_dir=log_dir, nproc=n, device=device, failures=failures)
