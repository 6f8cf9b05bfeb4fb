"""spx.analysis.step: the one-server step A/B's curve, expectation over the batch mix, stopping rule and usability.

The step results are synthetic (``benchmarks/step_power.py``'s generator: seeded latencies with a known effect per
arm) — a stand-in for a server's timings, which a test cannot depend on; the analysis is the shipped one.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from spx.analysis.step import arms, default_lengths, kernel_deltas, stop_reason, summarize
from spx.analysis.step_mix import break_even, expectation_weights, interpolation_weights, local_mix_weights
from spx.analysis.step_rounds import paired_rounds
from spx.analysis.step_stats import excludes_band, interval_level, looks, outcome
from spx.api.status import KernelPoint, KernelStatus
from spx.api.step import BatchMixBucket, StepResult, StepSpec

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
    r = power.synthetic_result(sc, seed, rounds=rounds, spec=st, lengths=lengths or SHORT, arm_effects=arm_effects)
    # the deployment's largest batch is the curve's top: the expectation never extrapolates beyond it
    return r.model_copy(update={"max_num_batched_tokens": max(lengths or SHORT)})


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


# --------------------------------------------------------------------------- the batch mix


def _brute_force(lengths: list[int], effects: dict[int, float], tp: int, t: int, maxb: int,
                 weight: Any = lambda m: 1.0) -> tuple[float, float]:
    """The expectation and the pad-path share by a loop over every batch size (the closed form's oracle)."""
    al, off = sorted(x for x in lengths if x % tp == 0), sorted(x for x in lengths if x % tp)
    total = pad = acc = 0.0
    for m in range(t, maxb + 1):
        w = weight(m)
        cls = al if m % tp == 0 else off
        acc += w * sum(c * effects[x] for x, c in interpolation_weights(cls, m).items())
        total += w
        pad += w if m % tp else 0.0
    return acc / total, pad / total


def test_seven_in_eight_sizes_take_the_pad_path_at_tp8() -> None:
    w = expectation_weights([2048, 2049, 4096, 4097, 8191, 8192], 8, 2048, 8192)
    assert w.mix == "uniform"
    assert w.pad_path_share == pytest.approx(5376 / 6145)  # 769 aligned of the 6145 sizes 2048…8192
    assert w.pad_path_share == pytest.approx(7 / 8, abs=2e-4)
    assert sum(w.coefficients.values()) == pytest.approx(1.0)
    # a flat aligned curve a and a flat pad-path curve o: the expectation weighs them (TP−1)/TP vs 1/TP
    effects = {x: (-1.0 if x % 8 == 0 else 0.5) for x in w.coefficients}
    assert w.combine(effects) == pytest.approx((769 * -1.0 + 5376 * 0.5) / 6145)


@pytest.mark.parametrize(("lengths", "tp", "t", "maxb"), [
    ([1024, 1025, 2048, 2049, 4096, 4097, 8191, 8192], 8, 2048, 8192),
    ([2048, 2049, 3000, 3001], 8, 2100, 3001),      # T between measured lengths, max not aligned
    ([512, 2048, 4096], 1, 1000, 4096),              # TP 1: one class
    ([1024, 1027, 2048, 2051], 4, 1500, 2051),
])
def test_the_closed_form_matches_a_loop_over_every_size(lengths: list[int], tp: int, t: int, maxb: int) -> None:
    effects = {x: math.sin(x / 700.0) for x in lengths}
    w = expectation_weights(lengths, tp, t, maxb)
    exp, pad = _brute_force(lengths, effects, tp, t, maxb)
    assert w.combine(effects) == pytest.approx(exp, abs=1e-9) and w.pad_path_share == pytest.approx(pad, abs=1e-12)


def test_a_given_batch_mix_weighs_its_buckets() -> None:
    lengths = [2048, 2049, 4096, 4097, 8191, 8192]
    effects = {x: x / 1000.0 for x in lengths}
    buckets = [BatchMixBucket(le=1024, weight=50), BatchMixBucket(le=4096, weight=30),
               BatchMixBucket(le=16384, weight=20)]  # the last bucket reaches above max_num_batched_tokens: clipped
    w = expectation_weights(lengths, 8, 2048, 8192, buckets)

    def weight(m: int) -> float:
        return 30 / (4096 - 1024) if m <= 4096 else 20 / (16384 - 4096)

    exp, pad = _brute_force(lengths, effects, 8, 2048, 8192, weight)
    assert w.mix == "given" and w.combine(effects) == pytest.approx(exp) and w.pad_path_share == pytest.approx(pad)


@pytest.mark.parametrize(("lengths", "t", "maxb", "buckets", "match"), [
    ([2048, 4096, 8192], 2048, 8192, [], r"off-aligned .* lengths \[\] do not cover the batch sizes 2049…8191"),
    ([2048, 2049, 4096, 4097], 2048, 8192, [], r"aligned .* lengths \[2048, 4096\] do not cover .* 2048…8192"),
    ([2048, 2049], 9000, 8192, [], "nothing at or above this threshold"),
    ([2048, 2049], 2048, 8192, [BatchMixBucket(le=1024, weight=1)], "carries weight"),
])
def test_an_expectation_that_cannot_be_formed_says_why(lengths: list[int], t: int, maxb: int,
                                                       buckets: list[BatchMixBucket], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        expectation_weights(lengths, 8, t, maxb, buckets)


@pytest.mark.parametrize(("xs", "ys", "expected"), [
    ([1024, 2048, 4096], [0.5, -0.5, -1.0], 1536.0),
    ([1024, 2048, 4096], [0.5, -0.5, 0.2], None),         # a loss at the largest: never a gain from anywhere
    ([1024, 2048, 4096], [-0.5, -0.5, -1.0], None),       # a gain everywhere: no crossing measured
    ([1024, 2048, 4096, 8192], [-0.1, 0.3, -0.1, -0.3], 2048 + 2048 * 0.75),  # the last crossing counts
])
def test_break_even(xs: list[int], ys: list[float], expected: float | None) -> None:
    assert break_even(xs, ys) == (None if expected is None else pytest.approx(expected))


def test_local_mix_weights_take_one_in_tp_from_the_aligned_curve() -> None:
    w = local_mix_weights([2048, 2049, 4096, 4097], 8, 3072)
    assert w == pytest.approx({2048: 0.5 / 8, 4096: 0.5 / 8, 2049: 7 / 8 * 1025 / 2048, 4097: 7 / 8 * 1023 / 2048})
    assert local_mix_weights([2048, 4096], 1, 3072) == pytest.approx({2048: 0.5, 4096: 0.5})


# --------------------------------------------------------------------------- the summary


def test_the_summary_recovers_the_curve_per_layer_with_its_regime() -> None:
    kernel = KernelStatus(points=[
        KernelPoint(tokens=t, rows_per_rank=t // 8, replicated_us=100.0, split_us=80.0, speedup=1.25,
                    gpu_delta_us=-20.0, host_delta_us=+15.0) for t in (1024, 8192)])
    r = _result(-0.8, rounds=40, arm_effects={"pad-free": -0.4})
    st = summarize(r, kernel)
    split = [p for p in st.points if p.arm == "split"]
    assert [p.length for p in split] == SHORT and [p.aligned for p in split] == [True, False, True, False]
    for p in st.points:
        truth = -0.8 if p.arm == "split" else -0.4
        assert p.effect_low_ms <= truth <= p.effect_high_ms and p.outcome == "gain" and p.rounds == 40
        assert p.per_layer_us == pytest.approx(p.effect_ms * 1000 / 40)
    # −0.8 ms over 40 layers = −20 µs per layer = Δg: GPU-bound (the interval covers Δg, not Δh)
    assert {p.regime for p in split} == {"gpu-bound"} and split[0].kernel_gpu_us == pytest.approx(-20.0)
    assert {p.regime for p in st.points if p.arm == "pad-free"} == {"undetermined"}  # no kernel Δ for pad-free
    gated = st.expectations[0]
    assert (gated.threshold_tokens, gated.arm, gated.outcome) == (2048, "split", "gain")
    assert gated.effect_low_ms <= -0.8 <= gated.effect_high_ms
    assert gated.pad_path_share == pytest.approx(1793 / 2050)  # sizes 2048…4097 (max_num_batched_tokens 4097 here)
    assert [(e.threshold_tokens, e.arm) for e in st.expectations] == [(2048, "split"), (2048, "pad-free")]
    assert st.usable and st.unusable_reasons == [] and st.interval_level == pytest.approx(0.95) and st.looks == 1
    assert st.recommended_threshold_tokens == 2048
    assert st.reasons[0].startswith("vLLM's split (sp_shard) from T=2,048")


def test_a_break_even_and_a_recommended_threshold_from_a_curve_that_crosses() -> None:
    lengths = [1024, 1025, 2048, 2049, 4096, 4097, 8191, 8192]
    r = _result(0.0, rounds=40, lengths=lengths)
    truth = {1024: 1.5, 1025: 1.5, 2048: 0.5, 2049: 0.5, 4096: -1.5, 4097: -1.5, 8191: -3.0, 8192: -3.0}
    reqs = [q.model_copy(update={"latency_ms": q.latency_ms + truth[q.length]}) if q.arm == "split" and q.latency_ms
            else q for q in r.requests]
    st = summarize(r.model_copy(update={"requests": reqs}))
    assert st.break_even_tokens is not None and 2048 < st.break_even_tokens < 4096
    assert st.recommended_threshold_tokens in (2048, 2049, 4096)


def test_a_summary_of_no_rounds_is_unusable_and_says_why() -> None:
    r = _result(rounds=40).model_copy(update={"requests": [], "switches": [], "rounds_done": 0,
                                              "failures": ["the server died while loading (exit 1)"]})
    st = summarize(r)
    assert not st.usable and st.points == [] and st.expectations == []
    assert st.unusable_reasons[0].startswith("the server died or the rounds stopped early: 0 of at least 40 rounds")
    assert "exit 1" in st.unusable_reasons[0]


def test_kernel_deltas_interpolate_gpu_and_host_differences() -> None:
    k = KernelStatus(points=[
        KernelPoint(tokens=1024, rows_per_rank=128, replicated_us=100, split_us=90, speedup=1.1, gpu_delta_us=-10,
                    host_delta_us=4),
        KernelPoint(tokens=2048, rows_per_rank=256, replicated_us=200, split_us=170, speedup=1.2,
                    replicated_host_us=50, split_host_us=58)])
    at = kernel_deltas(k)
    assert at is not None and at(1536) == pytest.approx((-20.0, 6.0)) and at(4096) == (None, None)
    assert kernel_deltas(None) is None


# --------------------------------------------------------------------------- usable, each reason


def _bad(r: StepResult, arm: str, length: int, rnd: int, **update: Any) -> StepResult:
    reqs = [q.model_copy(update=update) if (q.arm, q.length, q.round) == (arm, length, rnd) else q for q in r.requests]
    return r.model_copy(update={"requests": reqs})


def _switch_off(r: StepResult, i: int) -> StepResult:
    sw = list(r.switches)
    sw[i] = sw[i].model_copy(update={"confirmed": False})
    return r.model_copy(update={"switches": sw})


CLEAN = None


def _clean() -> StepResult:
    global CLEAN
    if CLEAN is None:
        CLEAN = _result(-0.8, rounds=40)
    return CLEAN


@pytest.mark.parametrize(("mutate", "kwargs", "first"), [
    (lambda r: r.model_copy(update={"requests": [q for q in r.requests if q.round < 20], "rounds_done": 20,
                                    "failures": ["the server exited with 137"]}), {},
     "the server died or the rounds stopped early: 20 of at least 40 rounds (the server exited with 137)"),
    (lambda r: _switch_off(r, 7), {}, "the switch is not confirmed: 1 switch(es)"),
    (lambda r: _bad(r, "split", 2049, 3, confirmed=False), {}, "the switch is not confirmed: 0 switch(es) not "
     "answered by every worker, 0 request(s) sent under a switch that does not confirm their arm, 1 forward(s)"),
    (lambda r: r.model_copy(update={"server": r.server.model_copy(update={"extension_confirmed": False})}), {},
     "the switch is not confirmed"),
    (lambda r: _bad(r, "replicated", 2048, 5, prompt_tokens=2049), {}, "1 request(s) whose prompt_tokens differ"),
    (lambda r: r.model_copy(update={"requests": [q for q in r.requests if q.arm != "positive-control"]}), {},
     "the positive control never ran"),
    (lambda r: _result(-0.8, rounds=40, arm_effects={"positive-control": 3.0}), {}, "the positive control failed"),
    (lambda r: _result(-0.8, rounds=40, arm_effects={"aa": 1.0}), {}, "the A/A failed"),
    (lambda r: r.model_copy(update={"device": "cpu"}), {}, "CPU server"),
    (lambda r: r, {"experiment": "other"}, "another experiment's step result ('local', not 'other')"),
    (lambda r: r.model_copy(update={"spec_hash": "abc"}), {"spec_hash": "def"}, "another spec's step result"),
])
def test_each_unusable_reason(mutate: Any, kwargs: dict[str, Any], first: str) -> None:
    st = summarize(mutate(_clean()), **kwargs)
    assert not st.usable and st.unusable_reasons[0].startswith(first), st.unusable_reasons


def test_a_clean_run_is_usable_and_cpu_timings_may_decide_when_allowed() -> None:
    assert summarize(_clean()).usable
    cpu = _clean().model_copy(update={"device": "cpu"})
    st = summarize(cpu, allow_cpu_timings=True)
    assert st.usable and st.cpu_timings and st.reasons[0].startswith("CPU server")


def test_the_reasons_come_most_important_first() -> None:
    r = _switch_off(_clean().model_copy(update={"device": "cpu"}), 3)
    st = summarize(r, experiment="other")
    assert [x.split(" ")[1] for x in st.unusable_reasons] == ["switch", "server:", "experiment's"]


def test_an_unusable_request_drops_its_round_for_that_length_only_and_is_named() -> None:
    r = _bad(_clean(), "replicated", 2049, 4, error="HTTP 500")
    paired = paired_rounds(r)
    assert 4 not in paired.diffs["split"][2049] and 4 in paired.diffs["split"][2048]
    assert paired.problems.failed == 1 and "replicated at 2049 tokens, round 4: request failed: HTTP 500" in \
        paired.problems.named[0]
    st = summarize(r)
    assert st.usable  # a failed request is a lost round, not an unusable step
    assert next(p for p in st.points if p.arm == "split" and p.length == 2049).rounds == 39
    assert any("HTTP 500" in f for f in st.failures)


def test_a_request_sent_under_a_switch_of_another_arm_is_unconfirmed() -> None:
    r = _clean()
    i = next(i for i, q in enumerate(r.requests) if q.arm == "split")
    sw = list(r.switches)
    sw[i] = sw[i].model_copy(update={"arm": "replicated", "threshold": 2**31 - 1})
    paired = paired_rounds(r.model_copy(update={"switches": sw}))
    assert paired.problems.unconfirmed_switch == 1 and "does not confirm this arm" in paired.problems.named[0]


def test_the_power_benchmark_replays_the_runner_loop_through_the_shipped_analysis() -> None:
    """One run of benchmarks/step_power.py's first scenario (−0.8 ms, 1 ms noise): resolved at a look, usable."""
    run = power.one_run((power.SCENARIOS[0], 0))
    assert run["resolved"] == 1.0 and run["false"] == 0.0 and run["usable"] == 1.0
    assert run["rounds"] in (40.0, 80.0, 120.0, 160.0, 200.0)


def test_nothing_above_max_num_batched_tokens_is_used() -> None:
    r = _result(-0.8, rounds=40).model_copy(update={"max_num_batched_tokens": 4096})
    st = summarize(r)
    assert {p.length for p in st.points} == {2048, 2049, 4096}
    assert any("lengths [4097] lie above max_num_batched_tokens 4096" in f for f in st.failures)


def test_a_step_measured_only_below_the_gate_threshold_is_unusable_there() -> None:
    """Lengths ≤ 1025 against a gate at 2048 and a batch limit of 8192: the curve used to be held flat beyond 1025 and
    the step called usable; now there is no gated interval, named."""
    r = _result(-0.8, rounds=40, lengths=[512, 513, 1024, 1025]).model_copy(update={"max_num_batched_tokens": 8192})
    st = summarize(r)
    assert not st.usable and not any(e.threshold_tokens == 2048 for e in st.expectations)
    assert any(w.startswith("no gated interval") and "do not cover the batch sizes 2048…8192" in w
               for w in st.unusable_reasons), st.unusable_reasons
