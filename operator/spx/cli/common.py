"""What every ``spx`` command shares: its errors, consoles, reading an experiment, ``-o json|yaml``."""

from __future__ import annotations

import argparse
import errno
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from spx.api import Experiment, ExperimentSpec, SpecError, dump_model, load_experiment, validate_spec
from spx.api.exit_codes import EXIT_USAGE
from spx.api.loading import MAX_DOCUMENT_BYTES
from spx.rundir import RunDirectoryError
from spx.vocabulary import OUTPUT_FORMATS

DEFAULT_OUT_ROOT = "spx-runs"
#: Width of output that is not a terminal (pipes, logs, tests); text lines are not wrapped there at all and a
#: table wider than this is laid out at its natural width up to :data:`PIPE_TABLE_MAX_WIDTH` (:class:`PipeConsole`).
PIPE_WIDTH = 160
#: The widest a table is laid out off a terminal: a GPU run's kernel table (graph/eager, host-bound columns and
#: both speedup intervals: 14 columns) is 214 wide, and squeezing it into 160 cropped its intervals to ``0.448–0.…``.
PIPE_TABLE_MAX_WIDTH = 240


class UsageError(RunDirectoryError):
    """Invalid input or usage found by a command (exit code 3, ``EXIT_USAGE``); the message is shown as is. A
    :class:`spx.rundir.RunDirectoryError` (a run folder that cannot be used) is handled the same way."""


class UnreachableError(Exception):
    """The cluster could not be reached or refused access (exit code 4, ``EXIT_UNREACHABLE``)."""


class SpxConsole(Console):
    """A rich console whose closed stream (``spx … | head -1``) raises :class:`BrokenPipeError`.

    rich catches the error of a write to a pipe whose reader has gone and raises ``SystemExit(1)``
    (:meth:`rich.console.Console.on_broken_pipe`), which would slip past ``spx``'s handling of a closed
    stream (exit 141, or ``spx run`` going on: :mod:`spx.cli.streams`) and exit 1, "Fail". Here the
    error goes on as itself.
    """

    def on_broken_pipe(self) -> None:
        """Raise :class:`BrokenPipeError` (rich: ``SystemExit(1)``); ``spx.cli.main`` handles it."""
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


