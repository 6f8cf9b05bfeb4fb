"""One run's folder (``spx run --out DIR``, ``spx serving --out DIR``, the bench pod's ``/results``): the only
code that knows its file names, locks it, keeps its manifest, and reads or writes its documents.

* **The lock** ``OUT/.spx.lock`` (:meth:`RunDirectory.locked`): an ``fcntl.flock`` exclusive lock held by the
  writing process until it exits (the kernel releases it when the process is killed, so a crashed run never
  leaves a stale lock). It records the holder's pid and start time for the error message of a second run, and a
  run re-checks after locking that the file it locked is still the one at the path.
* **The manifest** ``OUT/.spx-manifest.json`` (:data:`~spx.vocabulary.MANIFEST_FILE`): the *files* (never whole
  directories) the run wrote, each recorded before it is created (:func:`spx.files.claim`), the sweep it planned
  (``plannedTokens``: a killed run's counts are "4 of 6", not "4 of 4"), and ``complete``. ``--overwrite``
  replaces only files the manifest lists and refuses any other by name (a ``logs/dmesg.txt`` saved after a
  killed run is never deleted). It moves the earlier run aside (``OUT/.spx-replaced``) and deletes it only once
  the new run has something of its own (:meth:`RunDirectory.settle`).
* **Reading**: one error ladder (:func:`read_json`: unreadable, not UTF-8, not JSON, nested too deep), one
  "what is this file" test (:func:`kind_of`), typed readers (:meth:`RunDirectory.result`,
  :meth:`~RunDirectory.status`, :meth:`~RunDirectory.bench_document`, :meth:`~RunDirectory.partial_points`) and
  the state of a run that ended without its status (:meth:`~RunDirectory.in_progress`,
  :meth:`~RunDirectory.killed`). Every count of a killed run's points is of the *parseable* points (a line cut
  short by the kill or a full disk is not a point), so ``spx gate`` and ``spx report`` say the same number.
* **Writing** goes through :func:`spx.files.write_atomic` (whole or not at all); a write that fails for a full
  disk is a :class:`RunDirectoryError` "cannot write … free space there" (:func:`cannot_write`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from spx.api.base import utc_now
from spx.api.loading import STATUS_FIELDS, DocumentKind, kind_of
from spx.api.result import KernelResult, PointResult
from spx.api.status import ExperimentStatus
from spx.files import TMP_PREFIX, add_claimer, remove_claimer, write_atomic
from spx.vocabulary import (
    ACCURACY_RESULT_FILE,
    LOCK_FILE,
    LOGS_DIR,
    MANIFEST_FILE,
    MANIFEST_SCHEMA,
    PLOT_FILE,
    POINTS_FILE,
    RESULT_FILE,
    RUN_MARKERS,
    RUN_OUTPUTS,
    SERVING_DIR,
    SERVING_RESULT_FILE,
    STATUS_FILE,
    STEP_RESULT_FILE,
)

#: Where ``--overwrite`` keeps the earlier run until the new one has replaced it (:meth:`RunDirectory.settle`).
REPLACED_DIR = ".spx-replaced"

M = TypeVar("M", bound=BaseModel)

#: The top-level files a run may write (claimed by :meth:`RunDirectory.begin`).
_TOP_FILES = (RESULT_FILE, STATUS_FILE, PLOT_FILE, POINTS_FILE, SERVING_RESULT_FILE, ACCURACY_RESULT_FILE,
              STEP_RESULT_FILE)

class RunDirectoryError(Exception):
    """A run folder or one of its files that cannot be used as asked (named, with the fix): exit 3 in the CLI
    (``spx.cli.common.UsageError`` is one)."""


def cannot_write(path: Path | str, exc: OSError) -> str:
    """The one message for a write that failed: ``cannot write PATH: No space left on device; free space there
    (or choose another --out) and run again`` (``ENOSPC``/``EDQUOT``/``EFBIG``), else the OS's reason."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    fix = "free space there (or choose another --out) and run again" if full else "make it writable or choose another --out"
    return f"cannot write {exc.filename or path}: {exc.strerror or exc}; {fix}"


