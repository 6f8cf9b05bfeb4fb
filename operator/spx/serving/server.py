"""One ``vllm serve`` process group: start it, wait for ``/health``, stop it, read its log.

The server's stdout and stderr go to ``log_path`` (kept after the run: it is where an arm's failure is
explained, and where the spx plugin's "spx: set …" line confirms the arm's threshold). The process is
the leader of its own session, so stopping it (SIGTERM, then SIGKILL after a bound) reaches the
engine core and worker processes vLLM starts too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from spx.analysis.serving import error_excerpt
from spx.api.base import utc_now


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

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        """Launch the server in its own session, appending its output to ``log_path``."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(f"# spx: {utc_now()} starting: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self.env, start_new_session=True,
        )

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
        if self._log is not None:
            self._log.write(f"# spx: {utc_now()} server exited with code {self.proc.returncode}\n".encode())
            self._log.close()
            self._log = None
        return self.proc.returncode
