"""The worker extension the one-server step A/B switches the split with: ``--worker-extension-cls
spx.vllm_ext.worker.SplitSwitch``.

vLLM mixes the class into every worker it starts (``vllm/v1/worker/worker_base.py``: the extension becomes a
base class of the worker; its attribute names must not clash with the worker's, hence the ``spx_`` prefix), and
``VLLM_SERVER_DEV_MODE=1`` exposes ``POST /collective_rpc`` (``vllm/entrypoints/serve/dev/rpc/api_router.py``:
``{"method", "args", "kwargs", "timeout"}``, string arguments only, each worker's result returned in
``{"results": [...]}``). The methods, each answering a JSON object:

- ``spx_state()``: installs the hooks (idempotent) and reports this worker's state (:meth:`SplitSwitch.spx_state`):
  the threshold it reads, the pad mode, the injected delay, its TP rank, and whether its forward is compiled or
  CUDA-graph captured (a compiled or captured forward keeps the branch of its capture whatever the global says:
  the runner refuses such lengths);
- ``spx_switch(state_json)``: sets the arm (threshold, pad-free shard, injected delay), clears the forward
  accounting, reports the state read back;
- ``spx_counts()``: the forwards since the last switch: per forward, the tokens it scheduled and how many times
  it took the split branch.

How the split is seen: DeepSeek-V4.1's ``_fused_wqa_wkv_gemm`` (``vllm/models/deepseek_v41/attention.py``,
vLLM 0.33) compares the batch's token count with the module global ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` at every
call and, above it, calls the module's ``sp_shard`` (imported from ``vllm/models/common/ops/sequence_parallel.py``)
before the GEMM and ``sp_all_gather`` after. The extension replaces the module's ``sp_shard`` by a wrapper that
counts the call and runs vLLM's ``sp_shard`` — or the pad-free shard (:mod:`spx.vllm_ext.shard`) in the
``pad-free`` arm — and wraps the worker's ``execute_model`` to attribute those calls to a forward with its
``scheduler_output.total_num_scheduled_tokens``. The target module is ``vllm.models.deepseek_v41.attention``
unless ``SPX_SHARD_FUSED_WQA_WKV_TARGET`` names another (as for the startup plugin: tests use stand-ins).

The positive control (``inject_ms``): after a forward with tokens returns, the worker synchronises the device
(CUDA, when initialised) and waits ``inject_ms`` on the host, so the step is longer by that much.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import time
from typing import Any

from spx.vllm_ext.plugin import DEFAULT_TARGET, OFF_TOKENS, SYMBOL, set_threshold
from spx.vllm_ext.shard import pad_free_sp_shard
from spx.vocabulary import PLUGIN_ENV_TARGET as ENV_TARGET

#: The module function the split branch calls and the extension counts (vLLM 0.33's V4.1 attention module).
SHARD_FUNCTION = "sp_shard"


class SplitSwitchError(RuntimeError):
    """The extension cannot switch or count the split on this worker (no target module, symbol or sp_shard)."""


@dataclasses.dataclass
class _State:
    """One worker's switch state and forward accounting."""

    target: str
    module: Any
    original_shard: Any
    pad_free: bool = False
    inject_ms: float = 0.0
    split_calls: int = 0
    forwards: list[list[int]] = dataclasses.field(default_factory=list)


def _hold(ms: float) -> None:
    """Wait ``ms`` on the host: sleep most of it, spin the last 2 ms (``time.sleep`` overshoots)."""
    end = time.perf_counter() + ms / 1000.0
    while (left := end - time.perf_counter()) > 0.002:
        time.sleep(left - 0.002)
    while time.perf_counter() < end:
        pass


