"""Step A/B specs a newcomer wrote that validated and then measured nothing or the wrong thing (issue #35,
requirement 4), now refused by the spec model with the field and the fix; each case failed before its fix.

Pure: the pydantic model through :func:`spx.api.loading.validate_spec` (the path ``spx validate`` takes), and
the analysis's expectation through :func:`spx.analysis.step_mix.expectation_weights` (no server).
"""

from __future__ import annotations

from typing import Any

import pytest

from spx.analysis.step_mix import expectation_weights
from spx.api.loading import SpecError, validate_spec
from spx.api.step_checks import compile_flag, coverage_problems


def spec(step: dict[str, Any] | None, extra_args: list[str] | None = None, **top: Any) -> dict[str, Any]:
    """A TP-2 CPU spec with a step-A/B-only serving section (gate threshold 2048, batch limit 8192 by default)."""
    raw: dict[str, Any] = {
        "parallelism": {"tensorParallelSize": 2}, "kernel": {"device": "cpu", "gather": "gloo", "timer": "host"},
        "gate": {"thresholdTokens": 2048}, "timeoutSeconds": 86400,
        "serving": {"model": "tiny", "points": [], "extraArgs": extra_args or [], "step": step}}
    raw.update(top)
    return raw


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as err:
        validate_spec(raw)
    return err.value.problems


def test_lengths_above_the_extra_args_batch_limit_are_refused_at_validation() -> None:
    # passed validation; spx run --serving then ran the kernel sweep and failed in spx.serving.step
    got = problems(spec({"lengths": [2048, 8192]}, ["--max-num-batched-tokens", "4096"]))
    assert any(p.startswith("spec.serving.step.lengths: [8192] exceed max_num_batched_tokens 4096") for p in got), got


def test_lengths_that_stop_below_the_gate_threshold_are_refused() -> None:
    got = problems(spec({"lengths": [512, 1024, 1025]}))
    assert any("aligned (M % TP == 0) lengths [512, 1024] do not cover the batch sizes 2048…8192" in p for p in got), got
    assert any("off-aligned (the pad path, M % TP != 0) lengths [1025] do not cover" in p for p in got), got


def test_lengths_must_reach_every_step_threshold_too() -> None:
    # covers the gate threshold 2048 … 8192, but step.thresholds 1024 starts below the lowest measured length
    got = problems(spec({"lengths": [2048, 2049, 8191, 8192], "thresholds": [1024]}))
    assert any("from T=1024" in p and "measure one ≤ 1024" in p for p in got), got


def test_explicit_lengths_without_an_off_aligned_one_are_refused() -> None:
    got = problems(spec({"lengths": [1024, 2048, 4096, 8192]}))
    assert any("off-aligned (the pad path, M % TP != 0) lengths [] do not cover the batch sizes 2049…8191" in p
               for p in got), got


def test_covering_lengths_validate() -> None:
    validate_spec(spec({"lengths": [1024, 1025, 2048, 2049, 8191, 8192]}))


@pytest.mark.parametrize(("mix", "words"), [
    ([{"le": 4096, "weight": 0}], "every weight is 0"),
    ([{"le": 1024, "weight": 3}], "no weight at or above the gate threshold 2048"),
    ([{"le": 4096, "weight": 1}, {"le": 16384, "weight": 2}], "le [16384] above max_num_batched_tokens 8192"),
])
def test_a_batch_mix_that_weighs_nothing_the_gate_changes_is_refused(mix: list[dict[str, Any]], words: str) -> None:
    got = problems(spec({"batchMix": mix}))
    assert any(p.startswith("spec.serving.step.batchMix: ") and words in p for p in got), got


def test_min_rounds_above_rounds_is_refused() -> None:
    got = problems(spec({"rounds": 20, "minRounds": 40}))
    assert any(p.startswith("spec.serving.step.minRounds: 40 is above rounds 20") for p in got), got


def test_too_many_looks_are_refused_and_twenty_pass() -> None:
    got = problems(spec({"rounds": 1000, "minRounds": 40, "lookEvery": 10}))
    assert any(p.startswith("spec.serving.step.lookEvery: 10 gives 97 looks") for p in got), got
    validate_spec(spec({"rounds": 800, "minRounds": 40, "lookEvery": 40}))  # (800 − 40)/40 + 1 = 20 looks