def read_json(path: Path | str, what: str = "an spx document") -> Any:
    """The JSON in ``path``: the one reading ladder of a run's documents. Messages name ``path`` as given
    (``./x`` stays ``./x``).

    Raises:
        RunDirectoryError: missing, a directory, unreadable, not UTF-8, not JSON, or nested deeper than any spx
            document (Python's recursion limit); the message names ``path`` and says it should be ``what``.
    """
    shown = os.fspath(path)
    try:
        return loads_json(Path(path).read_text(encoding="utf-8"), shown, what)
    except FileNotFoundError:
        raise RunDirectoryError(f"{shown}: no such file (expected {what})") from None
    except IsADirectoryError:
        raise RunDirectoryError(f"{shown} is a directory, not {what}") from None
    except OSError as exc:
        raise RunDirectoryError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RunDirectoryError(f"{shown} is not a UTF-8 text file (expected {what})") from None


def loads_json(text: str, source: Path | str, what: str = "an spx document") -> Any:
    """The JSON in ``text`` read from ``source`` (the second half of :func:`read_json`'s ladder).

    Raises:
        RunDirectoryError: not JSON, or nested deeper than any spx document (Python's recursion limit).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDirectoryError(f"{source} is not JSON ({exc}): expected {what}") from None
    except RecursionError:
        raise RunDirectoryError(f"{source} nests deeper than any spx document: not {what}") from None


def validated(model: type[M], path: Path, data: Any = None) -> M:
    """``path``'s JSON (or ``data`` already read from it) as ``model``.

    Raises:
        RunDirectoryError: unreadable or not JSON. spx.api.SpecError: not that document (names the fields).
    """
    from spx.api import SpecError, describe_validation_error

    try:
        return model.model_validate(read_json(path, f"a {model.__name__}") if data is None else data)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err), str(path)) from None


def parse_points(raw: bytes) -> tuple[list[PointResult], int]:
    """``(points, bad lines)`` of a ``points.partial.jsonl``'s bytes: only lines that parse as a point count (the
    last line of a killed run, or of a full disk, may be cut short)."""
    points, bad = [], 0
    for line in filter(bytes.strip, raw.splitlines()):
        try:
            points.append(PointResult.model_validate_json(line))
        except ValueError:
            bad += 1
    return points, bad


def enclosing_run(out: Path) -> Path | None:
    """The nearest folder above ``out`` that holds a run (:data:`~spx.vocabulary.RUN_MARKERS`), else ``None``: a
    run inside another's directory (e.g. in its ``logs/``) would be deleted by an ``--overwrite`` of the outer one."""
    for parent in out.absolute().parents:
        if any((parent / name).exists() for name in RUN_MARKERS):
            return parent
    return None


