"""spx.analysis.step: the step A/B's difference in differences, its interval, outcome, regime and refusals."""

from __future__ import annotations

import random

import pytest

from spx.analysis.step import (
    base_length,
    bootstrap_interval,
    did,
    kernel_deltas,
    lengths,
    outcome,
    quantile,
    regime,
    round_differences,
    summarize,
)
from spx.api.status import KernelPoint, KernelStatus
from spx.api.step import StepRequest, StepResult, StepServerRun, StepSpec

T = 2048
TP = 8


def _server(name: str, role: str, t: int, extra_ms: dict[str, float], *, rounds: int = 40, seed: int = 1,
            noise_ms: float = 0.3, per_token_ms: float = 0.01) -> StepServerRun:
    """A server whose latency is 30 ms + per-token cost + the role's extra + Gaussian noise per request."""
    rng = random.Random(seed)
    reqs: list[StepRequest] = []
    for r in range(rounds):
        drift = 5.0 * r / rounds  # a slow drift within the server: the within-round difference cancels it
        for order, (role_, n) in enumerate(lengths(t, TP, True).items()):
            ms = 30.0 + drift + per_token_ms * n + extra_ms.get(role_, 0.0) + rng.gauss(0, noise_ms)
            reqs.append(StepRequest(threshold_tokens=t, round=r, order=order, role=role_, length=n, prompt_tokens=n,
                                    latency_ms=ms))
    return StepServerRun(name=name, role=role, threshold="off" if role != "treated" else str(t),  # type: ignore[arg-type]
                         threshold_tokens=t, requests=reqs)


def _result(*servers: StepServerRun, device: str = "cuda", positive: bool = False) -> StepResult:
    return StepResult(step=StepSpec(layers=40, seed=3, positive_control=positive), tensor_parallel_size=TP,
                      thresholds=[T], device=device, servers=list(servers), complete=True)


def test_lengths_are_base_split_pad() -> None:
    assert lengths(T, TP, True) == {"base": T - TP, "split": T, "pad": T + 1}
    assert lengths(3072, 8, False) == {"base": 3064, "split": 3072}
    with pytest.raises(ValueError, match="T − TP"):
        base_length(8, 8)


@pytest.mark.parametrize(("low", "high", "expected"), [
    (-2.0, -0.5, "gain"), (0.5, 2.0, "loss"), (-0.5, 0.5, "indifferent"), (0.0, 1.0, "indifferent"),
])
def test_outcome(low: float, high: float, expected: str) -> None:
    assert outcome(low, high) == expected


@pytest.mark.parametrize(("effect", "low", "high", "gpu", "host", "expected"), [
    (-40.0, -45.0, -35.0, -41.0, 50.0, "gpu-bound"),  # the GPU-bound queue: Δg
    (48.0, 40.0, 55.0, -41.0, 50.0, "host-bound"),  # the host-bound queue: Δh
    (5.0, 0.0, 10.0, -41.0, 50.0, "between"),  # the pivot
    (0.0, -60.0, 60.0, -41.0, 50.0, "undetermined"),  # too wide to tell
    (90.0, 80.0, 100.0, -41.0, 50.0, "host-bound"),  # beyond Δh: the nearer regime
    (-80.0, -90.0, -70.0, -41.0, 50.0, "gpu-bound"),  # beyond Δg
    (-40.0, -45.0, -35.0, None, 50.0, "undetermined"),  # no kernel figure to compare with
])
def test_regime(effect: float, low: float, high: float, gpu: float | None, host: float | None, expected: str) -> None:
    assert regime(effect, low, high, gpu, host) == expected


def test_did_and_bootstrap_recover_a_known_effect() -> None:
    rng = random.Random(0)
    # (base, L) per round: L costs 1 ms more (its extra tokens) on both servers, + 2 ms of split on the treated one
    treated = [(b, b + 1.0 + 2.0 + rng.gauss(0, 0.3)) for b in (30 + rng.gauss(0, 0.3) for _ in range(40))]
    control = [(b, b + 1.0 + rng.gauss(0, 0.3)) for b in (30 + rng.gauss(0, 0.3) for _ in range(40))]
    assert did(treated, control) == pytest.approx(2.0, abs=0.3)
    lo, hi = bootstrap_interval(treated, control, seed=1)
    assert 1.4 < lo < 2.0 < hi < 2.6
    assert bootstrap_interval(treated, control, seed=1) == (lo, hi)  # seeded


def test_a_low_quantile_sees_through_interference_that_only_adds_time() -> None:
    """A shared host: 60 % of the requests are slowed by 5–80 ms at random. The medians drown a 2 ms effect;
    the 0.05-quantile finds it (the design's answer for the loaded CPU stage)."""
    rng = random.Random(2)

    def lat(ms: float) -> float:
        return ms + rng.gauss(0, 0.05) + (rng.uniform(5, 80) if rng.random() < 0.6 else 0.0)

    treated = [(lat(30.0), lat(30.0 + 1.0 + 2.0)) for _ in range(100)]
    control = [(lat(30.0), lat(30.0 + 1.0)) for _ in range(100)]
    lo, hi = bootstrap_interval(treated, control, seed=3, q=0.05)
    assert 0 < lo < 2.0 < hi and did(treated, control, 0.05) == pytest.approx(2.0, abs=0.5)
    lo_med, hi_med = bootstrap_interval(treated, control, seed=3, q=0.5)
    assert hi_med - lo_med > 3 * (hi - lo)


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([3.0, 1.0, 2.0], 0.5, 2.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5), ([0.0, 10.0], 0.05, 0.5), ([7.0], 0.05, 7.0),
])
def test_quantile_is_type_7(values: list[float], q: float, expected: float) -> None:
    assert quantile(values, q) == pytest.approx(expected)


