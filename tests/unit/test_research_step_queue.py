"""The eager step's summary (spx.research.step_queue) and its pipeline on CPU (benchmarks/eager_step.py)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from spx.research.step_queue import paired_effect, regime_of

ROOT = Path(__file__).resolve().parents[2]


def test_paired_effect_is_the_median_paired_difference_per_layer():
    rep = [1000.0, 1100.0, 900.0, 1000.0, 1050.0]
    split = [r + 40.0 * d for r, d in zip(rep, [1.0, 1.5, 0.5, 1.0, 1.2], strict=True)]  # +40, +60, +20, +40, +48 µs
    e = paired_effect(rep, split, per=40)
    assert e.value == pytest.approx(1.0) and e.n == 5
    assert e.low <= 1.0 <= e.high and e.low >= 0.5 and e.high <= 1.5
    # a drift shared by both arms of a round stays paired: no widening
    drift = paired_effect([r + 500 * i for i, r in enumerate(rep)], [s + 500 * i for i, s in enumerate(split)], per=40)
    assert (drift.value, drift.low, drift.high) == (e.value, e.low, e.high)


@pytest.mark.parametrize(("rep", "split", "per", "match"), [
    ([1.0], [1.0, 2.0], 1, "equal, non-zero length"), ([], [], 1, "equal, non-zero length"), ([1.0], [1.0], 0, "per must be > 0"),
])
def test_paired_effect_refuses_unpaired_input(rep, split, per, match):
    with pytest.raises(ValueError, match=match):
        paired_effect(rep, split, per=per)


@pytest.mark.parametrize(("effect", "dg", "dh", "label", "position"), [
    (-41.0, -40.0, 30.0, "gpu-bound", -1 / 70),    # GPU-bound step: the GPU difference
    (34.0, -40.0, 30.0, "host-bound", 74 / 70),    # host-bound step: the host difference (beyond it too)
    (-5.0, -40.0, 30.0, "between", 0.5),           # between: the pivot
    (-22.5, -40.0, 30.0, "gpu-bound", 0.25),       # the edges belong to the ends
    (12.5, -40.0, 30.0, "host-bound", 0.75),
    (3.0, 5.0, 5.0, "undetermined", None),          # Δg = Δh: the step cannot tell them apart
])
def test_regime_of_places_the_effect_between_dg_and_dh(effect, dg, dh, label, position):
    got, pos = regime_of(effect, dg, dh)
    assert got == label
    assert pos == (None if position is None else pytest.approx(position))


def _bench_module():
    spec = importlib.util.spec_from_file_location("eager_step_bench", ROOT / "benchmarks" / "eager_step.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["eager_step_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_step_benchmark_runs_its_pipeline_on_cpu(tmp_path, capsys):
    """CPU: a smoke run of the builder, the timer and the outputs; its numbers say nothing about GPUs."""
    pytest.importorskip("torch")
    bench = _bench_module()
    args = bench.argparse.Namespace(
        spec=str(ROOT / bench.SPEC), gemm_backend="torch-bf16", tokens=[16, 17], fillers=[0, 50], host_ops=[0, 2],
        layers=3, steps=4, op_samples=5, budget_s=600.0, out=tmp_path)
    overrides = {"projection": {"hiddenSize": 256, "outputSizes": [96, 32]}, "kernel": {"device": "cpu", "warmup": 1}}
    doc = bench.measure(args, overrides)
    bench.write(doc, tmp_path)
    assert [(c["tokens"], c["host_ops"], c["filler_us"]) for c in doc["cases"]] == [
        (t, h, f) for t in (16, 17) for h in (0, 2) for f in (0, 50)]
    assert doc["per_op"]["17"]["padded_tokens"] == 24  # 17 tokens pad to a multiple of TP 8
    for op in doc["per_op"].values():  # pad-free's rows (rank TP - 1) equal sp_shard's, bit for bit
        assert op["pad_free_max_abs_diff"] == 0.0 and op["pad_free_rank"] == 7
    for case in doc["cases"]:
        for design in ("per_arm", "switched"):
            got = case["samples"][design]
            assert sorted(got) == ["pad-free", "replicated", "split"]
            assert all(len(s["wall_us"]) == 4 and s["event_us"] == [] for s in got.values())
            for key in ("split", "pad_free", "pad_free_saves"):
                e = case[design][key]
                assert e["low"] <= e["value"] <= e["high"]
        # every layer call of the switched step ran the arm the switch named: 3 arms x (3 warm-up + 4) steps x 3 layers
        assert case["switch_seen"] == {"replicated": 21, "split": 21, "pad-free": 21}
        assert case["matches"] in ("gpu-bound", "host-bound", "between", "undetermined") and case["filler_gpu_us"] is None
    saved = json.loads((tmp_path / "eager_step.json").read_text())
    assert saved["layers"] == 3 and saved["gemm_backend"] == "torch-bf16" and isinstance(saved["environment"], dict)
    rows = (tmp_path / "eager_step.csv").read_text().splitlines()
    assert len(rows) == 1 + 16 and rows[0].startswith("tokens,host_ops,filler_us,filler_gpu_us,design")
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 8 and all(line.split()[0] in ("16", "17") for line in printed)  # a line per case as it ends


def test_a_switched_step_runs_the_arm_the_switch_names_at_every_layer():
    """The switch is read at each layer call: set between steps, every layer of the next step runs that arm
    (CPU, real candidates of a tiny projection; the counts, not the times, are checked)."""
    torch = pytest.importorskip("torch")
    from spx.research.eager_step import ArmSwitch, make_switched_step, time_switched

    calls: list[str] = []

    class Layer:  # stand-in for spx.bench.candidates.Candidates: records which arm's op ran
        split_launched = pad_free_launched = None

        def __init__(self):
            for arm in ("replicated", "split", "pad_free"):
                setattr(self, arm, lambda arm=arm: calls.append(arm))

    switch = ArmSwitch()
    step = make_switched_step([Layer(), Layer()], switch, 0.0, 1, torch.zeros(1))
    got = time_switched(step, switch, ["replicated", "split", "pad-free"], samples=5, warmup=1,
                        device=torch.device("cpu"), seed=3)
    assert {a: len(s.wall_us) for a, s in got.items()} == {"replicated": 5, "split": 5, "pad-free": 5}
    assert switch.seen == {"replicated": 12, "split": 12, "pad-free": 12}
    assert len(calls) == 36 and all(calls[i] == calls[i + 1] for i in range(0, 36, 2))  # both layers, one arm
    with pytest.raises(ValueError, match="arm must be one of"):
        switch.set("splitt")
