"""vLLM 0.33's execution rules: CUDA graph vs eager per batch size, multi-stream vs sequential."""

import pytest

from spx.analysis.execution import (
    graph_or_eager,
    max_cudagraph_capture_size,
    serving_batch_args,
    stream_mode,
)


@pytest.mark.parametrize(
    ("tokens", "execution", "limit", "mode"),
    [
        (1, "auto", 512, "graph"),
        (512, "auto", 512, "graph"),
        (513, "auto", 512, "eager"),
        (2048, "auto", 512, "eager"),
        (1024, "auto", 1024, "graph"),
        (1025, "auto", 1024, "eager"),
        (8192, "graph", 512, "graph"),
        (6, "eager", 512, "eager"),
    ],
)
def test_execution_mode_at_the_capture_limit(tokens, execution, limit, mode):
    got, why = graph_or_eager(tokens, execution, limit)
    assert got == mode
    assert (str(limit) in why) if execution == "auto" else ("forced" in why)


def test_execution_mode_refuses_unknown_modes_and_empty_batches():
    with pytest.raises(ValueError, match="spec.kernel.execution: unknown mode 'compiled'"):
        graph_or_eager(8, "compiled", 512)
    with pytest.raises(ValueError, match="tokens must be >= 1"):
        graph_or_eager(0, "auto", 512)


@pytest.mark.parametrize(
    ("capability", "seqs", "spec_tokens", "override", "size"),
    [
        ((9, 0), None, 0, None, 512),  # Hopper cap
        ((10, 0), None, 0, None, 1024),  # data-centre Blackwell
        ((12, 0), None, 0, None, 512),  # consumer Blackwell keeps 512
        (None, None, 0, None, 512),  # CPU: the rule as on Hopper
        ((9, 0), 128, 5, None, 512),  # the seed's serve flags: min(128 x 6 x 2, 512)
        ((9, 0), 16, 0, None, 32),  # min(16 x 1 x 2, 512)
        ((9, 0), 16, 3, None, 128),  # min(16 x 4 x 2, 512)
        ((10, 0), 128, 5, None, 1024),
        ((9, 0), 128, 5, 2048, 2048),  # the spec's value wins
    ],
)
def test_max_cudagraph_capture_size(capability, seqs, spec_tokens, override, size):
    got, why = max_cudagraph_capture_size(capability, seqs, spec_tokens, override)
    assert got == size and str(size) in why


def test_serving_batch_args_reads_vllm_flags():
    assert serving_batch_args([]) == (None, 0)
    assert serving_batch_args(["--max-num-seqs", "128", "--speculative-config",
                               '{"method": "mtp", "num_speculative_tokens": 5}']) == (128, 5)
    assert serving_batch_args(["--max-num-seqs=64"]) == (64, 0)
    with pytest.raises(ValueError, match="--max-num-seqs needs an integer, got 'many'"):
        serving_batch_args(["--max-num-seqs", "many"])
    with pytest.raises(ValueError, match="--speculative-config needs a JSON object"):
        serving_batch_args(["--speculative-config", "{oops"])


@pytest.mark.parametrize(("tokens", "mode"), [(1, "parallel"), (1024, "parallel"), (1025, "sequential"), (8192, "sequential")])
def test_stream_mode_at_the_multi_stream_threshold(tokens, mode):
    assert stream_mode(tokens) == mode