class RunDirectory:
    """One run's folder ``path`` (module docstring): lock, manifest, readers and writers."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._claimed: set[str] = set()
        self._planned: list[int] | None = None

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    # -- names ------------------------------------------------------------------------------------------------

    @property
    def result_path(self) -> Path:
        """``OUT/result.json``: the kernel bench's :class:`~spx.api.result.KernelResult`."""
        return self.path / RESULT_FILE

    @property
    def status_path(self) -> Path:
        """``OUT/status.json``: the run's :class:`~spx.api.status.ExperimentStatus`, what ``spx gate`` reads."""
        return self.path / STATUS_FILE

    @property
    def points_path(self) -> Path:
        """``OUT/points.partial.jsonl``: the points rank 0 streamed, one JSON line each."""
        return self.path / POINTS_FILE

    @property
    def logs(self) -> Path:
        """``OUT/logs``: the ranks' and the launcher's logs."""
        return self.path / LOGS_DIR

    # -- the lock -----------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[RunDirectory]:
        """Hold the exclusive lock of the folder (created) for the ``with`` block; folders this call created are
        removed again on exit when still empty (a run refused before it wrote anything leaves no empty ``--out``).

        Raises:
            RunDirectoryError: the path is a file, inside another run's folder, cannot be created or written (its
                lock file; a full disk), or another run holds its lock (the message names its pid and start time).
        """
        out = self.path
        if out.exists() and not out.is_dir():
            raise RunDirectoryError(f"--out {out} is a file; give a directory")
        if holder := enclosing_run(out):
            raise RunDirectoryError(f"--out {out} is inside the run directory {holder} (it holds a run's files): a "
                                    f"later --overwrite of {holder} would delete it; choose a directory outside {holder}")
        created = [d for d in (out, *out.parents) if not d.exists()]  # deepest first
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirectoryError(f"cannot create --out {out}: {exc.strerror or exc}") from None
        try:
            with _flock(out):
                yield self
        finally:
            for d in created:
                try:
                    d.rmdir()
                except OSError:  # not empty (results, logs): keep it and its parents
                    break

    def in_progress(self) -> str | None:
        """The holder of the folder's lock (``pid N, started …``) while a run writes there, else ``None``."""
        try:
            fd = os.open(self.path / LOCK_FILE, os.O_RDONLY)
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

    # -- the manifest ---------------------------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        """The manifest (``{}`` when absent or unreadable: then no file here is known to be spx's)."""
        try:
            data = read_json(self.path / MANIFEST_FILE, "a run's manifest")
        except RunDirectoryError:
            return {}
        return data if isinstance(data, dict) else {}

    def listed_files(self) -> set[str]:
        """The files (POSIX paths relative to the folder) the manifest lists."""
        files = self.manifest().get("files")
        return {str(f) for f in files} if isinstance(files, list) else set()

    def planned_tokens(self) -> list[int] | None:
        """The token counts the run planned to measure (``plannedTokens``), ``None`` when not recorded."""
        planned = self.manifest().get("plannedTokens")
        if isinstance(planned, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in planned):
            return planned
        return None

    def begin(self, planned_tokens: Sequence[int] | None = None, names: Sequence[str] = RUN_OUTPUTS) -> None:
        """Start recording: the manifest (``complete: false``) lists the top-level files of ``names`` and every
        file a writer claims from now on (:func:`spx.files.claim`) until :meth:`finish`; ``planned_tokens`` is the
        sweep. Files an earlier manifest here listed stay listed (``spx serving`` into a ``spx run``'s folder).

        Raises:
            RunDirectoryError: the manifest cannot be written (:func:`cannot_write`).
        """
        self._claimed = self.listed_files() | {n for n in names if n in _TOP_FILES}
        self._planned = list(planned_tokens) if planned_tokens is not None else self.planned_tokens()
        try:
            self._write_manifest(complete=False)
        except OSError as exc:
            raise RunDirectoryError(cannot_write(self.path / MANIFEST_FILE, exc)) from None
        add_claimer(self._claim)

    def claim(self, *relative: str) -> None:
        """Record files (relative to the folder) as this run's before they are written.

        Raises:
            OSError: the manifest cannot be written (a full disk).
        """
        new = set(relative) - self._claimed
        if new:
            self._claimed |= new
            self._write_manifest(complete=False)

    def _claim(self, path: Path) -> None:
        try:
            relative = Path(os.path.abspath(path)).relative_to(self.path.absolute()).as_posix()
        except ValueError:  # a file outside this folder: not ours to record
            return
        if relative != MANIFEST_FILE and relative != LOCK_FILE:
            self.claim(relative)

    def stop(self) -> None:
        """Stop recording claims (the manifest stays as it is: ``complete: false`` unless :meth:`finish` ran)."""
        remove_claimer(self._claim)

    def finish(self, names: Sequence[str] = (*RUN_OUTPUTS, LOGS_DIR)) -> None:
        """Stop recording; the manifest (``complete: true``) lists every file now under ``names`` and every file
        claimed, or is removed when there is none (a run refused before it started leaves the folder as it was).

        Raises:
            OSError: the manifest cannot be written (a full disk).
        """
        self.stop()
        self._claimed = {f for f in self._claimed | set(self._files_under(names)) if (self.path / f).exists()}
        if self._claimed:
            self._write_manifest(complete=True)
        else:
            (self.path / MANIFEST_FILE).unlink(missing_ok=True)

    def _write_manifest(self, *, complete: bool) -> None:
        doc: dict[str, Any] = {"schemaVersion": MANIFEST_SCHEMA, "writtenAt": utc_now(), "complete": complete,
                               "files": sorted(self._claimed)}
        if self._planned is not None:
            doc["plannedTokens"] = self._planned
        write_atomic(self.path / MANIFEST_FILE, json.dumps(doc, indent=1) + "\n")

    def _files_under(self, names: Sequence[str]) -> list[str]:
        """The files (POSIX paths relative to the folder) under ``names`` (files, or folders walked)."""
        found: list[str] = []
        for name in names:
            path = self.path / name
            if path.is_dir() and not path.is_symlink():
                found += sorted(p.relative_to(self.path).as_posix() for p in path.rglob("*")
                                if not p.is_dir() or p.is_symlink())
            elif path.exists() or path.is_symlink():
                found.append(name)
        return found

    def not_written_by_spx(self, names: Sequence[str] = (*RUN_OUTPUTS, LOGS_DIR)) -> list[str]:
        """The files under ``names`` the manifest does not list (all of them without one), a write's leftover
        temporary file (:data:`spx.files.TMP_PREFIX`) aside: what ``--overwrite`` must not delete."""
        listed = self.listed_files()
        return [f for f in self._files_under(names) if f not in listed and TMP_PREFIX not in f.rsplit("/", 1)[-1]]

    # -- --overwrite ------------------------------------------------------------------------------------------------

    def prepare(self, overwrite: bool, names: Sequence[str] = RUN_OUTPUTS) -> Path | None:
        """Refuse to mix two runs in one folder; with ``overwrite``, move the earlier run's files aside into
        ``OUT/.spx-replaced`` and return that folder (``None``: nothing to replace). Call with the lock held,
        then :meth:`settle` the returned folder.

        Raises:
            RunDirectoryError: an earlier run and no ``overwrite``; files no spx run recorded writing where this run
                writes (named, never deleted); or a run set aside by a killed ``--overwrite`` run.
        """
        out, aside = self.path, self.path / REPLACED_DIR
        if aside.is_dir() and any(aside.iterdir()):
            raise RunDirectoryError(
                f"--out {out} holds an earlier run set aside in {aside} by an --overwrite run that was killed before "
                f"it finished: to keep that run, move the files in {aside} back into {out} (replacing the killed "
                f"run's); to let it go, delete {aside}; then run again")
        earlier = [name for name in names if (out / name).exists()]
        if earlier and not overwrite:
            raise RunDirectoryError(f"--out {out} already holds a run ({', '.join(earlier)}); pass --overwrite to "
                                    "replace it, or choose another --out")
        if foreign := self.not_written_by_spx((*names, LOGS_DIR)):
            shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
            raise RunDirectoryError(
                f"--out {out} holds files no spx run recorded writing ({MANIFEST_FILE} does not list them), where this "
                f"run writes: {shown}; they are not {'replaced' if overwrite else 'mixed with a new run'}: move them "
                "away (or delete them), or choose another --out")
        if not earlier:
            return None
        shutil.rmtree(aside, ignore_errors=True)  # an empty one, left by a run killed while it set the earlier aside
        aside.mkdir()
        for name in (*earlier, LOGS_DIR, MANIFEST_FILE):
            if (out / name).exists():
                os.rename(out / name, aside / name)
        return aside

    def settle(self, aside: Path | None, *, keep_new: bool) -> None:
        """End the replacement :meth:`prepare` began: with ``keep_new`` delete the earlier run (``aside``); else
        delete what the new run wrote and move the earlier run back."""
        if aside is None:
            return
        if keep_new:
            shutil.rmtree(aside, ignore_errors=True)
            return
        for name in (*RUN_OUTPUTS, LOGS_DIR, MANIFEST_FILE):
            path = self.path / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        for entry in aside.iterdir():
            os.rename(entry, self.path / entry.name)
        aside.rmdir()

    # -- readers ------------------------------------------------------------------------------------------------

    def result(self) -> KernelResult:
        """``result.json``.

        Raises:
            RunDirectoryError: missing or unreadable. spx.api.SpecError: not a result (names the fields).
        """
        return validated(KernelResult, self.result_path)

    def result_or_none(self) -> KernelResult | None:
        """``result.json``, or ``None`` when it is absent or cannot be read as a result."""
        from spx.api import SpecError

        try:
            return self.result()
        except (RunDirectoryError, SpecError):
            return None

    def status(self) -> ExperimentStatus:
        """``status.json``.

        Raises:
            RunDirectoryError: missing or unreadable. spx.api.SpecError: not a status (names the fields).
        """
        return validated(ExperimentStatus, self.status_path)

    def bench_document(self, relative: str, model: type[M]) -> M | None:
        """The serving, accuracy or step document at ``relative`` (``None`` when absent).

        Raises:
            RunDirectoryError: unreadable. spx.api.SpecError: not that document.
        """
        path = self.path / relative
        return validated(model, path) if path.is_file() else None

    def bench_path(self, name: str) -> Path | None:
        """``OUT/name`` or ``OUT/serving/name`` (where ``spx run --serving`` writes the vLLM benches' documents),
        the first that is a file; ``None`` when neither is."""
        for path in (self.path / name, self.path / SERVING_DIR / name):
            if path.is_file():
                return path
        return None

    def partial_points(self) -> tuple[list[PointResult], int]:
        """``(points, lines that are not a point)`` of ``points.partial.jsonl`` (``([], 0)`` when absent)."""
        try:
            return parse_points(self.points_path.read_bytes())
        except OSError:
            return [], 0

    def measured_points(self) -> int:
        """How many points the run kept: ``result.json``'s when it holds any, else the parseable lines of
        ``points.partial.jsonl``: the one count that ``spx gate`` and ``spx report`` give."""
        result = self.result_or_none()
        if result is not None and result.points:
            return len(result.points)
        return len(self.partial_points()[0])

    def killed(self) -> str | None:
        """What a run that ended without writing its ``status.json`` left (``None``: no sign of a run): its points
        (in ``result.json`` or ``points.partial.jsonl``, of the sweep it planned), or that it measured none, and the
        earlier run an ``--overwrite`` of it had set aside in ``OUT/.spx-replaced`` (never deleted unasked)."""
        out = self.path
        if not any((out / n).exists() for n in (POINTS_FILE, MANIFEST_FILE, RESULT_FILE)):
            return None
        result, planned = self.result_or_none(), self.planned_tokens()
        n = len(result.points) if result is not None and result.points else len(self.partial_points()[0])
        where = RESULT_FILE if result is not None and result.points else POINTS_FILE
        of = f", of the {len(planned)} token count(s) it planned" if planned else ""
        kept = (f"{n} measured point(s) in {where}{of} (spx report {out} reports them)" if n else
                f"it measured no point before it stopped{of}")
        if (out / REPLACED_DIR).is_dir():
            kept += (f"; the earlier run it was replacing is in {out / REPLACED_DIR}: move its files back into {out} "
                     "to keep it")
        return (f"the run ended without writing its status.json (a full disk, SIGKILL, the OOM killer): not decided; "
                f"{kept}")

    # -- writers ------------------------------------------------------------------------------------------------

    def fresh_outputs(self) -> None:
        """``logs/`` created, an earlier ``result.json`` and ``points.partial.jsonl`` removed, the latter created
        empty (the tail reads it from the start).

        Raises:
            OSError: the folder cannot be written.
        """
        self.logs.mkdir(parents=True, exist_ok=True)
        self.points_path.unlink(missing_ok=True)
        self.result_path.unlink(missing_ok=True)
        self.points_path.touch()

    def write_document(self, relative: str, text: str) -> Path:
        """Write ``text`` to ``relative`` whole or not at all (:func:`spx.files.write_atomic`), claimed first.

        Raises:
            OSError: the folder cannot be written (a full disk).
        """
        return write_atomic(self.path / relative, text)

    def write_result(self, result: KernelResult) -> Path:
        """``result.json`` (camelCase, indented). Raises: OSError: cannot be written."""
        return self.write_document(RESULT_FILE, result.model_dump_json(by_alias=True, indent=1) + "\n")

    def write_status(self, status: ExperimentStatus) -> Path:
        """``status.json`` (camelCase, indented). Raises: OSError: cannot be written."""
        from spx.api import dump_model

        return self.write_document(STATUS_FILE, json.dumps(dump_model(status), indent=1) + "\n")


@contextlib.contextmanager
def _flock(out: Path) -> Iterator[None]:
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


__all__ = ["MANIFEST_SCHEMA", "REPLACED_DIR", "STATUS_FIELDS", "DocumentKind", "RunDirectory", "RunDirectoryError",
           "cannot_write", "enclosing_run", "kind_of", "loads_json", "parse_points", "read_json", "validated"]
