"""spx's port of vLLM 0.33's ``sp_shard`` equals vLLM's own (real vLLM, CPU).

The port (:func:`spx.bench.sequence_parallel.sp_shard`) is what the split candidate runs where vLLM
is not importable (the GPU bench image). vLLM's ``sp_shard`` reads the TP size and rank from its
initialised TP group; eight ranks cannot run here, so the test replaces the two accessors vLLM's
module reads (``get_tensor_model_parallel_world_size`` / ``_rank``, the only inputs besides ``x``)
with this rank's values, and calls vLLM's real function.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from spx.bench.sequence_parallel import VLLM_MODULE, pad_free_shard, sp_shard, sp_trim  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("tokens", [1, 6, 8, 37, 2048, 2049])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_sp_shard_port_equals_vllm(monkeypatch, tokens, tp):
    vllm_sp = importlib.import_module(VLLM_MODULE)
    x = torch.randn(tokens, 24).to(torch.bfloat16)
    monkeypatch.setattr(vllm_sp, "get_tensor_model_parallel_world_size", lambda: tp)
    for rank in range(tp):
        monkeypatch.setattr(vllm_sp, "get_tensor_model_parallel_rank", lambda rank=rank: rank)
        theirs = vllm_sp.sp_shard(x)
        ours = sp_shard(x, tp, rank)
        assert ours.shape == theirs.shape
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("tokens", [1, 3, 8, 9, 2048, 2049, 8185])
@pytest.mark.parametrize("tp", [2, 8])
def test_pad_free_shard_equals_vllms_sp_shard(monkeypatch, tokens, tp):
    """spx's pad-free shard gives every rank exactly vLLM 0.33's sp_shard rows (so the gathered output is the same)."""
    vllm_sp = importlib.import_module(VLLM_MODULE)
    x = torch.randn(tokens, 24).to(torch.bfloat16)
    monkeypatch.setattr(vllm_sp, "get_tensor_model_parallel_world_size", lambda: tp)
    for rank in range(tp):
        monkeypatch.setattr(vllm_sp, "get_tensor_model_parallel_rank", lambda rank=rank: rank)
        assert torch.equal(pad_free_shard(x, tp, rank), vllm_sp.sp_shard(x))


def test_trim_after_gather_is_the_first_tokens_rows():
    gathered = torch.arange(40).reshape(10, 4)
    assert torch.equal(sp_trim(gathered, 7), gathered[:7])
