"""How vLLM executes a batch of M tokens: in a CUDA graph or eagerly, and with how many streams.

Pure rules read from vLLM 0.33.0 (the wheel), table-tested in ``tests/unit/test_analysis_execution.py``:

- **CUDA graphs.** ``DeepseekV41ForCausalLM`` is never torch.compiled and is in
  ``DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES`` (``vllm/config/vllm.py``). ``_set_cudagraph_sizes``
  captures batch sizes up to ``max_cudagraph_capture_size = min(max_num_seqs ×
  uniform_decode_query_len × 2, 512)`` on Hopper (1024 on data-centre Blackwell, compute capability
  10.x), ``uniform_decode_query_len = 1 + num_speculative_tokens``; "if batch size > largest
  cudagraph_capture_sizes, cudagraph will not be used": larger batches run eagerly, op by op.
- **Streams.** ``execute_in_parallel`` (``vllm/utils/multi_stream_utils.py``) runs the compressor's and
  the indexer's GEMMs on auxiliary streams only while ``num_tokens <=
  VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD`` (default 1024, ``vllm/envs.py``), sequentially on the
  current stream above.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from spx.vocabulary import Execution
from spx.vocabulary import ExecutionMode as ExecutionMode
from spx.vocabulary import StreamMode as StreamMode

#: ``_set_cudagraph_sizes``' cap on Hopper and earlier (``vllm/config/vllm.py``).
HOPPER_CAPTURE_LIMIT = 512
#: The cap on data-centre Blackwell (compute capability 10.x).
BLACKWELL_CAPTURE_LIMIT = 1024
#: ``VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD``'s default (``vllm/envs.py``).
MULTI_STREAM_GEMM_TOKEN_THRESHOLD = 1024


def capture_cap(capability: tuple[int, int] | None) -> int:
    """The largest capture size vLLM 0.33 allows on a GPU of this compute capability (tokens).

    1024 on compute capability 10.x (data-centre Blackwell), 512 otherwise (and with ``None``: CPU).
    """
    return BLACKWELL_CAPTURE_LIMIT if capability is not None and capability[0] == 10 else HOPPER_CAPTURE_LIMIT


def serving_batch_args(args: Sequence[str]) -> tuple[int | None, int]:
    """``(--max-num-seqs, num_speculative_tokens)`` from a ``vllm serve`` argument list.

    Reads ``--max-num-seqs N`` / ``--max-num-seqs=N`` and ``--speculative-config JSON`` (its
    ``num_speculative_tokens``). Missing: ``(None, 0)``.

    Raises:
        ValueError: a value that is not an integer / JSON object, naming the argument.
    """
    max_num_seqs: int | None = None
    spec_tokens = 0
    items = list(args)
    for i, arg in enumerate(items):
        name, _, inline = arg.partition("=")
        if name not in ("--max-num-seqs", "--speculative-config"):
            continue
        value = inline if inline else (items[i + 1] if i + 1 < len(items) else "")
        if name == "--max-num-seqs":
            try:
                max_num_seqs = int(value)
            except ValueError:
                raise ValueError(f"serving.extraArgs: --max-num-seqs needs an integer, got {value[:40]!r}") from None
        else:
            try:
                config = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"serving.extraArgs: --speculative-config needs a JSON object, got {value[:80]!r}") from None
            if isinstance(config, dict):
                spec_tokens = int(config.get("num_speculative_tokens") or 0)
    return max_num_seqs, spec_tokens


def max_cudagraph_capture_size(
    capability: tuple[int, int] | None,
    max_num_seqs: int | None = None,
    num_speculative_tokens: int = 0,
    override: int | None = None,
) -> tuple[int, str]:
    """vLLM 0.33's ``max_cudagraph_capture_size`` (tokens) and how it was derived.

    ``override`` (``spec.kernel.maxCudagraphCaptureSize``) wins; else ``min(max_num_seqs × (1 +
    num_speculative_tokens) × 2, cap)`` with :func:`capture_cap`, or the cap alone without
    ``max_num_seqs`` (vLLM's default ``max_num_seqs`` is at least 256, above the cap's half).
    """
    if override is not None:
        return override, f"maxCudagraphCaptureSize {override} (spec)"
    cap = capture_cap(capability)
    sm = f"SM{capability[0]}{capability[1]}" if capability else "CPU"
    if max_num_seqs is None:
        return cap, f"vLLM 0.33's cap on {sm}: {cap} (no --max-num-seqs given)"
    query_len = 1 + num_speculative_tokens
    size = min(max_num_seqs * query_len * 2, cap)
    return size, (f"vLLM 0.33: min(max_num_seqs {max_num_seqs} x decode query len {query_len} x 2, {cap} on {sm}) "
                  f"= {size}")


def graph_or_eager(tokens: int, execution: Execution | str, capture_size: int) -> tuple[ExecutionMode, str]:
    """How a point of ``tokens`` is timed under ``spec.kernel.execution`` and why.

    ``auto``: ``graph`` when ``tokens <= capture_size`` (vLLM captures that batch size), else ``eager``;
    ``graph`` / ``eager``: forced.

    Raises:
        ValueError: an unknown ``execution`` or ``tokens < 1``.
    """
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    if execution == "graph":
        return "graph", "execution: graph (forced)"
    if execution == "eager":
        return "eager", "execution: eager (forced)"
    if execution != "auto":
        raise ValueError(f"spec.kernel.execution: unknown mode {execution!r}; use auto, graph or eager")
    if tokens <= capture_size:
        return "graph", f"auto: {tokens} <= max_cudagraph_capture_size {capture_size}: vLLM replays a CUDA graph"
    return "eager", f"auto: {tokens} > max_cudagraph_capture_size {capture_size}: vLLM runs this batch eagerly"


def stream_mode(tokens: int, threshold: int = MULTI_STREAM_GEMM_TOKEN_THRESHOLD) -> StreamMode:
    """``parallel`` (auxiliary streams) while ``tokens <= threshold``, else ``sequential`` (``execute_in_parallel``)."""
    return "parallel" if tokens <= threshold else "sequential"
