"""The input-projection stage on CPU (a smoke run): layer kinds and counts, streams at the threshold, totals."""

import pytest

torch = pytest.importorskip("torch")

from spx.analysis.stage import chunk_total, stage_table_lines  # noqa: E402
from spx.api import ExperimentSpec  # noqa: E402
from spx.api.stage import StageSpec, v41_layer_kinds  # noqa: E402
from spx.bench.stage import compressor_mm, run_stage  # noqa: E402


def test_v41_layer_kinds_cover_40_layers():
    kinds = {k.name: k for k in v41_layer_kinds()}
    assert {n: len(k.layers) for n, k in kinds.items()} == {"plain": 32, "kv-source": 3, "kv-source-half": 1,
                                                           "indexer-only": 4}
    assert kinds["kv-source"].layers == [2, 8, 14] and kinds["kv-source-half"].layers == [20]
    assert kinds["indexer-only"].layers == [24, 28, 32, 36]
    assert (kinds["kv-source"].compressor_output_size, kinds["kv-source-half"].compressor_output_size) == (1024, 512)
    assert {k.indexer_heads for n, k in kinds.items() if n != "plain"} == {32} and kinds["plain"].indexer_heads == 0
    assert sorted(i for k in kinds.values() for i in k.layers) == list(range(40))


def test_a_layer_in_two_kinds_is_refused():
    with pytest.raises(ValueError, match="layer 2 is in both 'a' and 'b'"):
        StageSpec.model_validate({"layerKinds": [{"name": "a", "layers": [1, 2]}, {"name": "b", "layers": [2]}]})


def test_compressor_mm_outputs_fp32():
    h = torch.randn(5, 64).to(torch.bfloat16)
    w = torch.randn(16, 64).to(torch.bfloat16)
    out = compressor_mm(h, w)
    assert out.dtype == torch.float32 and out.shape == (5, 16)
    torch.testing.assert_close(out, h.float() @ w.float().t(), rtol=1e-2, atol=1e-2)


def test_stage_on_cpu_runs_every_kind_with_streams_switching_at_the_threshold():
    spec = ExperimentSpec.model_validate({
        "projection": {"hiddenSize": 128, "outputSizes": [64, 32]},
        "parallelism": {"tensorParallelSize": 4},
        "sweep": {"tokens": [16, 17]},
        "kernel": {"device": "cpu", "samples": 5, "warmup": 1},
        "stage": {"multiStreamThreshold": 16, "chunkTokens": 16, "layerKinds": [
            {"name": "plain", "layers": [0, 1, 3]},
            {"name": "kv-source", "layers": [2], "compressorOutputSize": 64, "indexerHeads": 8},
            {"name": "indexer-only", "layers": [4, 5], "indexerHeads": 8},
        ]},
    })
    result = run_stage(spec)
    assert result is not None and result.device == "cpu" and any("CPU smoke run" in w for w in result.warnings)
    rows = {(r.kind, r.tokens): r for r in result.rows}
    assert set(rows) == {(k, t) for k in ("plain", "kv-source", "indexer-only") for t in (16, 17)}
    assert rows["plain", 16].streams == "none" and rows["plain", 16].layers == 3
    assert rows["kv-source", 16].streams == "parallel" and rows["kv-source", 17].streams == "sequential"
    assert rows["indexer-only", 17].layers == 2
    model = spec.kernel.gather_model
    kv = rows["kv-source", 16].candidates
    assert set(kv) == {"replicated", "split", "split-all"}
    assert kv["replicated"].modelled_gather_us == 0.0
    assert kv["split"].modelled_gather_host_us == model.host_us
    assert kv["split-all"].modelled_gather_host_us == 3 * model.host_us  # main + compressor + indexer gathers
    # the compressor's gather moves fp32 (4 B), the others the activation dtype
    assert kv["split-all"].modelled_gather_us == pytest.approx(abs=1e-3, expected=
        model.gather_us(16, 96, 2, 4) + model.gather_us(16, 64, 4, 4) + model.gather_us(16, 8, 2, 4))
    for r in result.rows:
        for c in r.candidates.values():  # the host-bound regime's time is the host issue time, never max(host, span)
            assert c.host_us is not None and c.host_bound_us is None
    total = chunk_total(result.rows, 16, "host-bound")
    assert total is not None and total.layers == 6
    assert total.total_us["replicated"] == pytest.approx(
        sum(r.layers * r.candidates["replicated"].host_us for r in result.rows if r.tokens == 16))
    text = "\n".join(stage_table_lines(result))
    assert "gpu-bound (µs per layer)" in text and "host-bound (µs per layer)" in text and "split saves ms" in text