@pytest.mark.parametrize("args", [["-O3"], ["-O", "2"], ["--compilation-config", '{"mode": 3}'], ["-cc=3"],
                                  ["--no-enforce-eager"]])
def test_compilation_flags_that_refuse_every_length_are_refused(args: list[str]) -> None:
    assert compile_flag(args) is not None
    got = problems(spec({}, args))
    assert any(p.startswith("spec.serving.extraArgs: ") and "would refuse every length" in p for p in got), got


@pytest.mark.parametrize("args", [["-O0"], ["--compilation-config", '{"mode": 0}'], ["-O3", "--enforce-eager"], []])
def test_eager_flags_pass(args: list[str]) -> None:
    assert compile_flag(args) is None
    validate_spec(spec({}, args))


def test_a_threshold_at_the_batch_limit_keeps_both_fixes_in_the_line() -> None:
    got = problems(spec({}, ["--max-num-batched-tokens", "2048"]))
    line = next(p for p in got if p.startswith("spec.gate.thresholdTokens: 2048"))
    assert "choose a threshold below 2048, or raise --max-num-batched-tokens" in line[:200], line


def test_several_spec_level_problems_are_all_listed_without_a_doubled_prefix_or_a_dump() -> None:
    got = problems(spec({"rounds": 20, "minRounds": 40}, ["--max-num-batched-tokens", "2048"], timeoutSeconds=100))
    assert any(p.startswith("spec.gate.thresholdTokens: 2048 is at or above") for p in got), got
    assert any(p.startswith("spec.serving.step.minRounds: 40") for p in got), got
    assert any(p.startswith("spec.timeoutSeconds: 100 is too short") for p in got), got
    assert not any("spec.spec" in p or "'projection'" in p for p in got), got
    raw = spec(None)
    raw["serving"].pop("step")
    got = problems(raw)
    assert got[0].startswith("spec.serving has nothing to run"), got


def test_a_short_timeout_shows_its_figures_not_the_spec() -> None:
    got = problems(spec({}, timeoutSeconds=100))
    assert got == [got[0]] and got[0].startswith("spec.timeoutSeconds: 100 is too short"), got
    assert "(got {" not in got[0] and "set timeoutSeconds ≥ 2400" in got[0], got


@pytest.mark.parametrize(("field", "value", "words"), [
    ("pad", False, "removed: the step curve always measures off-aligned lengths"),
    ("quantile", 0.05, "statistic: median|mean"),
    ("positiveControl", True, "positiveControlMs"),
])
def test_old_schema_fields_say_what_became_of_them(field: str, value: Any, words: str) -> None:
    got = problems(spec({field: value}))
    line = next(p for p in got if p.startswith(f"spec.serving.step.{field}: "))
    assert words in line, line
    if field == "pad":
        assert "did you mean 'padFree'" not in line and "padFree is a different arm" in line, line


def test_the_analysis_never_extrapolates_beyond_the_last_measured_length_of_a_class() -> None:
    # lengths ≤ 1025, gate 2048: the old mix held the curve flat beyond 1025 and called the step usable
    with pytest.raises(ValueError, match=r"do not cover the batch sizes 2048…8192"):
        expectation_weights([512, 513, 1024, 1025], 2, 2048, 8192)
    with pytest.raises(ValueError, match=r"off-aligned .* lengths \[2049\] do not cover the batch sizes 2049…8191"):
        expectation_weights([2048, 2049, 8192], 2, 2048, 8192)
    w = expectation_weights([2048, 2049, 8191, 8192], 2, 2048, 8192)
    assert abs(sum(w.coefficients.values()) - 1.0) < 1e-12
    assert coverage_problems([2048, 2049, 8191, 8192], 2, 2048, 8192) == []


def test_accuracy_without_serving_is_listed_with_the_other_problems() -> None:
    raw = {"accuracy": {}, "timeoutSeconds": 86400, "kernel": {"device": "cpu", "timer": "cuda-events"}}
    got = problems(raw)
    assert any(p.startswith("spec.accuracy: runs GSM8K on the servers of spec.serving's arms") for p in got), got
    assert any(p.startswith("spec.kernel.timer: ") for p in got), got  # (a combination no machine runs, listed too)
