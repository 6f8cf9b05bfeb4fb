"""spx.bench.timing: the timers are generic over a dict of launch functions (CPU: the host timer)."""

from __future__ import annotations

from spx.bench.timing import alternating, time_host


def test_alternating_reverses_every_other_round() -> None:
    assert list(alternating(["a", "b"], 3)) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]


def test_time_host_times_each_launch_after_its_prepare() -> None:
    calls: list[str] = []
    launches = {"x": lambda: calls.append("x"), "y": lambda: calls.append("y"), "z": lambda: sum(range(10_000))}
    out = time_host(launches, 4, prepare=lambda: calls.append("prep"))
    assert set(out) == {"x", "y", "z"} and all(len(v) == 4 for v in out.values())
    assert all(t > 0 for v in out.values() for t in v)
    assert calls[:4] == ["prep", "x", "prep", "y"]