class PipeConsole(SpxConsole):
    """The console of output that is not a terminal (pipes, logs, files): a line of text is never
    hard-wrapped (``soft_wrap``), so a long note or reason stays one line for ``grep`` and for the viewer's
    own wrapping; a table gets its natural width, at least the console's (:data:`PIPE_WIDTH`) and at most
    :data:`PIPE_TABLE_MAX_WIDTH` columns, so no number in it is cropped to ``…`` (rich shrinks the widest
    columns first, below their longest cell)."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, width: int | None = None, **kwargs: Any) -> None:
        """:meth:`rich.console.Console.print`; text (``str``) is soft-wrapped unless ``soft_wrap`` says otherwise,
        and a table is laid out at its natural width (see the class) unless ``width`` is given."""
        if soft_wrap is None and objects and all(isinstance(o, str) for o in objects):
            soft_wrap = True
        tables = [o for o in objects if isinstance(o, Table)]
        if width is not None or not tables:
            super().print(*objects, soft_wrap=soft_wrap, width=width, **kwargs)
            return
        options = self.options.update_width(PIPE_TABLE_MAX_WIDTH)
        natural = max(Measurement.get(self, options, t).maximum for t in tables)
        own = self.width
        self.width = max(own, natural)  # print(width=) can only narrow the console
        try:
            super().print(*objects, soft_wrap=soft_wrap, **kwargs)
        finally:
            self.width = own


def make_console(stderr: bool = False) -> Console:
    """A rich console (:class:`SpxConsole`) on stdout or stderr; when not a terminal a :class:`PipeConsole`
    (tables in :data:`PIPE_WIDTH` columns, text lines not wrapped)."""
    console: Console = SpxConsole(stderr=stderr)
    if not console.is_terminal:
        console = PipeConsole(stderr=stderr, width=PIPE_WIDTH)
    return console


def err_console() -> Console:
    """A rich console on stderr."""
    return make_console(stderr=True)


def warn(message: str) -> None:
    """``warning: MESSAGE`` on stderr."""
    err_console().print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


#: The file name that means standard input (``cat exp.yaml | spx validate -``).
STDIN = "-"


#: The most bytes read of a CSV table or a run's ``result.json`` (``spx predict``): far above any real one.
MAX_TABLE_BYTES = 64 << 20


def read_text(path: str, what: str = "an experiment YAML", limit: int = MAX_DOCUMENT_BYTES,
              hint: str = " (a real one is a few KiB; list at most 64 token counts)") -> str:
    """The UTF-8 text of ``path``; ``-`` reads standard input. At most ``limit + 1`` bytes are read, so
    ``/dev/zero`` or an endless pipe is refused at once (the default ``limit`` is an experiment document's,
    :data:`spx.api.loading.MAX_DOCUMENT_BYTES`); ``hint`` follows ``what`` in that refusal.

    Raises:
        UsageError: it can't be read, is over ``limit`` bytes, or is not UTF-8 text.
    """
    try:
        if path == STDIN:
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UsageError(f"{source_name(path)}: more than {limit:,} bytes (read no further), over the {limit:,}-byte "
                         f"limit of {what}{hint}: is this the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a UTF-8 text file: give {what}") from None


def read_experiment(path: str) -> Experiment:
    """Load and validate an experiment file.

    Raises:
        UsageError: the file can't be read. SpecError: it is not a valid experiment.
    """
    return load_experiment(read_text(path), source=source_name(path))


def source_name(path: str) -> str:
    """``path`` as messages name it: ``<stdin>`` for ``-``."""
    return "<stdin>" if path == STDIN else path


def parse_tokens(text: str) -> list[int]:
    """``"6,12,24"`` → ``[6, 12, 24]`` (spaces around the commas are allowed).

    Raises:
        UsageError: a value that is not a whole number in ASCII digits, or an empty entry (``8,,32``, a trailing comma).
    """
    if not text.strip():
        raise UsageError("--tokens: no token counts given (use e.g. --tokens 6,12,2048)")
    out = []
    parts = text.replace(" ", "").split(",")
    for i, part in enumerate(parts):
        if not part:
            raise UsageError(f"--tokens {text[:80]!r}: entry {i + 1} of {len(parts)} is empty (two commas in a row, or "
                             "a comma at an end); give whole numbers separated by single commas, e.g. --tokens 6,12,2048")
        if not re.fullmatch(r"[+-]?[0-9]+", part, flags=re.ASCII):  # (int() takes ٣٢ and 1_000 too)
            raise UsageError(f"--tokens: {part[:40]!r} is not a whole number in the digits 0-9 (use e.g. "
                             "--tokens 6,12,2048)")
        out.append(int(part))
    return out


def apply_overrides(
    spec: ExperimentSpec,
    *,
    gemm_backend: str | None = None,
    samples: int | None = None,
    tokens: list[int] | None = None,
    device: str | None = None,
) -> ExperimentSpec:
    """The spec with command-line overrides applied and re-validated.

    Raises:
        SpecError: an override makes the spec invalid (the message names the ``spec.…`` field).
    """
    raw = dump_model(spec)
    if gemm_backend is not None:
        raw["kernel"]["gemmBackend"] = gemm_backend
    if samples is not None:
        raw["kernel"]["samples"] = samples
    if tokens is not None:
        raw["sweep"]["tokens"] = tokens
    if device is not None:
        raw["kernel"]["device"] = device
    return validate_spec(raw, source="experiment with command-line overrides")


def add_output_option(p: argparse.ArgumentParser, schema: str) -> None:
    """``-o/--output text|json|yaml``; ``schema`` names the document's JSON schema under ``docs/schemas/``."""
    p.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text",
                   help=f"output format (default text); json/yaml print one document, schema docs/schemas/{schema}")


def emit(document: BaseModel, fmt: str) -> None:
    """Print ``document`` (camelCase wire form, ``None`` fields kept out) as JSON or YAML on stdout."""
    data: Any = dump_model(document)
    if fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def problems_of(err: RunDirectoryError | SpecError) -> list[str]:
    """An input error as the ``problems`` of a ``-o json|yaml`` document: a spec's one line per field, else the message."""
    return list(err.problems) if isinstance(err, SpecError) else [str(err)]


def with_error_document(fmt: str, body: Callable[[], int], error_document: Callable[[list[str]], BaseModel]) -> int:
    """``body()``; with ``-o json|yaml`` (``fmt``) an input error (:class:`UsageError`, :class:`SpecError`) is
    printed as ``error_document(problems)`` on stdout and the exit code is 3, as ``spx validate`` does. In
    text the error propagates (one line on stderr, exit 3)."""
    try:
        return body()
    except (RunDirectoryError, SpecError) as err:
        if fmt == "text":
            raise
        emit(error_document(problems_of(err)), fmt)
        return EXIT_USAGE
