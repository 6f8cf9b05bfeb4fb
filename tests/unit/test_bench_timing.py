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


def test_bench_time_checks_before_timing_and_returns_both_times_on_cpu() -> None:
    """CPU mode of the one timer: the correctness check sees every output first; span and host per sample."""
    import pytest

    torch = pytest.importorskip("torch")
    from spx.bench.timing import TimingProtocol, bench_time

    events: list[str] = []
    x = torch.ones(4, 4)

    def a() -> object:
        events.append("a")
        return x * 2

    def b() -> object:
        events.append("b")
        return x * 3

    def check(outputs: dict) -> None:
        events.append("check")
        assert set(outputs) == {"a", "b"} and float(outputs["b"].sum()) == 48.0

    timing = bench_time({"a": a, "b": b}, TimingProtocol(mode="host", timer="host", samples=5, warmup=2), check)
    assert events[:3] == ["a", "b", "check"]  # one correctness run, then the check, then warm-up and samples
    assert len(events) == 3 + 2 * 2 + 2 * 5
    for name in ("a", "b"):
        assert len(timing.span_us[name]) == 5 and timing.host_us[name] == timing.span_us[name]
        assert timing.gather_us[name] == [0.0] * 5


def test_bench_time_stops_when_the_check_fails() -> None:
    import pytest

    torch = pytest.importorskip("torch")
    from spx.bench.timing import TimingProtocol, bench_time

    calls: list[int] = []

    def fn() -> object:
        calls.append(1)
        return torch.zeros(1)

    def bad(outputs: dict) -> None:
        raise RuntimeError("outputs differ")

    with pytest.raises(RuntimeError, match="outputs differ"):
        bench_time({"f": fn}, TimingProtocol(mode="host", timer="host", samples=5, warmup=3), bad)
    assert calls == [1]  # nothing timed after a failed check
