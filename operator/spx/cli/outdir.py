"""A run's output folder: locked for the run's lifetime, earlier results replaced only when asked.

The lock is ``OUT/.spx.lock``, an ``fcntl.flock`` exclusive lock held by the ``spx run`` process until it
exits (the kernel releases it even when the process is killed, so a crashed run never leaves a stale
lock). The file records the holder's pid and start time for the error message of a second run. A run
re-checks after locking that the file it locked is still the one at the path (a run that finished may
have removed it), so two runs can never both believe they hold it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from spx.api.base import utc_now
from spx.cli.common import UsageError

LOCK_FILE = ".spx.lock"
#: Files a run writes into --out; an earlier run's are cleared by --overwrite (never others).
RUN_OUTPUTS = ("result.json", "status.json", "crossover.png", "points.partial.jsonl", "serving")


@contextlib.contextmanager
def locked(out: Path) -> Iterator[Path]:
    """Hold the exclusive lock of ``out`` (created) for the ``with`` block.

    Folders this call created are removed again on exit when they are still empty (a run refused
    before it wrote anything, e.g. a GPU-sized spec on a CPU, leaves no empty ``--out`` behind).

    Raises:
        UsageError: ``out`` is a file, cannot be created, or another run holds its lock (the message names
            its pid and start time).
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory")
    created = [d for d in (out, *out.parents) if not d.exists()]  # deepest first
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {out}: {exc.strerror or exc}") from None
    try:
        with _lock(out):
            yield out / LOCK_FILE
    finally:
        for d in created:  # a run refused before it wrote anything leaves no empty folder behind
            try:
                d.rmdir()
            except OSError:  # not empty (results, logs): keep it and its parents
                break


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    path = out / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise UsageError(
                f"--out {out} is in use by another spx run ({holder or 'holder unknown'}); wait for it to "
                "finish or choose another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file between our open and our lock: retry
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, started {utc_now()}\n".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


def prepare(out: Path, overwrite: bool) -> None:
    """Refuse to mix two runs in one directory; with ``overwrite``, clear the earlier run's files.

    Call with the lock held (:func:`locked`).

    Raises:
        UsageError: ``out`` holds an earlier run and ``overwrite`` is false.
    """
    earlier = [name for name in RUN_OUTPUTS if (out / name).exists()]
    if not earlier:
        return
    if not overwrite:
        raise UsageError(
            f"--out {out} already holds a run ({', '.join(earlier)}); pass --overwrite to replace it, "
            "or choose another --out"
        )
    for name in earlier:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
        else:
            (out / name).unlink()
    shutil.rmtree(out / "logs", ignore_errors=True)
