"""The queue model of an eager step (spx.research.queue): synthetic steps of known Δg and Δh in both
regimes and at the pivot; the per-op max(host, gpu) is never the effect."""

from __future__ import annotations

import pytest

from spx.research.queue import Op, layered, regime, replacement_effect_us, simulate, steady_state_effect_us

#: The replicated projection and the split (shard GEMM + all-gather launch): Δh = +30 µs, Δg = −20 µs; the
#: per-op max moves by max(60, 20) − max(30, 40) = +20 µs, which is neither.
REPLICATED = Op(host_us=30.0, gpu_us=40.0, name="replicated")
SPLIT = Op(host_us=60.0, gpu_us=20.0, name="split")
DH, DG, DMAX = 30.0, -20.0, 20.0
LAYERS = 40


#: The end transient of a step of LAYERS layers: the last op's GPU tail or the first op's issue moves once,
#: by at most |Δh| + |Δg|, spread over the layers.
TRANSIENT = (abs(DH) + abs(DG)) / LAYERS


def layer(filler_gpu: float, filler_host: float = 5.0) -> list[Op]:
    """A filler (attention + MoE and their launches) first, then the projection (index 1)."""
    return [Op(host_us=filler_host, gpu_us=filler_gpu, name="filler"), REPLICATED]


@pytest.mark.parametrize(("filler_gpu", "filler_host", "expected", "name"), [
    (0.0, 50.0, DH, "host-bound: H = 80 > G = 40, the GPU waits for every launch"),
    (10.0, 50.0, DH, "host-bound with some GPU work: H = 80 > G = 50"),
    (200.0, 5.0, DG, "gpu-bound: G = 240 > H = 35, the queue never drains"),
    (5_000.0, 5.0, DG, "gpu-bound, deep queue"),
])
def test_the_step_moves_by_delta_h_or_delta_g_never_by_the_per_op_max(filler_gpu: float, filler_host: float,
                                                                      expected: float, name: str) -> None:
    lay = layer(filler_gpu, filler_host)
    got = replacement_effect_us(lay, 1, SPLIT, LAYERS)
    assert got == pytest.approx(expected, abs=TRANSIENT), name
    assert abs(got - DMAX) > 5.0
    assert regime(lay) == ("host-bound" if expected == DH else "gpu-bound")


@pytest.mark.parametrize("filler_gpu", [5.0, 10.0, 15.0, 20.0, 25.0, 30.0])
def test_at_the_pivot_the_step_moves_by_something_between(filler_gpu: float) -> None:
    """H = 35 µs per layer ≤ G = filler + 40; after the split H = 65 > G = filler + 20: the replacement moves
    the bottleneck from the GPU to the host, so the effect lies strictly between Δg and Δh, as the steady
    state ``max(H + Δh, G + Δg) − max(H, G)`` says."""
    got = replacement_effect_us(layer(filler_gpu), 1, SPLIT, LAYERS)
    h, g = 5.0 + REPLICATED.host_us, filler_gpu + REPLICATED.gpu_us
    assert DG < got < DH
    assert got == pytest.approx(steady_state_effect_us(h, g, DH, DG), abs=TRANSIENT)


@pytest.mark.parametrize(("filler_gpu", "filler_host"), [(0.0, 50.0), (200.0, 5.0), (30.0, 20.0), (45.0, 5.0)])
def test_the_simulation_approaches_the_steady_state(filler_gpu: float, filler_host: float) -> None:
    lay = layer(filler_gpu, filler_host)
    h, g = sum(o.host_us for o in lay), sum(o.gpu_us for o in lay)
    exact = replacement_effect_us(lay, 1, SPLIT, 400)
    assert exact == pytest.approx(steady_state_effect_us(h, g, DH, DG), abs=(abs(DH) + abs(DG)) / 400)


def test_one_step_is_the_host_lead_plus_the_gpu_work_or_the_host_time_plus_the_tail() -> None:
    gpu_bound = simulate(layered(layer(500.0), 2))  # the filler issued after 5 µs, then the GPU never idles
    assert gpu_bound.step_us == pytest.approx(5.0 + 2 * 540.0) and gpu_bound.gpu_idle_us == pytest.approx(5.0)
    host_bound = simulate(layered(layer(0.0, 50.0), 2))  # the GPU waits for each launch: Σ host + the last run
    assert host_bound.step_us == pytest.approx(2 * 80.0 + 40.0) and host_bound.host_us == pytest.approx(160.0)


def test_a_sync_inside_the_step_exposes_the_host_cost_after_it() -> None:
    """A host read of a GPU value (e.g. a CPU copy of metadata) empties the queue: after it, the host has to
    get ahead again, so a step that is GPU-bound on average pays part of Δh (sglang PR #40335 removed two)."""
    sync = Op(host_us=2.0, gpu_us=1.0, name="cpu copy", sync=True)
    deep = [Op(5.0, 50.0, "filler"), REPLICATED]  # G = 90 ≥ H = 35, and 70 ≥ 65 after the split: gpu-bound
    without = replacement_effect_us(deep, 1, SPLIT, LAYERS)
    with_sync = replacement_effect_us([sync, *deep], 2, SPLIT, LAYERS)
    assert without == pytest.approx(DG, abs=TRANSIENT)
    # the queue is empty at each layer's start: the split's later launch (65 µs after the sync, the filler's
    # GPU work ends at 55) is exposed, and the step gains only half of Δg
    assert with_sync == pytest.approx(-10.0, abs=TRANSIENT) and DG < with_sync < DH


def test_bad_ops_and_indices_are_refused() -> None:
    with pytest.raises(ValueError, match="op x: gpu_us must be finite and >= 0 µs"):
        Op(1.0, float("nan"), "x")
    with pytest.raises(IndexError, match="index 5 is not an op of a 2-op layer"):
        replacement_effect_us(layer(0.0), 5, SPLIT, 2)
    with pytest.raises(ValueError, match="layers must be >= 1"):
        layered(layer(0.0), 0)
