"""A run's output folder: locked for the run's lifetime, earlier results replaced only when asked.

A run records the files it wrote in ``OUT/.spx-manifest.json`` (:data:`MANIFEST_FILE`); ``--overwrite``
replaces only those, and refuses, naming them, when other files are where the new run writes (a ``logs/`` with
a file of the user's, a hand-written ``result.json``): nothing spx did not write is ever deleted.

``--overwrite`` moves the earlier run's files aside (``OUT/.spx-replaced``, :func:`prepare`) instead of
deleting them; :func:`settle` deletes them once the new run has something of its own to keep, and moves them
back when it was refused before it started or interrupted before it measured a point (a refused or empty run
never deletes earlier results).

The lock is ``OUT/.spx.lock``, an ``fcntl.flock`` exclusive lock held by the ``spx run`` process until it
exits (the kernel releases it even when the process is killed, so a crashed run never leaves a stale
lock). The file records the holder's pid and start time for the error message of a second run. A run
re-checks after locking that the file it locked is still the one at the path (a run that finished may
have removed it), so two runs can never both believe they hold it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from spx.api.base import utc_now
from spx.cli.common import UsageError
from spx.vocabulary import (
    LOCK_FILE,
    LOGS_DIR,
    MANIFEST_FILE,
    POINTS_FILE,
    RESULT_FILE,
    RUN_MARKERS,
    RUN_OUTPUTS,
    SERVING_DIR,
)

#: Files a run writes into --out; an earlier run's are replaced by --overwrite (never others).
MANIFEST_SCHEMA = "spx.dev/run-files/v1"
#: Where ``--overwrite`` keeps the earlier run until the new one has replaced it (:func:`settle`).
REPLACED_DIR = ".spx-replaced"


@contextlib.contextmanager
def locked(out: Path) -> Iterator[Path]:
    """Hold the exclusive lock of ``out`` (created) for the ``with`` block.

    Folders this call created are removed again on exit when they are still empty (a run refused
    before it wrote anything, e.g. a GPU-sized spec on a CPU, leaves no empty ``--out`` behind).

    Raises:
        UsageError: ``out`` is a file, cannot be created or written (its lock file), or another run holds its
            lock (the message names its pid and start time).
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory")
    if holder := enclosing_run(out):
        raise UsageError(f"--out {out} is inside the run directory {holder} (it holds a run's files): a later "
                         f"--overwrite of {holder} would delete it; choose a directory outside {holder}")
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
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a read-only file system, no write permission, a folder named .spx.lock
            fix = f"remove the folder {path}" if isinstance(exc, IsADirectoryError) else f"make {out} writable"
            raise UsageError(f"--out {out} is not writable: {exc.strerror or exc} (its lock file {path} cannot be "
                             f"created); {fix}, or choose another --out") from None
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


def prepare(out: Path, overwrite: bool) -> Path | None:
    """Refuse to mix two runs in one directory; with ``overwrite``, move the earlier run's files (those its
    manifest names, :data:`MANIFEST_FILE`) aside into ``OUT/.spx-replaced`` and return that folder (``None``:
    nothing to replace).

    Call with the lock held (:func:`locked`), then :func:`settle` the returned folder.

    Raises:
        UsageError: ``out`` holds an earlier run and ``overwrite`` is false; files that no spx run recorded writing
            are where this run writes (``result.json``, ``logs/``…: named, never deleted); or ``OUT/.spx-replaced``
            holds a run set aside by an ``--overwrite`` run that was killed (SIGKILL) before it settled: it is never
            deleted unasked.
    """
    aside = out / REPLACED_DIR
    if aside.is_dir() and any(aside.iterdir()):
        raise UsageError(
            f"--out {out} holds an earlier run set aside in {aside} by an --overwrite run that was killed before it "
            f"finished: to keep that run, move the files in {aside} back into {out} (replacing the killed run's); "
            f"to let it go, delete {aside}; then run again"
        )
    earlier = [name for name in RUN_OUTPUTS if (out / name).exists()]
    if earlier and not overwrite:
        raise UsageError(
            f"--out {out} already holds a run ({', '.join(earlier)}); pass --overwrite to replace it, "
            "or choose another --out"
        )
    if foreign := not_written_by_spx(out):
        shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
        raise UsageError(
            f"--out {out} holds files no spx run recorded writing ({MANIFEST_FILE} does not list them), where this run "
            f"writes: {shown}; they are not {'replaced' if overwrite else 'mixed with a new run'}: move them away (or "
            "delete them), or choose another --out"
        )
    if not earlier:
        return None
    shutil.rmtree(aside, ignore_errors=True)  # an empty one, left by a run killed while it set the earlier aside
    aside.mkdir()
    for name in (*earlier, LOGS_DIR, MANIFEST_FILE):
        if (out / name).exists():
            os.rename(out / name, aside / name)
    return aside


