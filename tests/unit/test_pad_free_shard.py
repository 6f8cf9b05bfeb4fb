"""The pad-free shard (spx's proposal for vLLM's sp_shard): same rows as sp_shard, a view where it can be,
the same gathered output on 2 gloo ranks, and its figures in a CPU sweep's result document.

CPU runs prove the pipeline and the equality only; no timing outcome is asserted.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from spx.api import ExperimentSpec, KernelResult  # noqa: E402
from spx.bench.sequence_parallel import pad_free_shard, shard_rows, sp_shard  # noqa: E402

COUNTS = [1, 2, 3, 7, 8, 9, 16, 17, 37, 2048, 2049, 2055]


@pytest.mark.parametrize(("tokens", "tp", "rank", "expected"), [
    (2049, 8, 0, (0, 257, 0)), (2049, 8, 7, (1799, 2049, 7)), (2048, 8, 7, (1792, 2048, 0)),
    (3, 8, 2, (2, 3, 0)), (3, 8, 5, (3, 3, 1)), (9, 8, 4, (8, 9, 1)), (9, 8, 6, (9, 9, 2)), (1, 1, 0, (0, 1, 0)),
])
def test_shard_rows_are_sp_shards_rows(tokens, tp, rank, expected):
    assert shard_rows(tokens, tp, rank) == expected


@pytest.mark.parametrize("tokens", COUNTS)
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_pad_free_shard_equals_sp_shard_on_every_rank(tokens, tp):
    x = torch.randn(tokens, 24).to(torch.bfloat16)
    for rank in range(tp):
        ours, theirs = pad_free_shard(x, tp, rank), sp_shard(x, tp, rank)
        assert ours.shape == theirs.shape and torch.equal(ours, theirs)


@pytest.mark.parametrize(("tokens", "tp", "copying_ranks"), [(2048, 8, []), (2049, 8, [7]), (2055, 8, [7]),
                                                            (9, 8, [4, 5, 6, 7]), (1, 2, [1])])
def test_only_a_short_trailing_shard_is_copied(tokens, tp, copying_ranks):
    """A rank whose rows are all real gets a view of x (no copy); sp_shard copies x on every rank when M % TP != 0."""
    x = torch.randn(tokens, 16)
    base = x.untyped_storage().data_ptr()
    copied = [r for r in range(tp) if pad_free_shard(x, tp, r).untyped_storage().data_ptr() != base]
    assert copied == copying_ranks
    vllm_copies = [r for r in range(tp) if sp_shard(x, tp, r).untyped_storage().data_ptr() != base]
    assert vllm_copies == ([] if tokens % tp == 0 else list(range(tp)))


def test_shard_rows_refuses_a_rank_outside_tp():
    with pytest.raises(ValueError, match="rank 8 is outside"):
        shard_rows(16, 8, 8)


def _spec(tokens, tp, device="cpu"):
    return ExperimentSpec.model_validate({
        "projection": {"hiddenSize": 256, "outputSizes": [96, 32]},
        "parallelism": {"tensorParallelSize": tp},
        "sweep": {"tokens": tokens},
        "kernel": {"device": device, "samples": 5, "warmup": 1},
    })


def test_two_gloo_ranks_gather_the_same_output_as_sp_shard(tmp_path):
    """Two real gloo ranks (the kernel bench through spx.runner.local): at aligned and off-aligned M, M < TP
    included, the pad-free candidate's gathered, trimmed output equals the sp_shard path's bit for bit
    (padFreeMaxAbsDiff, max over ranks), and the result document carries the candidate."""
    from spx.runner.local import run_local

    tokens = [1, 2, 3, 8, 37]
    outcome = run_local(_spec(tokens, 2), tmp_path / "out", nproc=2, experiment="pad-free")
    assert outcome.ok, outcome.error
    doc = KernelResult.model_validate_json((tmp_path / "out" / "result.json").read_text())
    assert doc.gather_source == "measured" and doc.world_size == 2
    assert [p.tokens for p in doc.points] == tokens
    for p in doc.points:
        assert p.pad_free is not None and len(p.pad_free.samples_us) == 5
        assert p.pad_free_rank == 0 and p.pad_free_max_abs_diff == 0.0
        assert p.pad_free.kernels == ["cpu:linear", "gloo:all_gather"]


def test_a_cpu_sweep_result_document_carries_pad_free_and_its_summary():
    """One rank, modelled gather: pad-free plays rank TP - 1 (the rank that pads) and equals sp_shard's rows."""
    from spx.analysis.pad_free import describe_pad_free, pad_free_summary
    from spx.bench.kernel import run_kernel_bench

    result = run_kernel_bench(_spec([3, 8, 37], 4))
    doc = KernelResult.model_validate_json(result.model_dump_json(by_alias=True))
    assert '"padFree"' in result.model_dump_json(by_alias=True)
    for p in doc.points:
        assert p.pad_free is not None and p.pad_free_rank == 3 and p.pad_free_max_abs_diff == 0.0
    summary = pad_free_summary(doc, layers=40)
    assert [r.tokens for r in summary.rows] == [3, 8, 37] and [r.pad_rows for r in summary.rows] == [1, 0, 3]
    assert all(r.saved_chunk_us == pytest.approx(40 * r.saved_us) for r in summary.rows)
    lines = describe_pad_free(summary)
    assert "proposal for vLLM" in lines[0] and len(lines) == 5


def test_a_wrong_pad_free_shard_is_caught_before_timing(monkeypatch):
    """The named failure: a pad-free shard that takes other rows than sp_shard's shows as padFreeMaxAbsDiff > 0."""
    import spx.bench.candidates as candidates
    from spx.bench.kernel import run_kernel_bench

    monkeypatch.setattr(candidates, "pad_free_shard", lambda x, tp, rank: sp_shard(x, tp, 0))  # rank 0's rows
    result = run_kernel_bench(_spec([37], 4))
    assert result.points[0].pad_free_max_abs_diff > 0
