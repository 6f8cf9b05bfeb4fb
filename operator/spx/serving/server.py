"""One ``vllm serve`` process group: start it, wait for ``/health``, stop it, read its log.

The server's stdout and stderr go to ``log_path`` (kept after the run: it is where an arm's failure is
explained, and where the spx plugin's "spx: set …" line confirms the arm's threshold). The process is
the leader of its own session, so stopping it (SIGTERM, then SIGKILL after a bound) reaches the
engine core and worker processes vLLM starts too.

**No server outlives spx** (issue 37). However spx ends, the server's whole process group is stopped:

* a Python exception or an interrupt runs :meth:`VllmServer.stop` (the runners stop every server in ``finally``);
  :func:`interrupts_stop_servers` makes SIGTERM, SIGHUP and SIGINT raise :class:`KeyboardInterrupt` in the main
  thread (SIGTERM is handled as Ctrl-C; SIGINT even when spx was started with it ignored, a ``&`` job of a
  script), so the runners' ``finally`` blocks run and record what was measured and why it stopped;
* SIGKILL, the OOM killer or a crash of the interpreter runs no code of spx: each server has a *guard*, a small
  process started beside it that holds the read end of a pipe whose write end only spx holds. When spx's process
  ends, however it ends, the kernel closes the write end; the guard reads end-of-file and sends SIGTERM to the
  server's process group, then SIGKILL after the shutdown bound. (The ranks use ``prctl(PR_SET_PDEATHSIG)``,
  :func:`spx.runner.launch.die_with_parent`. A parent-death signal would reach only the server's leader, not the
  engine core and workers vLLM starts beside it in its group, and it fires when the *thread* that started the
  process ends (``prctl(2)``), not only the process; the pipe's end-of-file comes exactly when the process ends.)
* the server starts with SIGINT at its default even when spx was started with it ignored (an ignored signal is
  inherited across ``exec``, a handler is not), so the signals it is stopped with act.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from spx.analysis.serving import error_excerpt
from spx.api.base import utc_now
from spx.files import claim

#: The guard (module docstring), run as ``python -c GUARD PGID GRACE``: it waits for end-of-file on its
#: standard input (spx ended, or stopped the server), then stops the group: SIGTERM, then SIGKILL after GRACE
#: seconds or as soon as the group is gone. Standard library only (it starts in ~20 ms), SIGINT ignored (a Ctrl-C
#: in the terminal reaches spx, which stops the server itself), SIGTERM stops the group at once.
GUARD = """
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
signal.signal(signal.SIGINT, signal.SIG_IGN)
def stop(*_):
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)
            time.sleep(0.05)
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
sys.stdout.write("armed\\n")
sys.stdout.flush()
while os.read(0, 4096):
    pass
stop()
"""

@contextlib.contextmanager
def signals_handled(signals: Iterable[int], handler: Callable[[int, Any], Any]) -> Iterator[None]:
    """For the ``with`` block: ``handler`` for each of ``signals``, the previous handlers restored after. Main thread
    only (Python sets signal handlers nowhere else, ``signal.signal``); elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in signals}
    for s in saved:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)


@contextlib.contextmanager
def _ignored_signals_not_inherited() -> Iterator[None]:
    """For a ``Popen`` in the block: SIGINT and SIGTERM that this process ignores are set to a handler meanwhile
    (``exec`` resets a handler to the default, but keeps an ignore), so the child starts with them at their
    defaults. Main thread only (signal handlers can be set nowhere else); elsewhere nothing changes."""
    ignored = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) == signal.SIG_IGN]
    with signals_handled(ignored, _raise_interrupt):
        yield


