"""Rules two places apply, written once, agree value by value: the spec check and the bench (what needs CUDA),
``spx predict`` and ``spx report`` (the recommended threshold).

``spx.api.combinations`` refuses what a CPU (or a GPU) cannot run before any pod exists; the bench refuses
the same on the device it resolved at run time (``spx.bench.context``, ``spx.bench.gemm``). Both read the
vocabulary's CUDA-only sets; here every value of each vocabulary, on each device, is refused by both or by
neither.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from spx.analysis.judge import judge
from spx.analysis.predict import predict_remodelled
from spx.api.combinations import combination_problems
from spx.api.result import KernelResult
from spx.api.spec import ExperimentSpec
from spx.vocabulary import (
    GATHER_BACKENDS,
    GEMM_BACKENDS,
    THRESHOLD_ROUNDINGS,
    THRESHOLD_RULES,
    TIMERS,
    WEIGHT_FORMATS,
)

torch = pytest.importorskip("torch")

from spx.bench.context import _resolve_gather, _resolve_timer  # noqa: E402
from spx.bench.gemm import choose_gemm_backend, kernel  # noqa: E402

DEVICES = ("cpu", "cuda")


def _refused_by_spec(device: str, **fields: object) -> bool:
    """True when ``spec.kernel.device: device`` with ``fields`` (``kernel.x`` / ``projection.x``) is refused."""
    spec = ExperimentSpec.model_construct()
    update: dict[str, dict[str, object]] = {"kernel": {"device": device}, "projection": {}, "parallelism": {}}
    for path, value in fields.items():
        section, field = path.split("__")
        update[section][field] = value
    spec = spec.model_copy(update={
        section: getattr(spec, section).model_copy(update=values) for section, values in update.items()})
    return bool(combination_problems(spec))


def _raises(call) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


@pytest.mark.parametrize(("timer", "device"), list(itertools.product(TIMERS, DEVICES)))
def test_a_timer_is_refused_by_the_spec_check_exactly_when_the_bench_refuses_it(timer: str, device: str) -> None:
    spec = ExperimentSpec.model_validate({"kernel": {"device": "auto", "timer": timer}})
    bench = _raises(lambda: _resolve_timer(spec, torch.device(device)))
    assert _refused_by_spec(device, kernel__timer=timer) == bench


@pytest.mark.parametrize(("gather", "device"), list(itertools.product(GATHER_BACKENDS, DEVICES)))
def test_a_gather_is_refused_by_the_spec_check_exactly_when_the_bench_refuses_it(gather: str, device: str) -> None:
    """With as many ranks as TP (2), so that only the device decides."""
    spec = ExperimentSpec.model_validate({"parallelism": {"tensorParallelSize": 2},
                                          "kernel": {"device": "auto", "gather": gather}})
    bench = _raises(lambda: _resolve_gather(spec, torch.device(device), 2, 2))
    assert _refused_by_spec(device, kernel__gather=gather, parallelism__tensor_parallel_size=2) == bench


@pytest.mark.parametrize(("backend", "weight_format", "device"),
                         list(itertools.product(GEMM_BACKENDS, WEIGHT_FORMATS, DEVICES)))
def test_a_gemm_backend_is_refused_by_the_spec_check_exactly_when_the_bench_refuses_it(
        backend: str, weight_format: str, device: str) -> None:
    """On a GPU the backend runs on (SM90, or the backend's minimum capability above it) with every kernel
    importable, so that only the rules decide (the GPU's capability is the machine's fact, not the spec's)."""
    available = (True, "importable")
    least = kernel(backend).min_capability if backend != "auto" else None
    cap = divmod(max(90, least or 0), 10) if device == "cuda" else None
    bench = _raises(lambda: choose_gemm_backend(backend, weight_format, device, cap, lambda _name: available))
    assert _refused_by_spec(device, kernel__gemm_backend=backend, projection__weight_format=weight_format) == bench


# ---------------------------------------------------------------- the recommended threshold: spx predict and spx report

_HUMMING = Path(__file__).resolve().parents[2] / "examples" / "results" / "h200-1gpu" / "humming" / "result.json"


@pytest.mark.parametrize("rounding", THRESHOLD_ROUNDINGS)
@pytest.mark.parametrize("rule", THRESHOLD_RULES)
def test_predict_and_report_recommend_the_same_threshold_under_every_rule(rule: str, rounding: str) -> None:
    """``spx predict --measured RUN --gather PRIOR`` (:func:`spx.analysis.predict.predict_remodelled`) and ``spx report
    RUN`` (:func:`spx.analysis.summary.evaluate` through ``judge``) apply one threshold rule: the run's
    ``spec.gate.thresholdRule`` and ``thresholdRounding`` (predict once ignored the rule)."""
    run = KernelResult.model_validate(json.loads(_HUMMING.read_text(encoding="utf-8")))
    gate = run.spec.gate.model_copy(update={"threshold_rule": rule, "threshold_rounding": rounding})
    run = run.model_copy(update={"spec": run.spec.model_copy(update={"gate": gate})})
    kernel = judge(run, run.spec).kernel
    pred = predict_remodelled(run, run.spec.kernel.gather_model)
    assert kernel is not None and kernel.recommended_threshold_tokens is not None
    assert pred.recommended_threshold_tokens == kernel.recommended_threshold_tokens
    assert pred.break_even_tokens == pytest.approx(kernel.crossover_tokens, rel=1e-12)
    assert pred.crossover_confidence == kernel.crossover_confidence and pred.uncertainty == kernel.uncertainty


def test_the_two_rules_differ_on_the_committed_run() -> None:
    """The agreement above is not vacuous: on this run the rules recommend different thresholds."""
    run = KernelResult.model_validate(json.loads(_HUMMING.read_text(encoding="utf-8")))
    thresholds = {rule: predict_remodelled(run.model_copy(update={"spec": run.spec.model_copy(update={
        "gate": run.spec.gate.model_copy(update={"threshold_rule": rule})})}), run.spec.kernel.gather_model)
        .recommended_threshold_tokens for rule in THRESHOLD_RULES}
    assert thresholds["break-even"] != thresholds["lower-bound"], thresholds
