"""Give the heap a burst freed back to the operating system (glibc's ``malloc_trim``).

After a burst (hundreds of experiments admitted, decided, their watch events decoded, their API
connections' TLS buffers of 256 KiB each released) CPython has freed the objects, but glibc keeps
the freed chunks inside its heap, so the resident size stays at the burst's high-water mark:
measured after 500 experiments (``benchmarks/operator_scale.py``), ``malloc_trim(0)`` returned 26 MiB
of a 205 MiB resident set, with nothing live freed. CPython never calls it itself; Dask's workers
solve the same "unmanaged memory" this way (distributed docs, "Worker memory management").

:class:`Trimmer` trims when the reactor's work queue has drained, at most once per ``interval_s``.
Elsewhere than glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

logger = logging.getLogger("spx.controller.memory")


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class Trimmer:
    """Calls ``malloc_trim(0)`` on :meth:`idle`, at most once per ``interval_s`` seconds (a later call
    within the interval schedules one at its end)."""

    def __init__(self, interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._trim = _malloc_trim()
        self._last = float("-inf")
        self._pending: asyncio.TimerHandle | None = None
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def idle(self) -> None:
        """The work queue drained: trim now, or at the end of the current interval."""
        if self._trim is None or self._pending is not None:
            return
        wait = self._last + self.interval_s - self._clock()
        if wait <= 0:
            self.trim()
        else:
            self._pending = asyncio.get_running_loop().call_later(wait, self.trim)

    def trim(self) -> None:
        self._pending = None
        self._last = self._clock()
        if self._trim is not None:
            self._trim(0)
            self.trims += 1

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
