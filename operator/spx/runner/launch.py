"""Launching a local run's ranks through torch's elastic launcher (the library behind ``torchrun``).

:func:`torch.distributed.launcher.api.elastic_launch` with a c10d rendezvous on ``localhost:0`` (the
port is picked for us), ``max_restarts=0`` so the first failing rank ends the whole group (the agent
sends SIGTERM, then SIGKILL after :data:`SHUTDOWN_TIMEOUT_S`), and every rank's entry point wrapped in
:func:`torch.distributed.elastic.multiprocessing.errors.record`, which writes the exception and its
traceback to that rank's error file (read by :mod:`spx.runner.forensics`).

Logs: ``logs/rank<N>.stdout.log``, ``logs/rank<N>.stderr.log``, ``logs/rank<N>.error.json`` per rank and
``logs/launcher.log`` (the agent's own log). torch is imported inside functions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spx.api import ExperimentSpec, KernelResult, PointResult
from spx.files import claim
from spx.rundir import RunDirectory
from spx.serving.server import signals_handled
from spx.vocabulary import LAUNCHER_LOG, LOGS_DIR

#: Loggers of the launcher whose records go to ``logs/launcher.log`` during a run.
LAUNCHER_LOGGERS = ("torch.distributed", "torch.multiprocessing")
#: Seconds the agent waits after SIGTERM before it SIGKILLs the remaining ranks.
SHUTDOWN_TIMEOUT_S = 5
#: ``module:function`` each rank runs (signature of ``spx.bench.kernel.run_kernel_bench``).
BENCH_ENTRY = "spx.bench.kernel:run_kernel_bench"


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

    die_with_parent(_parent_pid())
    run_bench = _load_bench(bench)
    spec = ExperimentSpec.model_validate_json(spec_json)
    on_point = partial(_append_point, str(RunDirectory(out_dir).points_path))
    result = run_bench(spec, experiment=experiment, on_point=on_point)
    return None if result is None else result.model_dump_json(by_alias=True)


#: Environment variable carrying the pid of the ``spx run`` process to its ranks (:func:`die_with_parent`).
PARENT_PID_ENV = "SPX_RUN_PID"
#: ``prctl(2)`` option: the signal this process gets when its parent dies (``<linux/prctl.h>``).
PR_SET_PDEATHSIG = 1


def _parent_pid() -> int | None:
    try:
        return int(os.environ[PARENT_PID_ENV])
    except (KeyError, ValueError):
        return None


def die_with_parent(parent_pid: int | None) -> None:
    """Make the kernel SIGKILL this rank when the process that started it dies, however it dies (``kill -9``
    of ``spx run``, the OOM killer): ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` through ctypes (Linux; elsewhere
    nothing is done).

    torch's spawn wrapper (``torch.multiprocessing.spawn._wrap``) sets the parent-death signal to SIGINT, which
    the ranks ignore (:func:`ranks_ignore_terminal_interrupt`), so without this a rank outlived a killed
    ``spx run`` and ran its sweep to the end. A parent that died before this call (the rank was importing
    torch) is caught by comparing ``getppid()`` with ``parent_pid`` afterwards, the race ``prctl(2)`` documents.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def rank_entry(spec_json: str, out_dir: str, experiment: str, bench: str = BENCH_ENTRY) -> str | None:
    """Picklable top-level entry point given to the launcher (``record``-wrapped at call time)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_rank_main)(spec_json, out_dir, experiment, bench)


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
                    claim(p)  # (recorded in the run's manifest before the rank writes it)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(p)
                env["TORCHELASTIC_ERROR_FILE"] = errors[local_rank]
            for name in ("filtered_stdout.log", "filtered_stderr.log"):
                claim(self._root / name)
            return LogsDest(
                stdouts=stdouts, stderrs=stderrs, tee_stdouts={}, tee_stderrs={}, error_files=errors,
                **_supported_fields(LogsDest, {
                    "filtered_stdout": str(self._root / "filtered_stdout.log"),
                    "filtered_stderr": str(self._root / "filtered_stderr.log"),
                }),
            )

    return FlatLogsSpecs(log_dir)


@contextlib.contextmanager
def launcher_logging(log_dir: Path) -> Iterator[None]:
    """Send the launcher's own log records to ``logs/launcher.log`` instead of the terminal.

    torch attaches stderr handlers to its loggers; they are detached for the run (the agent's
    "failed (exitcode: 1)" traceback dump would bury the one-line error) and restored after.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(claim(log_dir / LAUNCHER_LOG), encoding="utf-8")
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
def launch_environment(device: str, nproc: int) -> Iterator[None]:
    """Environment the ranks inherit: one OpenMP thread pool share per CPU rank; restored after.

    Also saves and restores the signal handlers and ``TORCHELASTIC_SIGNALS_TO_HANDLE`` the elastic
    agent installs in this process.
    """
    saved_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "TORCHELASTIC_SIGNALS_TO_HANDLE", PARENT_PID_ENV)}
    if device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    from torch.distributed.elastic.multiprocessing.api import _terminate_process_handler

    # From here on SIGTERM/SIGINT raise SignalException (as they will once the agent has started),
    # so an interrupt or the timeout watchdog always goes through the agent's shutdown path (main thread only).
    try:
        with signals_handled((signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT), _terminate_process_handler):
            yield
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def launch_config(nproc: int, log_dir: Path) -> Any:
    """The :class:`~torch.distributed.launcher.api.LaunchConfig` of a single-node run of ``nproc`` ranks."""
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"spx-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.2,
        start_method="spawn",
        logs_specs=_flat_logs_specs(log_dir),
        **_supported_fields(LaunchConfig, {"shutdown_timeout": SHUTDOWN_TIMEOUT_S}),
    )


def launch(spec: ExperimentSpec, out: Path, nproc: int, experiment: str, bench: str) -> dict[int, Any]:
    """Run ``bench`` on ``nproc`` ranks; returns the ranks' return values (rank 0: the result JSON).

    Raises whatever the launcher raises: ``ChildFailedError`` (a rank failed), ``SignalException``
    (SIGTERM/SIGINT reached the agent), ``KeyboardInterrupt``.
    """
    from torch.distributed.launcher.api import elastic_launch

    os.environ[PARENT_PID_ENV] = str(os.getpid())  # (the ranks inherit it: die_with_parent)
    with ranks_ignore_terminal_interrupt():
        returns = elastic_launch(launch_config(nproc, out / LOGS_DIR), rank_entry)(
            spec.model_dump_json(by_alias=True), str(out), experiment, bench
        )
    return returns if isinstance(returns, dict) else {}


@contextlib.contextmanager
def ranks_ignore_terminal_interrupt() -> Iterator[None]:
    """Start the ranks with SIGINT ignored, so that only this process acts on a terminal's Ctrl-C.

    Ctrl-C in a terminal sends SIGINT to the whole foreground process group. A rank still in
    ``multiprocessing/spawn.py`` start-up (importing torch, before the launcher redirects its stderr to
    ``logs/``) would print a ``KeyboardInterrupt`` traceback of ~50-100 lines on the user's terminal.
    An ignored signal stays ignored across ``fork`` and ``execve`` (POSIX), and Python installs its
    SIGINT handler at start-up only where SIGINT is not ignored (``signal`` module docs), so a rank
    started while this process ignores SIGINT never sees it; this process does, and the elastic agent's
    handler stops every rank with SIGTERM (:data:`SHUTDOWN_TIMEOUT_S`). (A blocked signal mask does not
    do it: multiprocessing's spawn clears the mask in the child.)

    Every start of a ``spawn`` process goes through :func:`multiprocessing.util.spawnv_passfds`; for
    the block it is wrapped to ignore SIGINT in this process for the ``fork``/``exec`` call alone
    (microseconds: a Ctrl-C in that window is dropped, the next one is not). Off the main thread,
    where signal handlers cannot be set, nothing is changed.
    """
    import multiprocessing.util as mp_util

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    original = mp_util.spawnv_passfds

    def spawn_ignoring_sigint(path: str, args: Any, passfds: Any) -> int:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            pid: int = original(path, args, passfds)
        finally:
            signal.signal(signal.SIGINT, previous)
        return pid

    mp_util.spawnv_passfds = spawn_ignoring_sigint
    try:
        yield
    finally:
        mp_util.spawnv_passfds = original
