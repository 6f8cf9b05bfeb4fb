"""Standard output or error whose reader has gone (``spx crd | head -1``, ``spx run … 2>&1 | head -1``).

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises :class:`BrokenPipeError`
wherever it happens (rich's consoles raise it too: :class:`spx.cli.common.SpxConsole`). Two answers,
both pointing the stream's file descriptor at ``/dev/null`` (the fix the Python documentation gives,
"Note on SIGPIPE" in the ``signal`` module's docs, so that the interpreter's last flush at exit cannot
fail either):

- most commands stop, print nothing more and exit 141 (128 + SIGPIPE), as ``cat`` or ``yes`` killed by
  SIGPIPE would (:func:`stdout_closed`, called by :func:`spx.cli.main`);
- a command registered ``outlives_stdout`` (``spx run``, ``spx serving``: their results are files) runs
  inside :func:`pipe_safe_streams`, which wraps ``sys.stdout`` and ``sys.stderr`` for its lifetime: on
  stdout's first broken pipe (in the report, before the plot is drawn, in the thread that streams
  ``--jsonl`` points) it says so once on stderr and drops the rest of the output; on stderr's (progress
  lines, warnings) it drops the rest quietly. The command goes on, writes its files and exits with the
  code of what it did.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from spx.api.exit_codes import EXIT_INTERNAL, EXIT_PIPE

#: The one line on stderr when stdout's reader has gone.
CLOSED_NOTE = "spx: stdout was closed by its reader (broken pipe); the rest of the output is dropped, the command goes on"


def _to_devnull(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at ``/dev/null``: what is still buffered for it goes nowhere."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def stdout_closed() -> int:
    """Stdout's reader has gone: drop what is still buffered and return :data:`~spx.api.exit_codes.EXIT_PIPE`
    (141, the status of a process killed by SIGPIPE), with nothing printed."""
    _to_devnull(sys.stdout)
    return EXIT_PIPE


class PipeSafeStream:
    """A text stream over ``stream`` whose writes and flushes never raise :class:`BrokenPipeError`.

    Every other attribute (``isatty``, ``encoding``, ``fileno``…) is ``stream``'s, so rich and
    ``json`` see the real stream. ``broken`` turns true on the first broken pipe; then ``note`` (if any)
    is written once on ``sys.stderr``.
    """

    def __init__(self, stream: TextIO, note: str | None = None) -> None:
        self._stream = stream
        self._note = note
        self.broken = False

    def _closed_reader(self) -> None:
        if self.broken:
            return
        self.broken = True
        _to_devnull(self._stream)
        if self._note is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(self._note + "\n")
                sys.stderr.flush()

    def write(self, text: str) -> int:
        """Write ``text``; after a broken pipe, drop it. Returns ``len(text)`` either way."""
        if self.broken:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed_reader()
            return len(text)

    def flush(self) -> None:
        """Flush; a broken pipe ends the output quietly."""
        if self.broken:
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()  # into /dev/null now: empties the buffer
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed_reader()
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


#: ASCII stand-ins for the characters spx prints, where the output's encoding cannot show them.
ASCII_STAND_INS = {
    "×": "x", "µ": "u", "≈": "~", "—": "-", "–": "-", "≥": ">=", "≤": "<=", "→": "->", "←": "<-", "…": "...",
    "·": ".", "•": "*", "±": "+/-", "≠": "!=", "✓": "ok", "✗": "x", "°": " deg", "’": "'", "‘": "'", "“": '"',
    "”": '"', "¹": "1", "²": "2", "⁰": "0", "⌈": "ceil(", "⌉": ")", "Δ": "d", "−": "-", "Σ": "sum",
}
#: The name of the codec error handler that writes :data:`ASCII_STAND_INS` (else ``?``).
DEGRADE = "spx-degrade"


def _degrade(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start:err.end]
    return "".join(ASCII_STAND_INS.get(ch, "?") for ch in bad), err.end


def degrade_unencodable_characters() -> None:
    """Let ``sys.stdout`` and ``sys.stderr`` write a character their encoding cannot show (``PYTHONIOENCODING=ascii``,
    a Latin-1 terminal) as an ASCII stand-in (``×`` → ``x``, ``µ`` → ``u``, ``≈`` → ``~``; others ``?``) instead of
    raising :class:`UnicodeEncodeError` mid-command: the character degrades, not the command (nor its exit code).
    Streams that can show every character are unchanged (the handler only runs on an encoding error); stderr's
    default ``backslashreplace`` is replaced too (``\u2248`` is no clearer than ``~``)."""
    import codecs

    try:
        codecs.lookup_error(DEGRADE)
    except LookupError:
        codecs.register_error(DEGRADE, _degrade)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        # (stderr's default handler is backslashreplace: progress lines read "\u2248 14 s", "183.9 \xb5s")
        if reconfigure is not None and (getattr(stream, "errors", None) or "strict") in ("strict", "backslashreplace"):
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors=DEGRADE)


@contextlib.contextmanager
def pipe_safe_streams() -> Iterator[tuple[PipeSafeStream, PipeSafeStream]]:
    """``sys.stdout`` and ``sys.stderr`` wrapped in :class:`PipeSafeStream` for the ``with`` block (restored
    after); yields ``(stdout, stderr)``. A closed stdout is noted once on stderr, a closed stderr is quiet."""
    saved_out, saved_err = sys.stdout, sys.stderr
    safe_out, safe_err = PipeSafeStream(saved_out, CLOSED_NOTE), PipeSafeStream(saved_err)
    sys.stdout, sys.stderr = safe_out, safe_err
    try:
        yield safe_out, safe_err
    finally:
        for safe in (safe_out, safe_err):
            with contextlib.suppress(BrokenPipeError):
                safe.flush()
        sys.stdout, sys.stderr = saved_out, saved_err


def internal_error(exc: BaseException) -> int:
    """One line on stderr for an exception no command expected (its type, message and where it was raised) and
    :data:`~spx.api.exit_codes.EXIT_INTERNAL` (70): an uncaught exception would exit 1, ``spx gate``'s Fail."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"error: spx stopped on an error no command expected (exit {EXIT_INTERNAL}, never a verdict; "
                         f"if it is not the machine's, e.g. out of memory, please report this line): "
                         f"{type(exc).__name__}: {str(exc)[:500]}{where}\n")
        sys.stderr.flush()
    return EXIT_INTERNAL
