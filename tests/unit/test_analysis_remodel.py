"""Re-modelling a one-GPU run's gather under another prior, on the committed H200 Humming run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spx.analysis.judge import judge
from spx.analysis.remodel import remodel_gather
from spx.api.gather_model import GatherModelSpec
from spx.api.result import KernelResult

RUN = Path(__file__).resolve().parents[2] / "examples" / "results" / "h200-1gpu" / "humming" / "result.json"


@pytest.fixture(scope="module")
def result() -> KernelResult:
    return KernelResult.model_validate(json.loads(RUN.read_text()))


def test_the_recorded_model_reproduces_the_run(result):
    same = remodel_gather(result, result.spec.kernel.gather_model)
    for a, b in zip(result.points, same.points, strict=True):
        assert b.split.median_us == pytest.approx(a.split.median_us, rel=1e-12)
        assert b.replicated == a.replicated


def test_another_prior_moves_split_samples_by_the_gather_difference_only(result):
    assert result.spec.kernel.gather_model.prior == "h20-calibrated"  # the run's own (spx's default)
    datasheet = remodel_gather(result, GatherModelSpec(prior="datasheet"))
    assert datasheet.spec.kernel.gather_model.prior == "datasheet"
    for a, b in zip(result.points, datasheet.points, strict=True):
        delta = b.gather_us - a.gather_us
        assert b.split.samples_us == pytest.approx([s + delta for s in a.split.samples_us])
        assert b.replicated == a.replicated and b.shard_gemm_us == a.shard_gemm_us
    # below 2 MiB per shard the calibrated custom all-gather (6.1 µs + 372 GB/s) is cheaper than the
    # datasheet's 10 µs + 360 GB/s; above it NCCL's 38.1 µs makes the calibrated prior dearer
    before = {p.tokens: p.gather_us for p in result.points}
    after = {p.tokens: p.gather_us for p in datasheet.points}
    assert before[2048] < after[2048] and before[8192] > after[8192]


def test_h200_humming_threshold_under_each_prior(result):
    """The headline numbers of examples/results/h200-1gpu/README.md, recomputed from the samples."""
    datasheet = judge(remodel_gather(result, GatherModelSpec(prior="datasheet")), result.spec).kernel
    calibrated = judge(remodel_gather(result, GatherModelSpec(prior="h20-calibrated")), result.spec).kernel
    assert datasheet.recommended_threshold_tokens == 1024
    assert calibrated.recommended_threshold_tokens == 128
    assert calibrated.crossover_tokens < datasheet.crossover_tokens < 2048


def test_a_measured_gather_is_not_remodelled(result):
    measured = result.model_copy(update={"gather_source": "measured"})
    with pytest.raises(ValueError, match="only a modelled gather"):
        remodel_gather(measured, GatherModelSpec())
