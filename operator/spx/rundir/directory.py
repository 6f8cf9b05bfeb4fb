"""One run's folder: :class:`RunDirectory`, its file names, lock, readers and writers (its manifest and
``--overwrite`` are :class:`spx.rundir.manifest.RunManifest`'s). Part of :mod:`spx.rundir`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from spx.api.result import KernelResult, PointResult
from spx.api.status import ExperimentStatus
from spx.files import write_atomic
from spx.rundir.documents import M, RunDirectoryError, parse_points, validated
from spx.rundir.lock import enclosing_run, hold_lock, lock_holder
from spx.rundir.manifest import REPLACED_DIR, RunManifest
from spx.vocabulary import LOGS_DIR, MANIFEST_FILE, POINTS_FILE, RESULT_FILE, SERVING_DIR, STATUS_FILE


class RunDirectory(RunManifest):
    """One run's folder ``path`` (:mod:`spx.rundir`'s docstring): lock, manifest, readers and writers."""

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
            with hold_lock(out):
                yield self
        finally:
            for d in created:
                try:
                    d.rmdir()
                except OSError:  # not empty (results, logs): keep it and its parents
                    break

    def in_progress(self) -> str | None:
        """The holder of the folder's lock (``pid N, started …``) while a run writes there, else ``None``."""
        return lock_holder(self.path)

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
