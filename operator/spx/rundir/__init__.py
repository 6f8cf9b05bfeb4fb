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

Its modules, one concern each: :mod:`~spx.rundir.documents` (reading JSON and models, the write message),
:mod:`~spx.rundir.lock`, :mod:`~spx.rundir.manifest` (with ``--overwrite``) and :mod:`~spx.rundir.directory`
(:class:`RunDirectory`: names, readers, writers). Import the names below from ``spx.rundir``.
"""

from __future__ import annotations

from spx.api.loading import STATUS_FIELDS, DocumentKind, kind_of
from spx.rundir.directory import RunDirectory
from spx.rundir.documents import RunDirectoryError, cannot_write, loads_json, parse_points, read_json, validated
from spx.rundir.lock import enclosing_run
from spx.rundir.manifest import REPLACED_DIR
from spx.vocabulary import MANIFEST_SCHEMA

__all__ = ["MANIFEST_SCHEMA", "REPLACED_DIR", "STATUS_FIELDS", "DocumentKind", "RunDirectory", "RunDirectoryError",
           "cannot_write", "enclosing_run", "kind_of", "loads_json", "parse_points", "read_json", "validated"]
