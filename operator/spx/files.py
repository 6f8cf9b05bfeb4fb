"""Writing a file whole or not at all: every file ``spx`` writes goes through :func:`write_atomic`.

A file written in place (``open(path, "w")`` then writes) that meets a full disk is left truncated: a 0-byte
``result.json`` that a reader takes for a corrupt run. Here the bytes go to a temporary file in the same
directory, are flushed and ``fsync``-ed, and only then renamed over ``path`` (``os.replace``: atomic on POSIX
within one file system, ``rename(2)``); on any error the temporary file is removed and ``path`` keeps what it
held before (or stays absent). The directory is ``fsync``-ed after the rename so the new name survives a crash
(the recipe of ``rename(2)`` and of SQLite's and PostgreSQL's durable writes).

Every file written here is first *claimed* (:func:`claim`): a run folder being written
(:class:`spx.rundir.RunDirectory`) records it in its manifest before it exists, so a run killed at any moment
has listed every file it wrote, and ``--overwrite`` never mistakes one of a user's files for the run's.

A path that is not a regular file (``/dev/termination-log`` in a pod, ``/dev/stdout``, a FIFO) cannot be
replaced by a rename: it is written in place, once; so is a file that is a mount point (``EBUSY``: a pod's
``/dev/termination-log`` is a bind mount) or sits in a folder this process cannot write. A symbolic link is followed: the file it names is replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

#: Prefix of the temporary files (``.NAME.spx-tmp-XXXX``), hidden and recognisable in a listing.
TMP_PREFIX = ".spx-tmp-"


#: Who is told of a file before it is written (:func:`add_claimer`): the run folders being written.
_CLAIMERS: list[Callable[[Path], None]] = []


def add_claimer(claimer: Callable[[Path], None]) -> None:
    """Tell ``claimer`` of every path :func:`claim` is given from now on (a run folder's manifest)."""
    _CLAIMERS.append(claimer)


def remove_claimer(claimer: Callable[[Path], None]) -> None:
    """Stop telling ``claimer`` (no error when it was not told)."""
    with contextlib.suppress(ValueError):
        _CLAIMERS.remove(claimer)


def claim(path: str | os.PathLike[str]) -> Path:
    """Announce that ``path`` is about to be written by spx (every claimer records it); returns it as a Path.
    Call before creating a file that is not written by :func:`write_atomic` (a log opened for appending).

    Raises:
        spx.rundir.RunDirectoryError: a claimer cannot record it (its manifest cannot be written: a full disk).
    """
    target = Path(path)
    for claimer in list(_CLAIMERS):
        claimer(target)
    return target


def _special(path: Path) -> bool:
    """``path`` exists and is not a regular file (a device, a FIFO): it cannot be replaced by a rename."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, encoding: str = "utf-8") -> Path:
    """Write ``data`` (``str``: encoded with ``encoding``) to ``path``, whole or not at all; returns the path.

    Raises:
        OSError: the directory is missing or not writable, or the disk is full (``ENOSPC``, ``EFBIG``); ``path``
            is then unchanged and no temporary file is left.
    """
    target = claim(path)
    if target.is_symlink():  # replace the file the link names, not the link
        target = Path(os.path.realpath(target))
    raw = data.encode(encoding) if isinstance(data, str) else data
    if _special(target):
        return _write_in_place(target, raw)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{TMP_PREFIX}", dir=target.parent or ".")
    except OSError as exc:
        if exc.errno in _NO_SIBLING and target.is_file():  # a writable file in a folder we cannot write (/dev)
            return _write_in_place(target, raw)
        raise OSError(exc.errno, exc.strerror, str(target)) from None  # (named as the caller named it)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # (mkstemp makes it 0600; a result is as readable as any new file)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno in _NOT_REPLACEABLE:  # a bind-mounted file (a pod's /dev/termination-log): only in place
            return _write_in_place(target, raw)
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)
    return target


#: ``mkstemp`` beside the file failed because the folder is not ours to write (the file itself may be).
_NO_SIBLING = (errno.EACCES, errno.EPERM, errno.EROFS)
#: ``rename`` over the file failed because it is a mount point (``EBUSY``: Kubernetes bind-mounts
#: ``/dev/termination-log``) or on another file system (``EXDEV``).
_NOT_REPLACEABLE = (errno.EBUSY, errno.EXDEV)


def _write_in_place(target: Path, raw: bytes) -> Path:
    """Truncate and write ``target`` once (a device, a FIFO, a bind-mounted file: no rename can replace it)."""
    with open(target, "wb") as f:
        f.write(raw)
    return target


def _read_umask() -> int:
    """This process's umask, read once at import (``os.umask`` can only be read by setting it: done while
    importing, before any thread of ours writes a file)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _fsync_dir(directory: Path) -> None:
    """``fsync`` a directory so a rename in it is durable (best effort: not every file system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["TMP_PREFIX", "add_claimer", "claim", "remove_claimer", "write_atomic"]
