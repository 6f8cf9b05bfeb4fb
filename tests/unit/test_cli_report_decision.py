"""What ``spx report`` says first (:mod:`spx.cli.decision`): what decided, the bottom line in one sentence and
the next step, for each way a verdict is reached. Table-tested on judged statuses built from real values."""

from __future__ import annotations

import pytest

from spx.api.status import KernelPoint, KernelStatus, RegimeSummary, StakeRow
from spx.api.step import StepEffect, StepStatus
from spx.cli.decision import bottom_line, decided_by_line, decision_lines, next_step_line

#: The stake at 2048 and 8192 tokens of the committed H200 run humming-eager-1 (µs per layer, 40 layers).
STAKE = [StakeRow(label="gate threshold, vLLM default", tokens=2048, layers=40, saving_us=19.8,
                  saving_ms_per_chunk=0.792, host_saving_us=-28.4, host_saving_ms_per_chunk=-1.136)]
POINTS = [KernelPoint(tokens=t, rows_per_rank=t // 8, replicated_us=rep, split_us=split, speedup=rep / split,
                      execution="eager", replicated_host_us=hrep, split_host_us=hsplit, gpu_delta_us=split - rep,
                      host_delta_us=hsplit - hrep)
          for t, rep, split, hrep, hsplit in ((1024, 38.8, 34.4, 94.6, 128.1), (2048, 64.0, 44.2, 92.1, 120.4),
                                              (8192, 211.3, 146.3, 244.9, 297.4))]
GPU = RegimeSummary(regime="gpu-bound", crossover_tokens=233.5, recommended_threshold_tokens=256,
                    speed_verdict="Pass", verdict="Pass")
HOST = RegimeSummary(regime="host-bound", speed_verdict="Fail", verdict="Fail")


def kernel(**update: object) -> KernelStatus:
    """The humming-eager-1 status (regimes disagree, nothing decided), with ``update`` applied."""
    from spx.api.status import CrossoverUncertainty

    base = KernelStatus(points=POINTS, crossover_tokens=233.5, recommended_threshold_tokens=256,
                        gather_source="measured", regimes=[GPU, HOST], regimes_agree=False, decided_by="none",
                        uncertainty=CrossoverUncertainty(stake=STAKE))
    return base.model_copy(update=update)


def effect(low: float, high: float, regime: str = "gpu-bound") -> StepStatus:
    mid = (low + high) / 2
    return StepStatus(effects=[StepEffect(
        threshold_tokens=2048, role="split", length=2048, base_length=2040, rounds=40, effect_ms=mid,
        effect_low_ms=low, effect_high_ms=high, layers=40, per_layer_us=mid * 25, per_layer_low_us=low * 25,
        per_layer_high_us=high * 25, regime=regime, outcome="gain" if high < 0 else "loss" if low > 0 else "indifferent")])


@pytest.mark.parametrize(("status", "verdict", "step", "line"), [
    pytest.param(kernel(), "Inconclusive", None,
                 "bottom line: on this node (40 layers) the split at 2,048 tokens gains 0.79 ms per 2,048-token "
                 "prefill chunk if the step is GPU-bound, and costs 1.14 ms if it is host-bound; no threshold is "
                 "recommended until a step measurement says which regime holds (GPU-bound alone: 256, host-bound "
                 "alone: none)", id="regimes-disagree"),
    pytest.param(kernel(max_num_batched_tokens=8192), "Inconclusive", None,
                 "bottom line: on this node (40 layers) the split at 2,048 tokens gains 0.79 ms per 2,048-token "
                 "prefill chunk and gains 2.60 ms per full 8,192-token chunk if the step is GPU-bound, and costs "
                 "1.14 ms and costs 2.10 ms if it is host-bound; no threshold is recommended until a step "
                 "measurement says which regime holds (GPU-bound alone: 256, host-bound alone: none)",
                 id="regimes-disagree-with-a-full-chunk"),
    pytest.param(kernel(decided_by="step"), "Pass", effect(-2.0, -1.0),
                 "bottom line: on this node the step A/B measured the split at 2,048 tokens gaining 1.50 ms per "
                 "2,048-token prefill step, 95 % interval [-2.00, -1.00] ms (-37.5 µs per layer; gpu-bound); "
                 "threshold 2,048 stands: the split gains there; recommended threshold 256 tokens because the "
                 "split wins from ≈ 234 tokens in the GPU-bound regime", id="step-gain"),
    pytest.param(kernel(decided_by="step"), "Fail", effect(1.0, 1.4, "host-bound"),
                 "bottom line: on this node the step A/B measured the split at 2,048 tokens costing 1.20 ms per "
                 "2,048-token prefill step, 95 % interval [+1.00, +1.40] ms (+30.0 µs per layer; host-bound); do "
                 "not split from 2,048: the split costs there; no threshold is recommended: the split does not "
                 "win at the largest measured count", id="step-loss"),
    pytest.param(kernel(decided_by="correctness"), "Fail", None,
                 "bottom line: the split's output differs from the replicated one beyond gate.maxAbsError: do not "
                 "split", id="correctness"),
    pytest.param(kernel(decided_by="deployment", max_num_batched_tokens=1024), "Fail", None,
                 "bottom line: a threshold of 2,048 tokens lies above the largest batch this deployment forms "
                 "(1,024 tokens): the split would never engage; recommended threshold 256 tokens because the split "
                 "wins from ≈ 234 tokens in the GPU-bound regime", id="deployment"),
    pytest.param(kernel(regimes=[GPU], regimes_agree=None, decided_by="kernel",
                        points=[p.model_copy(update={"host_delta_us": None}) for p in POINTS]), "Pass", None,
                 "bottom line: on this node (40 layers) the split at 2,048 tokens gains 0.79 ms per 2,048-token "
                 "prefill chunk; recommended threshold 256 tokens because the split wins from ≈ 234 tokens in the "
                 "GPU-bound regime", id="one-regime"),
    pytest.param(kernel(), None, None, None, id="partial-run-no-verdict"),
])
def test_the_bottom_line(status: KernelStatus, verdict: str | None, step: StepStatus | None, line: str | None) -> None:
    assert bottom_line(status, verdict, 2048, step=step) == line