def test_a_known_step_effect_is_found_per_layer_with_its_regime() -> None:
    treated = _server("treated-T2048", "treated", T, {"split": -1.6, "pad": -1.5})  # −40 µs per layer × 40
    control = _server("control", "control", T, {}, seed=2)
    table = {T: (-41.0, 50.0), T + 1: (-41.0, 50.0)}
    status = summarize(_result(control, treated), kernel_deltas=table)
    split = next(e for e in status.effects if e.role == "split")
    assert split.length == T and split.base_length == T - TP and split.rounds == 40 and split.control_rounds == 40
    assert split.effect_ms == pytest.approx(-1.6, abs=0.3)
    assert split.per_layer_us == pytest.approx(split.effect_ms * 1000 / 40)
    assert split.effect_low_ms <= split.effect_ms <= split.effect_high_ms
    assert (split.outcome, split.regime) == ("gain", "gpu-bound")
    assert status.complete and not status.cpu_timings and status.failures == []
    assert "a gain beyond its interval" in status.reasons[0] and "gpu-bound" in status.reasons[0]


def test_an_aa_run_covers_zero_and_says_so() -> None:
    status = summarize(_result(_server("control", "control", T, {}, seed=4),
                               _server("treated-T2048", "treated", T, {}, seed=5), device="cpu"))
    assert {e.outcome for e in status.effects} == {"indifferent"}
    assert all(e.effect_low_ms <= 0 <= e.effect_high_ms for e in status.effects)
    assert status.cpu_timings and status.reasons[0].startswith("CPU servers")
    assert all("no effect distinguishable from 0" in r for r in status.reasons[1:])


def test_a_positive_control_is_kept_apart_and_its_miss_is_said_first() -> None:
    control = _server("control", "control", T, {}, seed=6)
    treated = _server("treated-T2048", "treated", T, {}, seed=7)
    detected = _server("positive-control-T2048", "positive-control", T, {"pad": 2.0}, seed=8)
    status = summarize(_result(control, treated, detected, positive=True))
    assert [e.server for e in status.positive_controls] == ["positive-control-T2048"] * 2
    assert [e.server for e in status.effects] == ["treated-T2048"] * 2
    pad = next(e for e in status.positive_controls if e.role == "pad")
    assert pad.outcome == "loss" and any("detected" in r for r in status.reasons)
    missed = _server("positive-control-T2048", "positive-control", T, {"pad": 0.0}, seed=8)
    status = summarize(_result(control, treated, missed, positive=True))
    assert status.reasons[0].startswith("the positive control was not detected")


def test_a_wrong_token_count_is_a_named_measurement_error_and_its_round_is_dropped() -> None:
    control = _server("control", "control", T, {}, seed=9)
    treated = _server("treated-T2048", "treated", T, {}, seed=10)
    treated.requests[0] = treated.requests[0].model_copy(update={"prompt_tokens": treated.requests[0].length + 1})
    bad_round, bad_role = treated.requests[0].round, treated.requests[0].role
    rounds = round_differences(treated, T, "split")
    assert len(rounds.diffs_ms) == 39
    assert "measurement error" in rounds.refused[0] and f"round {bad_round} {bad_role}" in rounds.refused[0]
    status = summarize(_result(control, treated))
    assert not status.complete and any("the server counted" in f for f in status.failures)


def test_too_few_rounds_or_no_control_give_no_effect_and_say_why() -> None:
    status = summarize(_result(_server("treated-T2048", "treated", T, {})))
    assert status.effects == [] and "no control server" in status.failures[0]
    short = _server("control", "control", T, {}, rounds=3)
    status = summarize(_result(short, _server("treated-T2048", "treated", T, {})))
    assert status.effects == [] and any("at least 5 each" in f for f in status.failures)


def test_kernel_deltas_interpolate_gpu_and_host_differences() -> None:
    def kp(tokens: int, rep: float, split: float, rep_h: float, split_h: float) -> KernelPoint:
        return KernelPoint(tokens=tokens, rows_per_rank=tokens // 8, replicated_us=rep, split_us=split,
                           speedup=rep / split, replicated_host_us=rep_h, split_host_us=split_h)

    kernel = KernelStatus(points=[kp(2048, 100.0, 80.0, 70.0, 120.0), kp(4096, 200.0, 140.0, 70.0, 130.0)])
    at = kernel_deltas(kernel)
    assert at is not None
    assert at(2048) == (pytest.approx(-20.0), pytest.approx(50.0))
    assert at(3072) == (pytest.approx(-40.0), pytest.approx(55.0))
    assert at(8192) == (None, None)
    assert kernel_deltas(None) is None
