"""The heap trimmer (spx.controller.memory): glibc's real malloc_trim, at most once per interval."""

from __future__ import annotations

import asyncio

import pytest

from spx.controller.memory import Trimmer


def test_trims_when_idle_at_most_once_per_interval() -> None:
    now = [100.0]
    t = Trimmer(interval_s=0.5, clock=lambda: now[0])
    if not t.available:
        pytest.skip("no glibc malloc_trim on this platform (the trimmer is a no-op there)")

    async def scenario() -> list[int]:
        seen = []
        t.idle()                      # first drain: at once
        seen.append(t.trims)
        now[0] += 0.1
        t.idle()                      # within the interval: scheduled for its end, not now
        t.idle()                      # (once)
        seen.append(t.trims)
        await asyncio.sleep(0.5)      # the trim scheduled for the interval's end (0.4 s) ran first
        seen.append(t.trims)
        now[0] += 1.0
        t.idle()
        seen.append(t.trims)
        t.close()
        return seen

    assert asyncio.run(scenario()) == [1, 1, 2, 3]
