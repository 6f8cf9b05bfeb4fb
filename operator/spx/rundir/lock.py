"""A run folder's lock ``OUT/.spx.lock`` (an exclusive ``fcntl.flock`` held until the writing process exits) and
the test for a folder inside another run's. Part of :mod:`spx.rundir`."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from spx.api.base import utc_now
from spx.rundir.documents import RunDirectoryError
from spx.vocabulary import LOCK_FILE, RUN_MARKERS


def enclosing_run(out: Path) -> Path | None:
    """The nearest folder above ``out`` that holds a run (:data:`~spx.vocabulary.RUN_MARKERS`), else ``None``: a
    run inside another's directory (e.g. in its ``logs/``) would be deleted by an ``--overwrite`` of the outer one."""
    for parent in out.absolute().parents:
        if any((parent / name).exists() for name in RUN_MARKERS):
            return parent
    return None


def lock_holder(out: Path) -> str | None:
    """The holder of ``out``'s lock (``pid N, started …``) while a run writes there, else ``None``."""
    try:
        fd = os.open(out / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        with contextlib.suppress(OSError):
            return os.read(fd, 200).decode(errors="replace").strip() or "holder unknown"
        return "holder unknown"
    finally:
        os.close(fd)  # (closing also drops a shared lock we got: nobody held it)
    return None


@contextlib.contextmanager
def hold_lock(out: Path) -> Iterator[None]:
    """Hold ``out``'s exclusive lock (its file created, the holder's pid and start time written in it) for the
    ``with`` block; the lock file is removed on exit.

    Raises:
        RunDirectoryError: the lock file cannot be created (named, with the fix), or another run holds the lock.
    """
    path = out / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a read-only file system, no write permission, a folder named .spx.lock
            fix = f"remove the folder {path}" if isinstance(exc, IsADirectoryError) else f"make {out} writable"
            raise RunDirectoryError(f"--out {out} is not writable: {exc.strerror or exc} (its lock file {path} cannot "
                                    f"be created); {fix}, or choose another --out") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise RunDirectoryError(f"--out {out} is in use by another spx run ({holder or 'holder unknown'}); wait "
                                    "for it to finish or choose another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file between our open and our lock: retry
    try:
        os.ftruncate(fd, 0)
        with contextlib.suppress(OSError):  # (a full disk: the holder is then unknown to a second run, no more)
            os.write(fd, f"pid {os.getpid()}, started {utc_now()}\n".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