def test_a_modelled_gather_is_said_in_the_bottom_line_and_names_its_next_step() -> None:
    status = kernel(gather_source="modelled", regimes_agree=True, regimes=[GPU, HOST.model_copy(
        update={"speed_verdict": "Pass"})])
    line = bottom_line(status, "Inconclusive", 2048)
    assert line is not None and line.startswith("bottom line: on this node (40 layers; gather modelled)")
    assert next_step_line(status, "Inconclusive", 2048) == (
        "next step: measure the all-gather: run the sweep on as many GPUs of one node as tensorParallelSize "
        "(kernel.gather auto measures it there), or accept the model with gate.allowModelledGather")


@pytest.mark.parametrize(("status", "verdict", "gate", "fragment"), [
    pytest.param(kernel(next_step="run `spx serving x.yaml --out d`"), "Inconclusive", 2048,
                 "next step: run `spx serving x.yaml --out d`", id="the-status-names-it"),
    pytest.param(kernel(), "Inconclusive", 2048, "spec.serving.step", id="regimes-disagree: the step A/B"),
    pytest.param(kernel(), "Inconclusive", 16384, "extend the sweep to the gate threshold: add 16384",
                 id="the-sweep-stops-below-the-threshold"),
    pytest.param(kernel(decided_by="step"), "Pass", 2048, None, id="decided: none"),
])
def test_the_next_step(status: KernelStatus, verdict: str, gate: int, fragment: str | None) -> None:
    line = next_step_line(status, verdict, gate)
    assert (line is None) if fragment is None else (line is not None and fragment in line)


def test_the_deciding_reason_comes_first_then_what_decided() -> None:
    lines = decision_lines(kernel(), "Inconclusive", ["the kernel regimes disagree", "GPU-bound: …"], 2048)
    assert lines[:2] == ["because: the kernel regimes disagree", "decided by: none (no measurement decided: Inconclusive, kernel.nextStep names what would)"]
    assert lines[2].startswith("bottom line: ") and lines[3].startswith("next step: ")
    assert decided_by_line(kernel(decided_by=None), "Pass") is None


def test_nothing_decided_without_a_next_step_points_at_none() -> None:
    """A CPU smoke run decides nothing and has no ``kernel.nextStep``: the line said "kernel.nextStep names what
    would" of a status without one (issue 37)."""
    smoke = KernelStatus(points=POINTS, decided_by="none", gather_source="measured")  # (regimes agree: no step A/B)
    assert next_step_line(smoke, "Inconclusive") is None
    line = decided_by_line(smoke, "Inconclusive")
    assert line == "decided by: none (no measurement decided: Inconclusive; the reasons say why)"
    assert "nextStep" in str(decided_by_line(kernel(decided_by="none"), "Inconclusive"))


def test_where_the_regimes_agree_the_larger_threshold_is_recommended() -> None:
    """Both regimes pass at 2048, the GPU-bound from ≈ 234 tokens (256), the host-bound from ≈ 1,500 (2048): the
    split wins in both only from 2048, so that is the recommendation, not the GPU-bound 256."""
    host = HOST.model_copy(update={"crossover_tokens": 1500.0, "recommended_threshold_tokens": 2048,
                                   "speed_verdict": "Pass", "verdict": "Pass"})
    status = kernel(regimes=[GPU, host], regimes_agree=True, decided_by="kernel")
    line = bottom_line(status, "Pass", 2048)
    assert line is not None and line.endswith(
        "recommended threshold 2,048 tokens because the split wins in both regimes from there (GPU-bound break-even "
        "≈ 234, host-bound ≈ 1,500 tokens)")
