"""What ``spx report`` says first: the bottom line built from the deciding measurement (spx.analysis.words, stored in
status.judgement by the one judgement) and the lines spx.cli.decision prints from the status. Table-tested on judged
statuses built from real values (the stake of the committed H200 run humming-eager-1)."""

from __future__ import annotations

import pytest

from spx.analysis.decide import Decision
from spx.analysis.words import GATHER_NEXT, bottom_line, next_step
from spx.api.status import CrossoverUncertainty, JudgementStatus, KernelPoint, KernelStatus, RegimeSummary, StakeRow
from spx.api.step import StepExpectation, StepPoint, StepStatus
from spx.cli.decision import decided_by_line, decision_lines

#: The stake at 2048 tokens of the committed H200 run humming-eager-1 (µs per layer, 40 layers).
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
    base = KernelStatus(points=POINTS, crossover_tokens=233.5, recommended_threshold_tokens=256,
                        gather_source="measured", regimes=[GPU, HOST], regimes_agree=False, decided_by="none",
                        uncertainty=CrossoverUncertainty(stake=STAKE))
    return base.model_copy(update=update)


def step(low: float, high: float) -> tuple[StepStatus, StepExpectation]:
    mid = (low + high) / 2
    exp = StepExpectation(threshold_tokens=2048, arm="split", pad_path_share=0.875, effect_ms=mid, effect_low_ms=low,
                          effect_high_ms=high, per_layer_us=mid * 25, per_layer_low_us=low * 25,
                          per_layer_high_us=high * 25)
    pts = [StepPoint(arm="split", length=n, aligned=n % 8 == 0, rounds=40, effect_ms=mid, effect_low_ms=low,
                     effect_high_ms=high, per_layer_us=mid * 25, per_layer_low_us=low * 25, per_layer_high_us=high * 25)
           for n in (2048, 2049)]
    return StepStatus(points=pts, expectations=[exp], usable=True, recommended_threshold_tokens=4096), exp


GAIN, GAIN_E = step(-2.0, -1.0)
LOSS, LOSS_E = step(1.0, 1.4)


@pytest.mark.parametrize(("status", "d", "st", "line"), [
    pytest.param(kernel(), Decision("Inconclusive", "none", ()), None,
                 "bottom line: on this node (40 layers) the split at T = 2,048 tokens gains 0.79 ms per 2,048-token "
                 "prefill chunk if the step is GPU-bound, and costs 1.14 ms if it is host-bound; T + 1 = 2,049 (the "
                 "pad path) not measured; no threshold is recommended until a measurement decides (GPU-bound alone: "
                 "256, host-bound alone: none)", id="regimes-disagree"),
    pytest.param(kernel(decided_by="step"), Decision("Pass", "step", (), None, None, 4096, GAIN_E), GAIN,
                 "bottom line: on this node the step A/B measured that splitting from T = 2,048 tokens gains 1.50 ms "
                 "per prefill step expected over the uniform batch mix, interval [-2.00, -1.00] ms (-37.5 µs per "
                 "layer); measured at 2,048 tokens: -1.50 ms [-2.00, -1.00] and 2,049 tokens (pad path): -1.50 ms "
                 "[-2.00, -1.00]; threshold 2,048 stands; recommended threshold 4,096 tokens (the step curve's: the "
                 "smallest measured length from which splitting is a resolved expected gain)", id="step-gain"),
    pytest.param(kernel(decided_by="step"), Decision("Fail", "step", (), None, None, None, LOSS_E), LOSS,
                 "bottom line: on this node the step A/B measured that splitting from T = 2,048 tokens costs 1.20 ms "
                 "per prefill step expected over the uniform batch mix, interval [+1.00, +1.40] ms (+30.0 µs per "
                 "layer); measured at 2,048 tokens: +1.20 ms [+1.00, +1.40] and 2,049 tokens (pad path): +1.20 ms "
                 "[+1.00, +1.40]; do not split from 2,048; no threshold is recommended", id="step-loss"),
    pytest.param(kernel(decided_by="correctness"), Decision("Fail", "correctness", ()), None,
                 "bottom line: the split's output differs from the replicated one beyond gate.maxAbsError: do not "
                 "split", id="correctness"),
    pytest.param(kernel(regimes=[GPU], regimes_agree=None, decided_by="kernel",
                        points=[p.model_copy(update={"host_delta_us": None}) for p in POINTS]),
                 Decision("Pass", "kernel", (), None, None, 256), None,
                 "bottom line: on this node (40 layers) the split at T = 2,048 tokens gains 0.79 ms per 2,048-token "
                 "prefill chunk; T + 1 = 2,049 (the pad path) not measured; recommended threshold 256 tokens (the "
                 "GPU-bound regime's)", id="one-regime"),
])
def test_the_bottom_line(status: KernelStatus, d: Decision, st: StepStatus | None, line: str) -> None:
    assert bottom_line(status, d, 2048, step=st) == line


def test_a_cpu_result_says_cpu_first() -> None:
    assert bottom_line(kernel(), Decision("Inconclusive", "none", ()), 2048, cpu=True).startswith("CPU smoke run")
    decided = bottom_line(kernel(), Decision("Pass", "step", (), None, None, 4096, GAIN_E), 2048, step=GAIN, cpu=True)
    assert decided.startswith("CPU smoke run: on this node the step A/B")


def test_the_next_step_where_nothing_decided() -> None:
    none = Decision("Inconclusive", "none", ())
    modelled = kernel(gather_source="modelled", regimes_agree=True)
    assert next_step(modelled, none, 2048) == GATHER_NEXT
    short = next_step(kernel(), none, 16384)
    assert short is not None and short.startswith("extend the sweep to the gate threshold: add 16384")
    assert next_step(kernel(), Decision("Pass", "step", (), None, None), 2048) is None


def test_the_report_prints_the_status_words_cpu_and_deciding_reason_first() -> None:
    j = JudgementStatus(decided_by="none", bottom_line="bottom line: x", next_step="run y", cpu=True,
                        notes=["note: z"])
    lines = decision_lines("Inconclusive", ["the kernel regimes disagree", "GPU-bound: …"], j)
    assert lines[0].startswith("CPU smoke run") and lines[1] == "because: the kernel regimes disagree"
    assert lines[2] == "decided by: none (no measurement decided: Inconclusive, kernel.nextStep names what would)"  # (it has one)
    assert lines[3:] == ["bottom line: x", "note: z", "next step: run y"]
    assert decided_by_line(None, "Pass") is None


def test_nothing_decided_without_a_next_step_points_at_none() -> None:
    """A CPU smoke run decides nothing and has no next step: the line does not say "kernel.nextStep names what
    would" of a status without one (issue 37)."""
    smoke = JudgementStatus(decided_by="none", cpu=True)
    assert decided_by_line(smoke, "Inconclusive") == (
        "decided by: none (no measurement decided: Inconclusive; the reasons say why)")
    assert "nextStep" in str(decided_by_line(JudgementStatus(decided_by="none", next_step="run x"), "Inconclusive"))
