"""Failure forensics of a local run: which rank caused it, what it said, and which log holds its traceback.

The launcher (:mod:`spx.runner.launch`) wraps every rank in torch's ``record``, which writes the
exception and its traceback to ``logs/rank<N>.error.json``; a rank killed by a signal (the OOM killer's
SIGKILL, ``os._exit``) writes none, and its stderr/stdout logs may be empty too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Lines of a rank's stderr quoted when it died without an error file.
STDERR_TAIL_LINES = 15

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


@dataclass
class RankFailure:
    """One rank that failed, as the launcher reported it."""

    rank: int
    exitcode: int
    message: str
    error_file: str | None = None
    stderr_log: str | None = None

    @property
    def stdout_log(self) -> str | None:
        """``rank<N>.stdout.log`` beside the stderr log."""
        return self.stderr_log.replace(".stderr.log", ".stdout.log") if self.stderr_log else None


def traceback_log(failure: RankFailure) -> tuple[str | None, str]:
    """``(path, what it holds)``: the file to read for ``failure``'s traceback.

    The error file when ``record`` wrote one (the Python traceback), else the first non-empty of the
    stderr and stdout logs; when all are empty and the rank was killed by SIGKILL (how the kernel's
    out-of-memory killer ends a process) the note says so, naming the stderr log.
    """
    for path, what in ((failure.error_file, "its Python traceback"), (failure.stderr_log, "its stderr"),
                       (failure.stdout_log, "its stdout")):
        if path and os.path.isfile(path) and os.path.getsize(path) > 0:
            return path, what
    killed = failure.exitcode in (-9, 137) or "SIGKILL" in failure.message
    why = ("empty: the rank was killed by SIGKILL, which is how the out-of-memory killer ends a process "
           "(see `dmesg` or `journalctl -k`)") if killed else "empty: the rank wrote nothing before it ended"
    return failure.stderr_log, why


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


def rank_failures(exc: Any, log_dir: Path, nproc: int) -> list[RankFailure]:
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
