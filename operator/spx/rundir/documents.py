"""A run folder's documents as JSON and models: the one error ladder (:func:`read_json`), validation into a model
(:func:`validated`), the streamed points (:func:`parse_points`) and the one message for a failed write
(:func:`cannot_write`). Part of :mod:`spx.rundir`."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from spx.api.result import PointResult

M = TypeVar("M", bound=BaseModel)


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
