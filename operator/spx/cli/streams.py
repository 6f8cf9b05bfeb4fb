"""Standard output that a closed reader cannot turn into a failure (``spx run … | head -1``).

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises :class:`BrokenPipeError`
wherever it happens: in the middle of ``spx run``'s report, before ``status.json``'s plot is drawn,
or in the thread that streams ``--jsonl`` points. :func:`pipe_safe_stdout` wraps ``sys.stdout`` for
the command's lifetime: on the first broken pipe it points file descriptor 1 at ``/dev/null`` (the
fix the Python documentation gives for SIGPIPE, "Note on SIGPIPE" in the ``signal`` module's docs, so
that the interpreter's last flush at exit cannot fail either), says so once on stderr, and drops the
rest of the output. The command goes on and exits with the code of what it did.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

#: The one line on stderr when stdout's reader has gone.
CLOSED_NOTE = "spx: stdout was closed by its reader (broken pipe); the rest of the output is dropped, the command goes on"


class PipeSafeStdout:
    """A text stream over ``stream`` whose writes and flushes never raise :class:`BrokenPipeError`.

    Every other attribute (``isatty``, ``encoding``, ``fileno``…) is ``stream``'s, so rich and
    ``json`` see the real stream. ``broken`` turns true on the first broken pipe.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def _closed_reader(self) -> None:
        if self.broken:
            return
        self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(CLOSED_NOTE + "\n")
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


@contextlib.contextmanager
def pipe_safe_stdout() -> Iterator[PipeSafeStdout]:
    """``sys.stdout`` wrapped in :class:`PipeSafeStdout` for the ``with`` block (restored after)."""
    saved = sys.stdout
    safe = PipeSafeStdout(saved)
    sys.stdout = safe
    try:
        yield safe
    finally:
        with contextlib.suppress(BrokenPipeError):
            safe.flush()
        sys.stdout = saved
