"""Progress of ``spx run``: a rich bar on a terminal, one plain line per point on stderr otherwise.

Both implement :class:`spx.runner.local.RunProgress`; the runner calls them from its tail thread.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from rich.console import Console

from spx.api import PointResult
from spx.runner.sizing import RunEstimate


def _point_text(p: PointResult) -> str:
    rep, split = p.replicated.median_us, p.split.median_us
    return f"tokens={p.tokens}: replicated {rep:.1f} µs, split {split:.1f} µs, speedup {rep / split:.2f}×"


class LineProgress:
    """``spx: [3/11] tokens=48: replicated 12.3 µs, split 10.1 µs, speedup 1.22× (14 s)`` per point."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = 0
        self.done = 0
        self.added = 0
        self.t0 = time.monotonic()

    def _say(self, text: str) -> None:
        self.stream.write(f"spx: {text}\n")
        self.stream.flush()

    def start(self, total: int, nproc: int, device: str, estimate: RunEstimate | None, added: int = 0) -> None:
        """Print the start line (ranks, device, the listed token counts and those sweep.refine may add, the estimate)."""
        self.total, self.t0 = total, time.monotonic()
        est = f"; estimate {estimate.describe(nproc)}" if estimate is not None else ""
        more = f" (+ up to {added} added by sweep.refine)" if added else ""
        self._say(f"starting {nproc} {device} rank(s) for {total} token count{'' if total == 1 else 's'}{more}{est}")

    def point(self, point: PointResult) -> None:
        """Print one point's line: ``[i/N]`` for a listed count, ``[+i sweep.refine]`` for one the sweep added."""
        if point.added_because is not None:
            self.added += 1
            where = f"+{self.added} sweep.refine"
        else:
            self.done += 1
            where = f"{self.done}/{self.total}"
        self._say(f"[{where}] {_point_text(point)} ({time.monotonic() - self.t0:.0f} s)")

    def stop(self) -> None:
        """Print nothing: the report follows."""


class BarProgress:
    """A rich progress bar over the points (terminals)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: Any = None
        self.task: Any = None

    def start(self, total: int, nproc: int, device: str, estimate: RunEstimate | None, added: int = 0) -> None:
        """Draw the bar over the ``total`` listed counts (one a sweep adds, of up to ``added``, widens it); print the
        estimate above it."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        if estimate is not None:
            self.console.print(f"estimate: {estimate.describe(nproc)}", highlight=False, markup=False)
        self.bar = Progress(SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=self.console, transient=False)
        self.bar.start()
        self.task = self.bar.add_task(f"starting {nproc} {device} ranks", total=total)

    def point(self, point: PointResult) -> None:
        """Advance the bar."""
        if self.bar is not None:
            if point.added_because is not None:  # (an adaptive sweep's own count)
                self.bar.update(self.task, total=self.bar.tasks[0].total + 1)
            self.bar.update(self.task, advance=1, description=f"tokens={point.tokens} done")

    def stop(self) -> None:
        """Remove the live display."""
        if self.bar is not None:
            self.bar.stop()


def progress_for(console: Console) -> LineProgress | BarProgress:
    """A bar when ``console`` is a terminal, else progress lines on stderr."""
    return BarProgress(console) if console.is_terminal else LineProgress()
