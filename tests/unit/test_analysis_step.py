"""spx.analysis.step: the one-server step A/B's curve, expectation over the batch mix, stopping rule and usability.

The step results are synthetic (``benchmarks/step_power.py``'s generator: seeded latencies with a known effect per
arm) — a stand-in for a server's timings, which a test cannot depend on; the analysis is the shipped one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from spx.analysis.step import arms, default_lengths, stop_reason
from spx.analysis.step_stats import excludes_band, interval_level, looks, outcome
from spx.api.step import StepResult, StepSpec

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("step_power", ROOT / "benchmarks" / "step_power.py")
assert _spec is not None and _spec.loader is not None
power = importlib.util.module_from_spec(_spec)
sys.modules["step_power"] = power  # dataclasses look their module up
_spec.loader.exec_module(power)

T, TP, MAXB = 2048, 8, 8192
SHORT = [2048, 2049, 4096, 4097]  # a short curve: fast summaries


def _result(effect: float = -0.8, *, rounds: int = 40, noise: float = 0.3, lengths: list[int] | None = None,
            seed: int = 1, spec: dict[str, Any] | None = None, arm_effects: dict[str, float] | None = None) -> StepResult:
    sc = power.Scenario("t", effect, noise_ms=noise)
    st = StepSpec(**{"rounds": max(rounds, 8), "min_rounds": min(40, max(rounds, 8)), "look_every": 40, "seed": seed,
                     **(spec or {})})
    return power.synthetic_result(sc, seed, rounds=rounds, spec=st, lengths=lengths or SHORT, arm_effects=arm_effects)


# --------------------------------------------------------------------------- lengths and arms


@pytest.mark.parametrize(("t", "tp", "maxb", "extra", "expected"), [
    (2048, 8, 8192, (), [1024, 1025, 2048, 2049, 4096, 4097, 8191, 8192]),
    (2048, 1, 8192, (), [1024, 2048, 4096, 8192]),                       # TP 1: no pad path
    (2048, 8, 3001, (), [1024, 1025, 2048, 2049, 3000, 3001]),            # never above max_num_batched_tokens
    (2048, 8, 8192, (3072,), [1024, 1025, 2048, 2049, 3072, 3073, 4096, 4097, 8191, 8192]),
    (8192, 8, 2048, (), [2048, 2047]),                                    # T above what the deployment forms
])
def test_default_lengths(t: int, tp: int, maxb: int, extra: tuple[int, ...], expected: list[int]) -> None:
    assert default_lengths(t, tp, maxb, extra) == sorted(expected)
    assert max(default_lengths(t, tp, maxb, extra)) <= maxb


def test_default_lengths_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="TP and max_num_batched_tokens"):
        default_lengths(2048, 0, 8192)


@pytest.mark.parametrize(("pad_free", "expected"), [
    (True, ["replicated", "split", "pad-free", "aa", "positive-control"]),
    (False, ["replicated", "split", "aa", "positive-control"]),
])
def test_arms(pad_free: bool, expected: list[str]) -> None:
    assert arms(StepSpec(pad_free=pad_free)) == expected


# --------------------------------------------------------------------------- stopping rule


@pytest.mark.parametrize(("min_rounds", "every", "rounds", "k", "level"), [
    (40, 40, 200, 5, 0.99),
    (40, 40, 40, 1, 0.95),
    (40, 30, 200, 7, 1 - 0.05 / 7),
    (50, 40, 200, 5, 0.99),      # 50, 90, 130, 170, 200
])
def test_looks_and_the_bonferroni_level(min_rounds: int, every: int, rounds: int, k: int, level: float) -> None:
    spec = StepSpec(min_rounds=min_rounds, look_every=every, rounds=rounds)
    assert looks(spec) == k and interval_level(spec) == pytest.approx(level)


@pytest.mark.parametrize(("low", "high", "band", "resolved", "out"), [
    (-1.0, -0.5, 0.2, True, "gain"),
    (0.3, 0.9, 0.2, True, "loss"),
    (-0.1, 0.1, 0.2, True, "indifferent"),     # resolved within the band
    (-1.0, -0.1, 0.2, False, "gain"),          # reaches −δ: not resolved, though a gain
    (-0.5, 0.5, 0.2, False, "indifferent"),
    (-0.5, -0.1, 0.0, True, "gain"),
])
def test_the_band_and_the_outcome_are_symmetric(low: float, high: float, band: float, resolved: bool, out: str) -> None:
    assert excludes_band(low, high, band) is resolved and outcome(low, high) == out
    assert excludes_band(-high, -low, band) is resolved  # a loss needs what a gain needs


def test_stop_reason_resolves_a_clear_gain_and_goes_on_otherwise() -> None:
    clear = _result(-0.8, rounds=40)
    why = stop_reason(clear, 100.0)
    assert why is not None and why.startswith("resolved:") and "from T=2048" in why
    assert stop_reason(_result(0.0, rounds=40, noise=3.0, spec={"rounds": 200}), 100.0) is None


@pytest.mark.parametrize(("rounds", "budget", "elapsed", "starts"), [
    (40, None, 10.0, "rounds:"),      # the budget in rounds is spent
    (16, 600, 700.0, "budget:"),      # the wall-clock budget is spent
    (16, 600, 450.0, "budget:"),      # the next block would overrun it at this pace
    (16, 6000, 400.0, None),          # too early for a look, budget left: go on
])
def test_stop_reason_budget_and_rounds(rounds: int, budget: int | None, elapsed: float, starts: str | None) -> None:
    r = _result(0.0, rounds=rounds, noise=3.0,
                spec={"rounds": 40, "min_rounds": 40, "budget_seconds": budget, "look_every": 8})
    why = stop_reason(r, elapsed)
    assert (why is None) if starts is None else (why is not None and why.startswith(starts))
