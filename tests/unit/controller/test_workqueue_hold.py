"""The work queue holds follow-up work back while admission work is in flight (a burst of applies),
for at most ``hold_s`` seconds, and hands new urgent keys to a holding worker at once.

Real asyncio, no mocks; the waits are bounded generously and the assertions do not depend on how
fast the machine is (a held key is asserted *not yet* handed out only with a hold far longer than the
test, and asserted handed out after an event, not after a sleep).
"""

from __future__ import annotations

import asyncio

import pytest

from spx.controller.workqueue import WorkQueue

NEW = ("ns", "new")
NEWER = ("ns", "newer")
OLD = ("ns", "old")
LONG_HOLD_S = 3600.0  # longer than any test run: the holding ends on an event, never on this bound


async def _spin(n: int = 20) -> None:
    """Let every ready task run (no wall-clock wait)."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_follow_up_work_waits_until_the_admission_work_in_flight_is_done() -> None:
    async def scenario() -> None:
        q = WorkQueue(hold_s=LONG_HOLD_S)
        q.add(OLD)
        q.add(NEW, urgent=True)
        assert await q.get() == NEW  # admission first
        follow_up = asyncio.create_task(q.get())
        await _spin()
        assert not follow_up.done(), "follow-up work was handed out while a Job creation was in flight"
        q.done(NEW)
        assert await asyncio.wait_for(follow_up, 30) == OLD

    asyncio.run(scenario())


def test_a_new_experiment_goes_to_a_worker_that_holds_back_follow_up_work() -> None:
    async def scenario() -> None:
        q = WorkQueue(hold_s=LONG_HOLD_S)
        q.add(OLD)
        q.add(NEW, urgent=True)
        assert await q.get() == NEW
        held = asyncio.create_task(q.get())
        await _spin()
        assert not held.done()
        q.add(NEWER, urgent=True)  # arrives while the only idle worker holds back OLD
        assert await asyncio.wait_for(held, 30) == NEWER
        q.done(NEWER)
        q.done(NEW)
        assert await asyncio.wait_for(q.get(), 30) == OLD

    asyncio.run(scenario())


def test_the_holding_is_bounded_even_if_the_burst_goes_on() -> None:
    async def scenario() -> None:
        q = WorkQueue(hold_s=0.05)
        q.add(OLD)
        q.add(NEW, urgent=True)
        assert await q.get() == NEW  # and never done: the burst "goes on"
        assert await asyncio.wait_for(q.get(), 30) == OLD  # after at most hold_s, not never

    asyncio.run(scenario())


@pytest.mark.parametrize("hold_s", [0.0, LONG_HOLD_S])
def test_without_admission_work_in_flight_nothing_is_held(hold_s: float) -> None:
    async def scenario() -> None:
        q = WorkQueue(hold_s=hold_s)
        q.add(NEW, urgent=True)
        assert await q.get() == NEW
        q.done(NEW)  # the burst is over
        q.add(OLD)
        assert await asyncio.wait_for(q.get(), 30) == OLD

    asyncio.run(scenario())


def test_hold_zero_turns_the_holding_off() -> None:
    async def scenario() -> None:
        q = WorkQueue(hold_s=0)
        q.add(OLD)
        q.add(NEW, urgent=True)
        assert await q.get() == NEW
        assert await asyncio.wait_for(q.get(), 30) == OLD  # while NEW is still in flight

    asyncio.run(scenario())