def _run_files(out: Path) -> list[str]:
    """The files (POSIX paths relative to ``out``) under the names a run writes (:data:`RUN_OUTPUTS`, ``logs/``)."""
    found: list[str] = []
    for name in (*RUN_OUTPUTS, LOGS_DIR):
        path = out / name
        if path.is_dir() and not path.is_symlink():
            found += sorted(p.relative_to(out).as_posix() for p in path.rglob("*") if not p.is_dir() or p.is_symlink())
        elif path.exists() or path.is_symlink():
            found.append(name)
    return found


def not_written_by_spx(out: Path) -> list[str]:
    """The files where a run writes that ``out``'s manifest does not list (all of them without a manifest):
    what ``--overwrite`` must not delete. A manifest of a run that was killed (``"complete": false``) owns its
    output names and everything under its ``logs/`` and ``serving/``."""
    try:
        manifest = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))
        files = {str(f) for f in manifest.get("files", [])}
        dirs = () if manifest.get("complete") else tuple(f"{d}/" for d in manifest.get("dirs", []))
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        files, dirs = set(), ()
    return [f for f in _run_files(out) if f not in files and not f.startswith(dirs)]


def begin_manifest(out: Path) -> None:
    """Record, before the run writes anything, that the names it writes are its own (:data:`MANIFEST_FILE`,
    ``"complete": false``): a run killed before :func:`finish_manifest` can still be replaced by ``--overwrite``."""
    _write_manifest(out, {"complete": False, "files": list(RUN_OUTPUTS), "dirs": [LOGS_DIR, SERVING_DIR]})


def finish_manifest(out: Path) -> None:
    """Record every file the run wrote (:data:`MANIFEST_FILE`, ``"complete": true``), or remove the manifest when
    it wrote none (a run refused before it started leaves its ``--out`` as it found it)."""
    files = _run_files(out)
    if files:
        _write_manifest(out, {"complete": True, "files": files})
    else:
        (out / MANIFEST_FILE).unlink(missing_ok=True)


def _write_manifest(out: Path, body: dict[str, object]) -> None:
    from spx.files import write_atomic

    doc = {"schemaVersion": MANIFEST_SCHEMA, "writtenAt": utc_now(), **body}
    write_atomic(out / MANIFEST_FILE, json.dumps(doc, indent=1) + "\n")


def enclosing_run(out: Path) -> Path | None:
    """The nearest folder above ``out`` that holds a run (its ``status.json``, ``result.json``,
    ``points.partial.jsonl``, lock or manifest), else ``None``: a run inside another's directory (e.g. in its
    ``logs/``) would be deleted by an ``--overwrite`` of the outer one."""
    for parent in out.absolute().parents:
        if any((parent / name).exists() for name in RUN_MARKERS):
            return parent
    return None


def run_in_progress(out: Path) -> str | None:
    """The holder of ``out``'s lock (``pid N, started …``) while a run is writing there, else ``None``: a
    reader (``spx report``, ``spx gate``) then knows why ``status.json`` is not there yet."""
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


def partial_points(out: Path) -> int:
    """How many points ``out/points.partial.jsonl`` holds (lines; 0 when absent): a killed run's only record."""
    try:
        return sum(1 for line in (out / POINTS_FILE).read_bytes().splitlines() if line.strip())
    except OSError:
        return 0


def killed_run(out: Path) -> str | None:
    """What a run in ``out`` that ended without writing its ``status.json`` left (``None``: no sign of a run: no
    ``points.partial.jsonl`` and no :data:`MANIFEST_FILE`): its streamed points, or that it measured none, and
    the earlier run an ``--overwrite`` of it had set aside in :data:`REPLACED_DIR` (never deleted unasked)."""
    if not ((out / POINTS_FILE).exists() or (out / MANIFEST_FILE).exists()):
        return None
    n = partial_points(out)
    kept = (f"{n} measured point(s) in {POINTS_FILE} (spx report {out} reports them)" if n else
            "it measured no point before it stopped")
    if (out / REPLACED_DIR).is_dir():
        kept += (f"; the earlier run it was replacing is in {out / REPLACED_DIR}: move its files back into {out} "
                 "to keep it")
    return (f"the run ended without writing its status.json (a full disk, SIGKILL, the OOM killer): not decided; "
            f"{kept}")


def measured(out: Path) -> bool:
    """Whether the run in ``out`` measured at least one point (a line in ``points.partial.jsonl``, or points
    in ``result.json``)."""
    if partial_points(out):
        return True
    try:
        return bool(json.loads((out / RESULT_FILE).read_text(encoding="utf-8")).get("points"))
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def settle(out: Path, aside: Path | None, *, keep_new: bool) -> None:
    """End the replacement :func:`prepare` began: with ``keep_new`` delete the earlier run (``aside``); else
    delete what the new run wrote and move the earlier run back."""
    if aside is None:
        return
    if keep_new:
        shutil.rmtree(aside, ignore_errors=True)
        return
    for name in (*RUN_OUTPUTS, LOGS_DIR, MANIFEST_FILE):
        _remove(out / name)
    for entry in aside.iterdir():
        os.rename(entry, out / entry.name)
    aside.rmdir()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
