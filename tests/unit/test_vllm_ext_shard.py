"""The pad-free shard (spx.vllm_ext.shard) against vLLM 0.33.0's own ``sp_shard``
(``vllm/models/common/ops/sequence_parallel.py``, the real function with its TP rank and size set per case):
every rank's shard has the same rows and values, the gathered-and-trimmed stream equals the input, and a full
shard is a view (no copy)."""

from __future__ import annotations

import pytest

from spx.vllm_ext.shard import pad_free_shard_of, shard_rows

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(("tokens", "tp", "rank", "rows"), [
    (2048, 8, 0, (0, 256, 256)), (2049, 8, 7, (1799, 2049, 257)), (2049, 8, 0, (0, 257, 257)),
    (9, 8, 4, (8, 9, 2)), (9, 8, 5, (9, 9, 2)), (0, 2, 1, (0, 0, 0)), (5, 1, 0, (0, 5, 5)),
])
def test_shard_rows(tokens: int, tp: int, rank: int, rows: tuple[int, int, int]) -> None:
    assert shard_rows(tokens, tp, rank) == rows


@pytest.mark.parametrize(("tokens", "tp", "rank"), [(-1, 2, 0), (4, 0, 0), (4, 2, 2), (4, 2, -1)])
def test_shard_rows_refuses_bad_input(tokens: int, tp: int, rank: int) -> None:
    with pytest.raises(ValueError, match="need tokens"):
        shard_rows(tokens, tp, rank)


@pytest.mark.parametrize("tokens", [1, 7, 8, 9, 63, 64, 65, 2047, 2048, 2049, 2055])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_pad_free_shard_equals_vllms_sp_shard_at_every_rank(tokens: int, tp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    sp = pytest.importorskip("vllm.models.common.ops.sequence_parallel")
    x = torch.randn(tokens, 16, dtype=torch.bfloat16)
    shards = []
    for rank in range(tp):
        monkeypatch.setattr(sp, "get_tensor_model_parallel_world_size", lambda tp=tp: tp)
        monkeypatch.setattr(sp, "get_tensor_model_parallel_rank", lambda rank=rank: rank)
        ours, theirs = pad_free_shard_of(x, tp, rank), sp.sp_shard(x)
        assert ours.shape == theirs.shape and torch.equal(ours, theirs), (tokens, tp, rank)
        start, stop, chunk = shard_rows(tokens, tp, rank)
        if stop - start == chunk:  # a full shard is the input's own rows, not a copy
            assert ours.data_ptr() == x[start:].data_ptr()
        shards.append(ours)
    assert torch.equal(torch.cat(shards)[:tokens], x)  # the all-gather, then the caller's [:num_tokens]


@pytest.mark.parametrize("tokens", [1, 9, 2048, 2049, 8191])
@pytest.mark.parametrize("tp", [2, 8])
def test_the_extensions_shard_is_the_kernel_benchs(tokens: int, tp: int) -> None:
    """The copy inside vLLM (spx.vllm_ext.shard) and the kernel sweep's pad-free candidate give the same shard."""
    from spx.bench.sequence_parallel import pad_free_shard

    x = torch.randn(tokens, 8)
    for rank in range(tp):
        assert torch.equal(pad_free_shard_of(x, tp, rank), pad_free_shard(x, tp, rank)), (tokens, tp, rank)
