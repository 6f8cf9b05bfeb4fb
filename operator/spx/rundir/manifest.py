"""A run folder's manifest ``OUT/.spx-manifest.json`` (the files a run wrote, each claimed before it is created,
its planned sweep, ``complete``) and ``--overwrite``'s replacement of an earlier run, which only touches files the
manifest lists. :class:`RunManifest` is the part of :class:`spx.rundir.RunDirectory` that keeps them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spx.api.base import utc_now
from spx.files import TMP_PREFIX, add_claimer, remove_claimer, write_atomic
from spx.rundir.documents import RunDirectoryError, cannot_write, read_json
from spx.vocabulary import (
    ACCURACY_RESULT_FILE,
    LOCK_FILE,
    LOGS_DIR,
    MANIFEST_FILE,
    MANIFEST_SCHEMA,
    PLOT_FILE,
    POINTS_FILE,
    RESULT_FILE,
    RUN_OUTPUTS,
    SERVING_RESULT_FILE,
    STATUS_FILE,
    STEP_RESULT_FILE,
)

#: Where ``--overwrite`` keeps the earlier run until the new one has replaced it (:meth:`RunManifest.settle`).
REPLACED_DIR = ".spx-replaced"

#: The top-level files a run may write (claimed by :meth:`RunManifest.begin`).
_TOP_FILES = (RESULT_FILE, STATUS_FILE, PLOT_FILE, POINTS_FILE, SERVING_RESULT_FILE, ACCURACY_RESULT_FILE,
              STEP_RESULT_FILE)


class RunManifest:
    """The manifest and ``--overwrite`` of the run folder ``path`` (module docstring)."""

    path: Path
    _claimed: set[str]
    _planned: list[int] | None

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
        # files spx did not write are named first, with or without --overwrite: "pass --overwrite" would only lead to
        # this refusal (a newcomer's own status.json or crossover.png)
        if foreign := self.not_written_by_spx((*names, LOGS_DIR)):
            shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
            raise RunDirectoryError(
                f"--out {out} holds files no spx run recorded writing ({MANIFEST_FILE} does not list them), where this "
                f"run writes: {shown}; they are not spx's, so they are not replaced, even with --overwrite: move "
                "them away (or delete them), or choose another --out")
        earlier = [name for name in names if (out / name).exists()]
        if earlier and not overwrite:
            raise RunDirectoryError(f"--out {out} already holds a run ({', '.join(earlier)}); pass --overwrite to "
                                    "replace it, or choose another --out")
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
