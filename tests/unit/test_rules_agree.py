"""Rules the spec check and the bench both apply, written once, agree value by value.

``spx.api.combinations`` refuses what a CPU (or a GPU) cannot run before any pod exists; the bench refuses
the same on the device it resolved at run time (``spx.bench.context``, ``spx.bench.gemm``). Both read the
vocabulary's CUDA-only sets; here every value of each vocabulary, on each device, is refused by both or by
neither.
"""

from __future__ import annotations

import itertools

import pytest

from spx.api.combinations import combination_problems
from spx.api.spec import ExperimentSpec
from spx.vocabulary import GATHER_BACKENDS, GEMM_BACKENDS, TIMERS, WEIGHT_FORMATS

torch = pytest.importorskip("torch")

from spx.bench.context import _resolve_gather, _resolve_timer  # noqa: E402
from spx.bench.gemm import choose_gemm_backend  # noqa: E402

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
    """On an SM90 GPU with both of vLLM's MXFP8 kernels importable, so that only the rules decide."""
    available = (True, "importable")
    cap = (9, 0) if device == "cuda" else None
    bench = _raises(lambda: choose_gemm_backend(backend, weight_format, device, cap, available, available))
    assert _refused_by_spec(device, kernel__gemm_backend=backend, projection__weight_format=weight_format) == bench
