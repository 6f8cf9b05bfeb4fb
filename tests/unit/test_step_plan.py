"""spx.serving.step_plan: the one-server step A/B's pure decisions (switches, confirmation, refusals, order, argv)."""

from __future__ import annotations

from typing import Any

import pytest

from spx.api.step import StepSpec
from spx.serving.step_plan import (
    OFF_TOKENS,
    Switch,
    forward_accounting,
    forward_confirmed,
    refusals,
    round_order,
    step_server_args,
    switch_confirmed,
    switch_of,
)

STEP = StepSpec(positive_control_ms=1.5)


@pytest.mark.parametrize(("arm", "switch"), [
    ("replicated", Switch(OFF_TOKENS)), ("split", Switch(2049)), ("pad-free", Switch(2049, pad_free=True)),
    ("aa", Switch(2050)), ("positive-control", Switch(OFF_TOKENS, inject_ms=1.5)),
])
def test_switch_of_each_arm(arm: Any, switch: Switch) -> None:
    assert switch_of(arm, 2049, STEP) == switch


def _state(threshold: int, pad: bool = False, inject: float = 0.0) -> dict[str, Any]:
    return {"threshold": threshold, "padFree": pad, "injectMs": inject}


@pytest.mark.parametrize(("states", "workers", "ok"), [
    ([_state(64), _state(64)], 2, True),
    ([_state(64)], 2, False),                    # a worker did not answer
    ([_state(64), _state(65)], 2, False),        # a worker kept another threshold
    ([_state(64), _state(64, pad=True)], 2, False),
    ([_state(64), _state(64, inject=1.0)], 2, False),
    ([], 0, False),
])
def test_switch_confirmed_by_every_worker(states: list[dict[str, Any]], workers: int, ok: bool) -> None:
    assert switch_confirmed(Switch(64), states, workers) is ok


def _counts(*forwards: list[int]) -> dict[str, Any]:
    return {"forwards": [list(f) for f in forwards]}


@pytest.mark.parametrize(("switch", "counts", "ok"), [
    (Switch(64), [_counts([64, 40]), _counts([64, 40])], True),      # split at L on both workers
    (Switch(65), [_counts([64, 0]), _counts([64, 0])], True),        # aa: L + 1, no split
    (Switch(OFF_TOKENS), [_counts([64, 0])], False),                  # one worker missing (2 expected)
    (Switch(64), [_counts([64, 0]), _counts([64, 40])], False),      # a worker's forward did not split
    (Switch(65), [_counts([64, 1]), _counts([64, 0])], False),       # split below the threshold
    (Switch(64), [_counts([32, 0], [32, 0]), _counts([64, 40])], False),  # chunked: tokens sum to L but no split
    (Switch(64), [_counts([63, 40]), _counts([63, 40])], False),     # the forward saw 63 tokens, not 64
    (Switch(64), [_counts(), _counts()], False),                      # no forward reported
])
def test_forward_confirmed(switch: Switch, counts: list[dict[str, Any]], ok: bool) -> None:
    assert forward_confirmed(switch, 64, counts, 2) is ok


def test_forward_accounting_per_worker() -> None:
    assert forward_accounting([_counts([64, 40], [3, 0]), _counts([64, 0])]) == ([1, 0], [[64, 3], [64]])


def test_refusals_compiled_refuses_every_length_graphs_up_to_their_largest_size() -> None:
    kept, refused = refusals([256, 512, 513], [{"compiled": False, "captureSizes": [1, 2, 512]}])
    assert kept == [513] and [r.length for r in refused] == [256, 512] and "CUDA-graph" in refused[0].reason
    kept, refused = refusals([256, 513], [{"compiled": False, "captureSizes": []},
                                          {"compiled": True, "compilationMode": "VLLM_COMPILE"}])
    assert kept == [] and [r.length for r in refused] == [256, 513] and "torch.compiled" in refused[0].reason
    assert refusals([8], [{"compiled": False, "captureSizes": []}]) == ([8], [])


def test_round_order_every_arm_at_every_length_seeded() -> None:
    arms: list[Any] = ["replicated", "split", "aa"]
    a = round_order(arms, [64, 65], seed=3, round_index=0)
    assert sorted(a) == sorted((x, n) for x in arms for n in (64, 65))
    assert a == round_order(arms, [64, 65], seed=3, round_index=0)
    assert {tuple(round_order(arms, [64, 65], seed=3, round_index=r)) for r in range(8)} != {tuple(a)}


def test_step_server_args_loopback_extension_eager_no_prefix_cache() -> None:
    argv = step_server_args(["vllm", "serve", "m", "--host", "0.0.0.0", "--port", "8000"])
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[-4:] == ["--no-enable-prefix-caching", "--worker-extension-cls", "spx.vllm_ext.worker.SplitSwitch",
                         "--enforce-eager"]
    given = step_server_args(["vllm", "serve", "m", "--host=::", "--worker-extension-cls", "t.X", "-O0"])
    assert "--host=127.0.0.1" in given and given.count("--worker-extension-cls") == 1 and "--enforce-eager" not in given
    assert "--enforce-eager" not in step_server_args(["vllm", "serve", "m", "--compilation-config={}"])