def _sync_device() -> None:
    """Wait for the device's queued work (CUDA, once initialised), so an injected wait follows the forward's work."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()


def load_target(target: str) -> Any:
    """Import ``target`` and check it has the integer threshold and a callable ``sp_shard``.

    Raises:
        SplitSwitchError: naming the module, what is missing and the fix.
    """
    try:
        module = importlib.import_module(target)
    except Exception as err:
        raise SplitSwitchError(
            f"the split target {target} cannot be imported ({type(err).__name__}: {err}): the step A/B needs vLLM "
            f"≥ 0.33 with DeepSeek-V4.1, or {ENV_TARGET} naming a module with {SYMBOL} and {SHARD_FUNCTION}"
        ) from err
    value = getattr(module, SYMBOL, None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SplitSwitchError(f"{target}.{SYMBOL} is {value!r}, not a token count: this vLLM has no token split")
    if not callable(getattr(module, SHARD_FUNCTION, None)):
        raise SplitSwitchError(f"{target} has no callable {SHARD_FUNCTION}: the split branch cannot be counted")
    return module


def compile_state(vllm_config: Any) -> dict[str, Any]:
    """Whether the forward is compiled and the CUDA-graph capture sizes (tokens) of ``vllm_config``.

    Read from ``compilation_config.mode`` (``CompilationMode.NONE`` = 0: eager), ``compilation_config.cudagraph_mode``
    (``NONE``: no graph) and ``cudagraph_capture_sizes``, and ``model_config.enforce_eager`` (vLLM 0.32/0.33
    ``vllm/config/compilation.py``); a config without them reads as eager with no graphs.
    """
    comp = getattr(vllm_config, "compilation_config", None)
    model = getattr(vllm_config, "model_config", None)
    eager = bool(getattr(model, "enforce_eager", False))
    mode = getattr(comp, "mode", None)
    compiled = not eager and mode is not None and int(getattr(mode, "value", mode)) != 0
    graph_mode = getattr(comp, "cudagraph_mode", None)
    graphs = not eager and graph_mode is not None and str(getattr(graph_mode, "name", graph_mode)) != "NONE"
    sizes = [int(s) for s in (getattr(comp, "cudagraph_capture_sizes", None) or [])] if graphs else []
    return {"compiled": compiled, "captureSizes": sorted(sizes), "enforceEager": eager,
            "compilationMode": str(getattr(mode, "name", mode)), "cudagraphMode": str(getattr(graph_mode, "name", graph_mode))}


class SplitSwitch:
    """Mixed into every vLLM worker by ``--worker-extension-cls spx.vllm_ext.worker.SplitSwitch`` (module docstring).

    Every method is called through ``POST /collective_rpc`` and answers a JSON object. Errors raised here reach
    the caller as vLLM's RPC error (HTTP 500 with the message).
    """

    def _spx(self) -> _State:
        """The state, installing the hooks on first use (the sp_shard wrapper and the execute_model wrapper)."""
        state: _State | None = self.__dict__.get("_spx_state")
        if state is not None:
            return state
        target = os.environ.get(ENV_TARGET, "").strip() or DEFAULT_TARGET
        module = load_target(target)
        state = _State(target=target, module=module, original_shard=getattr(module, SHARD_FUNCTION))

        def counted_shard(x: Any) -> Any:
            state.split_calls += 1
            return pad_free_sp_shard(x) if state.pad_free else state.original_shard(x)

        setattr(module, SHARD_FUNCTION, counted_shard)
        inner = getattr(self, "execute_model")  # noqa: B009  (the worker's; this mixin has none)

        def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            before = state.split_calls
            out = inner(scheduler_output, *args, **kwargs)
            tokens = int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0)
            if tokens > 0:
                if state.inject_ms > 0:
                    _sync_device()
                    _hold(state.inject_ms)
                state.forwards.append([tokens, state.split_calls - before])
            return out

        setattr(self, "execute_model", execute_model)  # noqa: B010  (an instance attribute shadows the worker's)
        self.__dict__["_spx_state"] = state
        self._spx_installed()
        return state

    def _spx_installed(self) -> None:
        """Called once after the hooks are installed (a subclass adds its own)."""

    def spx_state(self) -> dict[str, Any]:
        """This worker's state: ``pid``, ``rank`` / ``tpRank`` / ``tpSize``, ``target``, ``threshold`` (tokens, as the
        target module holds it now), ``padFree``, ``injectMs``, and :func:`compile_state`'s fields."""
        state = self._spx()
        tp_rank = tp_size = None
        try:
            from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

            tp_rank, tp_size = get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
        except Exception:  # not initialised (never so in a serving worker)
            pass
        return {"pid": os.getpid(), "rank": getattr(self, "rank", None), "tpRank": tp_rank, "tpSize": tp_size,
                "target": state.target, "threshold": int(getattr(state.module, SYMBOL)),
                "padFree": state.pad_free, "injectMs": state.inject_ms,
                **compile_state(getattr(self, "vllm_config", None))}

    def spx_switch(self, arm_json: str) -> dict[str, Any]:
        """Switch the arm: ``arm_json`` is ``{"threshold": tokens (null: off), "padFree": bool, "injectMs": ms}``.
        Clears the forward accounting; answers :meth:`spx_state` as read back.

        Raises:
            SplitSwitchError: malformed JSON, a threshold that is not a positive integer, a negative delay.
        """
        state = self._spx()
        try:
            arm = json.loads(arm_json)
            threshold = OFF_TOKENS if arm.get("threshold") is None else int(arm["threshold"])
            pad_free, inject_ms = bool(arm.get("padFree", False)), float(arm.get("injectMs", 0.0))
        except (ValueError, TypeError, AttributeError) as err:
            raise SplitSwitchError(f"spx_switch: {arm_json[:200]!r} is not an arm ({err})") from err
        if threshold <= 0 or inject_ms < 0:
            raise SplitSwitchError(f"spx_switch: threshold {threshold} must be > 0 and injectMs {inject_ms} ≥ 0")
        set_threshold(state.module, state.target, threshold)
        state.pad_free, state.inject_ms = pad_free, inject_ms
        state.split_calls, state.forwards = 0, []
        return self.spx_state()

    def spx_counts(self) -> dict[str, Any]:
        """The forwards since the last switch: ``{"forwards": [[tokens, split_calls], ...], "threshold": tokens}``
        (``split_calls``: how many times that forward took the split branch, once per layer that splits)."""
        state = self._spx()
        return {"forwards": [list(f) for f in state.forwards], "threshold": int(getattr(state.module, SYMBOL)),
                "rank": getattr(self, "rank", None)}
