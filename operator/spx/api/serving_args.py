"""Reading a flag of ``spec.serving.extraArgs`` the way ``vllm serve`` parses it.

vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``) turns ``--max_num_batched_tokens`` into
``--max-num-batched-tokens`` before argparse sees it, and argparse takes ``--flag N`` and ``--flag=N`` (also for
the single-dash alias ``-tp``); the last occurrence wins. So every spelling is read here, once, for the
refusals of :mod:`spx.api.spec` and the deployment's batch size (:func:`spx.analysis.decide.max_num_batched_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence

#: vLLM's flag for the largest batch (tokens) the scheduler forms (``EngineArgs.max_num_batched_tokens``).
MAX_NUM_BATCHED_TOKENS_FLAG = "--max-num-batched-tokens"
#: vLLM's flag for the longest sequence (prompt + output tokens) a request may have.
MAX_MODEL_LEN_FLAG = "--max-model-len"
#: vLLM's flag for the TP size, and its alias.
TENSOR_PARALLEL_FLAGS = ("--tensor-parallel-size", "-tp")


def _canonical(arg: str) -> str:
    """``--max_num_batched_tokens=8`` → ``--max-num-batched-tokens=8`` (only the name part; as vLLM's parser)."""
    if not arg.startswith("--"):
        return arg
    name, eq, value = arg.partition("=")
    return name.replace("_", "-") + eq + value


def extra_arg_value(args: Sequence[str], *flags: str) -> str | None:
    """The value of the last of ``flags`` in ``args`` as vLLM reads it (``--flag V``, ``--flag=V``, underscores or
    dashes in the name), ``""`` for a flag at the end without a value, ``None`` when absent.

    Args:
        args: ``spec.serving.extraArgs``.
        flags: the flag's spellings with dashes (e.g. ``--tensor-parallel-size``, ``-tp``).
    """
    value: str | None = None
    canon = [_canonical(a) for a in args]
    for i, arg in enumerate(canon):
        for flag in flags:
            if arg == flag:
                value = canon[i + 1] if i + 1 < len(canon) else ""
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
    return value


def extra_arg_int(args: Sequence[str], *flags: str) -> int | None:
    """:func:`extra_arg_value` as an integer (``None`` when absent).

    Raises:
        ValueError: present without a value or with one that is not an integer (the message names the flag).
    """
    value = extra_arg_value(args, *flags)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flags[0]} needs an integer, got {value[:40]!r}") from None
