"""vLLM general plugin: set DeepSeek-V4.1's token-split threshold from the environment.

Registered under the entry-point group ``vllm.general_plugins`` (name ``spx_shard_threshold``,
value ``spx.vllm_ext.plugin:register``). vLLM calls :func:`register` in every process it starts (API
server, engine core, each GPU worker) before any model is built. With
``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` set, it imports ``vllm.models.deepseek_v41.attention`` and
sets its module constant ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` (vLLM ≥ 0.33, default 2048), which the
gate ``_shard_fused_wqa_wkv`` in ``vllm/models/deepseek_v41/nvidia/model.py`` compares a batch's
token count with. Then it logs what it set. One bench image thus serves both A/B arms:

- ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=off`` (main arm): the threshold becomes :data:`OFF_TOKENS`
  = 2,147,483,647 (2³¹ − 1), a token count no batch reaches (a batch is bounded by
  ``--max-num-batched-tokens``), so the projection is never split; the value still fits an int32
  should a kernel ever receive it.
- ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=<n>`` (split arm, or a deployment adopting a measured
  recommendation): split from ``n`` tokens on; ``n`` is a positive integer.
- unset or empty: the plugin does nothing (vLLM's own default stays).

A vLLM without the module or the symbol, an invalid value, or a symbol that is not an integer is a
startup error (``RuntimeError``), never a silent no-op: an A/B arm that silently ran vLLM's default
would measure nothing. Modules of the same package that already copied the constant
(``from .attention import _SHARD_FUSED_WQA_WKV_MIN_TOKENS``) are updated too; later importers copy
the new value. ``SPX_SHARD_FUSED_WQA_WKV_TARGET`` overrides the module path (tests use stand-ins).

Idempotent: vLLM may load plugins several times per process. Importing this module has no side
effects and does not import vLLM.

The line it logs starts with :data:`LOG_MARKER`; it goes through vLLM's logger where vLLM has
configured logging (engine core, workers) and to stderr where it has not yet (vLLM 0.33's API server
loads plugins while it builds its argument parser, before configuring logging), so every process's
log shows it. Tested against the real vLLM 0.33.0 in ``tests/real_vllm/test_plugin.py``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from types import ModuleType

from spx.vocabulary import PLUGIN_ENTRY_POINT_NAME as ENTRY_POINT_NAME  # noqa: F401  (the plugin's public name)
from spx.vocabulary import PLUGIN_ENV_TARGET as ENV_TARGET
from spx.vocabulary import PLUGIN_ENV_THRESHOLD as ENV_THRESHOLD
from spx.vocabulary import PLUGIN_LOG_MARKER as LOG_MARKER
from spx.vocabulary import PLUGIN_OFF_TOKENS, PLUGIN_THRESHOLD_OFF

DEFAULT_TARGET = "vllm.models.deepseek_v41.attention"
SYMBOL = "_SHARD_FUSED_WQA_WKV_MIN_TOKENS"
#: The threshold ``off`` stands for (:data:`spx.vocabulary.PLUGIN_OFF_TOKENS`).
OFF_TOKENS = PLUGIN_OFF_TOKENS
ENTRY_POINT_GROUP = "vllm.general_plugins"

# A child of vLLM's "vllm" logger, so vLLM's handler and format print it in the server log.
logger = logging.getLogger("vllm.plugins.spx_shard_threshold")


class ThresholdPluginError(RuntimeError):
    """The threshold could not be applied; vLLM must not start."""


def parse_threshold(raw: str) -> int:
    """``off`` → :data:`OFF_TOKENS`; a positive integer (``_`` separators allowed) → itself.

    Raises:
        ThresholdPluginError: anything else.
    """
    value = raw.strip()
    if value.lower() == PLUGIN_THRESHOLD_OFF:
        return OFF_TOKENS
    digits = value.replace("_", "")
    tokens = int(digits) if digits.isascii() and digits.isdigit() else 0
    if tokens <= 0:
        raise ThresholdPluginError(
            f"{ENV_THRESHOLD}={raw!r} is not a token count: use a positive integer (e.g. 2048) or 'off'"
        )
    return tokens


def _vllm_version() -> str:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return "unknown"


def apply(environ: Mapping[str, str] | None = None) -> int | None:
    """Apply ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` from ``environ`` (default ``os.environ``).

    Returns the value set, or ``None`` when the variable is unset/empty (nothing done).

    Raises:
        ThresholdPluginError: invalid value; the target module cannot be imported; it lacks the
            symbol; the symbol is not an int.
    """
    env = os.environ if environ is None else environ
    raw = env.get(ENV_THRESHOLD, "")
    if raw.strip() == "":
        logger.debug("%s unset: leaving vLLM's fused_wqa_wkv split threshold as it is", ENV_THRESHOLD)
        return None
    tokens = parse_threshold(raw)
    target = env.get(ENV_TARGET, "").strip() or DEFAULT_TARGET
    try:
        module = importlib.import_module(target)
    except Exception as err:
        raise ThresholdPluginError(
            f"{ENV_THRESHOLD}={raw} is set but {target} cannot be imported ({type(err).__name__}: {err}); "
            f"the token-split threshold needs vLLM ≥ 0.33 with DeepSeek-V4.1 (installed vLLM: {_vllm_version()}). "
            f"Refusing to start with the threshold unapplied; unset {ENV_THRESHOLD} to run vLLM unchanged."
        ) from err
    if not hasattr(module, SYMBOL):
        raise ThresholdPluginError(
            f"{ENV_THRESHOLD}={raw} is set but {target} has no {SYMBOL}: this vLLM ({_vllm_version()}) does "
            f"not split fused_wqa_wkv by token (needs vLLM ≥ 0.33). Refusing to start rather than silently "
            f"running without the threshold; unset {ENV_THRESHOLD} to run vLLM unchanged."
        )
    previous = getattr(module, SYMBOL)
    if isinstance(previous, bool) or not isinstance(previous, int):
        raise ThresholdPluginError(
            f"{target}.{SYMBOL} is {previous!r} ({type(previous).__name__}), not a token count; this vLLM's "
            f"threshold is not what spx knows how to set"
        )
    copies = set_threshold(module, target, tokens)
    shown = "off (never split)" if tokens == OFF_TOKENS else f"{tokens} tokens"
    also = f"; also updated the copies in {', '.join(copies)}" if copies else ""
    message = (
        f"{LOG_MARKER}{target}.{SYMBOL} = {tokens} ({shown}; was {previous}) from "
        f"{ENV_THRESHOLD}={raw.strip()} (pid {os.getpid()}){also}"
    )
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s", message)
    else:
        # vLLM ≥ 0.33's API server loads plugins while building its argument parser, before it
        # configures logging: print the line so that process's log shows it too.
        print(f"INFO [spx vllm plugin] {message}", file=sys.stderr, flush=True)
    return tokens


def set_threshold(module: ModuleType, target: str, tokens: int) -> list[str]:
    """Set ``module.<SYMBOL>`` (``module`` imported from ``target``) to ``tokens``, and the copies modules of the
    same package made of its previous value (``from .attention import _SHARD_FUSED_WQA_WKV_MIN_TOKENS``).

    Returns the names of the copies updated. Used at startup (:func:`apply`) and per switch by the worker
    extension (:mod:`spx.vllm_ext.worker`).
    """
    previous = getattr(module, SYMBOL)
    setattr(module, SYMBOL, tokens)
    package = target.rsplit(".", 1)[0] + "."
    copies = []
    for name, mod in list(sys.modules.items()):
        if mod is module or not name.startswith(package) or mod is None:
            continue
        value = getattr(mod, SYMBOL, None)
        if value == previous and isinstance(value, int) and not isinstance(value, bool):
            setattr(mod, SYMBOL, tokens)
            copies.append(name)
    return sorted(copies)


def register() -> None:
    """The ``vllm.general_plugins`` entry point: :func:`apply` on the process environment.

    Raises:
        ThresholdPluginError: see :func:`apply`; vLLM does not catch it, so the process stops.
    """
    apply()