class _Guard:
    """The guard of one server's process group (module docstring): started after the server, ended by
    :meth:`release` (spx stopped the server) or by spx's own end (the pipe's write end closes)."""

    def __init__(self, pgid: int, grace: float) -> None:
        read_end, self._write_end = os.pipe()  # (both non-inheritable: no other child of spx holds the write end)
        try:
            self.proc = subprocess.Popen(  # (its own session: a terminal's Ctrl-C never reaches it)
                [sys.executable, "-c", GUARD, str(pgid), f"{grace:g}"], stdin=read_end, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        finally:
            os.close(read_end)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "armed": its handlers are in place before the server does anything

    def release(self) -> None:
        """The server is stopped: close the pipe (the guard finds the group gone and exits) and reap the guard."""
        with contextlib.suppress(OSError):
            os.close(self._write_end)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


#: Signals that stop ``spx run``/``spx serving`` as Ctrl-C does (:func:`interrupts_stop_servers`).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupt(signum: int, _frame: object) -> None:
    """SIGINT: a plain :class:`KeyboardInterrupt` (Ctrl-C, as Python raises it); another signal names itself."""
    raise KeyboardInterrupt() if signum == signal.SIGINT else KeyboardInterrupt(f"interrupted ({signal.Signals(signum).name})")


@contextlib.contextmanager
def interrupts_stop_servers() -> Iterator[None]:
    """For the ``with`` block (main thread only; elsewhere nothing changes): SIGINT, SIGTERM and SIGHUP raise
    :class:`KeyboardInterrupt` (``"interrupted (SIGTERM)"``), so the servers are stopped by the runners'
    ``finally`` blocks and what they measured is saved with the failure; SIGINT even when it was ignored (a
    ``&`` job of a script). The previous handlers are restored after."""
    with signals_handled(STOP_SIGNALS, _raise_interrupt):
        yield


class ServerError(RuntimeError):
    """The server did not start, or died; the message ends with the cause read from its log."""


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file (``""`` when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def log_cause(path: Path) -> str:
    """The last error a log shows (:func:`spx.analysis.serving.error_excerpt`, bounded), else its last line."""
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return f"(log {path} unreadable: {err})"
    cause = error_excerpt(text)
    if cause is not None:
        return cause
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
    return last[:300] or "(the log is empty)"


class VllmServer:
    """One ``vllm serve`` process (group), its log kept in ``log_path``."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path, *, guard_grace: float = 30.0) -> None:
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.guard_grace = guard_grace
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._guard: _Guard | None = None

    def start(self) -> None:
        """Launch the server in its own session, appending its output to ``log_path``, and its guard (module
        docstring: the group is stopped ``guard_grace`` s after SIGTERM at the latest when spx ends unasked).

        Raises:
            OSError: the command cannot be started (not found, not executable) or the log cannot be written.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(claim(self.log_path), "ab")
        self._log.write(f"# spx: {utc_now()} starting: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        with _ignored_signals_not_inherited():
            self.proc = subprocess.Popen(
                self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True,
            )
        try:
            self._guard = _Guard(self.proc.pid, self.guard_grace)
        except BaseException:
            self.stop(timeout=5)
            raise

    @property
    def exit_code(self) -> int | None:
        """The exit code, ``None`` while it runs (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        """Whether the server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        """The whole log so far."""
        return self.log_path.read_text(errors="replace")

    def exited_within(self, seconds: float) -> bool:
        """Whether the server exits within ``seconds`` (``True`` at once if it already has)."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def died(self, during: str) -> ServerError:
        """The error for a server that exited ``during`` something, with the cause from its log."""
        return ServerError(
            f"server exited with code {self.exit_code} {during}: {log_cause(self.log_path)} (log: {self.log_path})"
        )

    def wait_healthy(self, url: str, timeout: float, poll: float) -> float:
        """Seconds until ``GET url`` answered 200.

        Raises:
            ServerError: the process exited first, or ``timeout`` passed (the cause from the log).
        """
        t0 = time.monotonic()
        while True:
            if self.exit_code is not None:
                raise self.died("before becoming healthy")
            try:
                with urllib.request.urlopen(url, timeout=max(poll, 2.0)) as resp:
                    if resp.status == 200:
                        return time.monotonic() - t0
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() - t0 > timeout:
                raise ServerError(
                    f"server not healthy at {url} within {timeout:.0f}s (startupTimeoutSeconds); its log ends: "
                    f"{log_cause(self.log_path)} (log: {self.log_path})"
                )
            time.sleep(poll)

    def stop(self, timeout: float) -> int | None:
        """SIGTERM the process group, SIGKILL after ``timeout`` s; kill stragglers of the group too."""
        if self.proc is None:
            return None
        pgid = self.proc.pid
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                if self._log is not None:
                    self._log.write(f"# spx: {utc_now()} no exit {timeout:.0f}s after SIGTERM: SIGKILL\n".encode())
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)  # workers left behind by the leader
        if self._guard is not None:
            self._guard.release()
            self._guard = None
        if self._log is not None:
            self._log.write(f"# spx: {utc_now()} server exited with code {self.proc.returncode}\n".encode())
            self._log.close()
            self._log = None
        return self.proc.returncode
