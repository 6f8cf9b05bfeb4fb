"""Specs spx cannot measure are refused up front, naming the field and the fix (spx.api.deployment, issue #35 req. 4).

Each case is one failure mode of the issue: it validated before (the test fails without the refusal)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from spx.api import ExperimentSpec
from spx.api.serving import server_tp
from spx.api.serving_args import extra_arg_value

SERVING = {"model": "deepseek-ai/DeepSeek-V4.1", "startupTimeoutSeconds": 600}


def spec(serving: dict[str, Any] | None = None, gate: dict[str, Any] | None = None, **rest: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"timeoutSeconds": 86400, **rest}
    if serving is not None:
        raw["serving"] = {**SERVING, **serving}
    if gate is not None:
        raw["gate"] = gate
    return raw


@pytest.mark.parametrize(("raw", "field", "fix"), [
    pytest.param(spec({"extraArgs": ["--max-num-batched-tokens", "8192"]}, {"thresholdTokens": 16384}),
                 "gate.thresholdTokens: 16384 is at or above the largest batch", "choose a threshold below 8192",
                 id="gate-above-max-batched"),
    pytest.param(spec({"extraArgs": ["--max-num-batched-tokens=2048"]}), "gate.thresholdTokens: 2048 is at or above",
                 "raise --max-num-batched-tokens", id="gate-equal-to-max-batched"),
    pytest.param(spec({"extraArgs": ["--max_num_batched_tokens", "2048"]}), "gate.thresholdTokens: 2048 is at or above",
                 "below 2048", id="underscore-spelling"),
    pytest.param(spec({"extraArgs": ["--max-num-batched-tokens", "8192"], "step": {"thresholds": [8192]}}),
                 "serving.step.thresholds: 8192 is at or above", "below 8192", id="step-threshold-at-max-batched"),
    pytest.param(spec({}, {"thresholdTokens": 16384}), "gate.thresholdTokens: 16384", "vLLM's default is 8192",
                 id="gate-above-vllms-default"),
    pytest.param(spec(gate={"thresholdTokens": 4096, "maxNumBatchedTokens": 4096}), "gate.thresholdTokens: 4096",
                 "gate.maxNumBatchedTokens", id="gate-max-batched-field"),
    pytest.param(spec({"extraArgs": ["--max-model-len", "2048"], "step": {}}), "T + 1 = 2049 prompt tokens",
                 "raise --max-model-len", id="t-plus-1-above-max-model-len"),
    pytest.param(spec({"extraArgs": ["--max-model-len=2k"], "step": {}}), "above --max-model-len 2000",
                 "choose a threshold below 1999", id="max-model-len-suffix"),
    pytest.param(spec({"extraArgs": ["--tensor_parallel_size", "-1"]}), "a TP vLLM would not use",
                 "give a positive integer", id="tp-minus-1-underscore"),
    pytest.param(spec({"extraArgs": ["-tp", "eight"]}), "'eight', a TP vLLM would not use", "leave it out",
                 id="tp-not-a-number"),
    pytest.param(spec({"points": []}), "spec.serving has nothing to run", "remove spec.serving",
                 id="serving-with-nothing-to-run"),
])
def test_a_spec_the_deployment_cannot_measure_is_refused(raw: dict[str, Any], field: str, fix: str) -> None:
    with pytest.raises(ValidationError) as err:
        ExperimentSpec.model_validate(raw)
    text = str(err.value)
    assert field in text and fix in text, text


@pytest.mark.parametrize("raw", [
    pytest.param(spec({"extraArgs": ["--max-num-batched-tokens", "16384"]}, {"thresholdTokens": 8192}), id="below"),
    pytest.param(spec({"extraArgs": ["--max-model-len", "2050"], "step": {}}), id="t-plus-1-fits"),
    pytest.param(spec({"extraArgs": ["--tensor_parallel_size", "4"]}), id="tp-underscore"),
    pytest.param(spec({"points": [], "step": {}}), id="step-only"),
    pytest.param(spec(gate={"thresholdTokens": 16384}), id="kernel-only-names-no-deployment"),
])
def test_a_spec_it_can_measure_is_accepted(raw: dict[str, Any]) -> None:
    ExperimentSpec.model_validate(raw)


def test_the_servers_tp_is_read_however_vllm_spells_it() -> None:
    """vLLM's FlexibleArgumentParser turns --tensor_parallel_size into --tensor-parallel-size; -tp is its alias."""
    assert server_tp(["--tensor_parallel_size", "4"], 8) == 4
    assert server_tp(["--tensor-parallel-size=2"], 8) == 2
    assert server_tp(["-tp", "4"], 8) == 4 and server_tp(["-tp=2"], 8) == 2
    assert server_tp([], 8) == 8
    assert extra_arg_value(["--max_num_batched_tokens=4096"], "--max-num-batched-tokens") == "4096"
    assert extra_arg_value(["--max-num-batched-tokens"], "--max-num-batched-tokens") == ""
