"""An experiment with ``spec.serving.step`` through the real operator: the step A/B decides a cluster run.

The test kubelet runs the bench pod's command — ``spx run … --jsonl --serving`` — as a local process: the
real CPU kernel bench (a modelled gather of ~0 µs, so the GPU-bound regime is the split GEMM of half the rows,
which wins; the host-bound regime adds the real 1-rank gloo all-gather launch, a copy that makes it lose in
most runs on this loaded host: the regimes then disagree — the unit table
``tests/unit/controller/decide/test_step_results.py`` covers both cases deterministically), then the
step A/B against the stand-in ``vllm`` (``standins/``, alone on the pod's ``PATH``, without the stand-in
``nvidia-smi``, so the step is recorded as run on CPU: a real vLLM needs GPUs and the model), which answers
token-ID prompts, ``/tokenize`` and the worker extension's ``/collective_rpc`` (one server, the split switched per
request), and adds ``STANDIN_SPLIT_DELAY_MS`` (10 ms, set through ``serving.env``) to every completion that reaches
the switched threshold: a known loss. The step
result travels back like the serving A/B's (``{"kind": "step"}`` lines, a bounded section in the termination
message); the operator summarises it with the kernel's Δg/Δh, writes ``status.step``, keeps
``step-result.json`` in the result ConfigMap and lets the step decide — on CPU only with
``gate.allowCpuTimings``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spx.api.step import StepResult
from spx.controller.manifests.result_configmap import read_result_configmap
from spx_testing.cluster import Cluster, condition, free_port
from spx_testing.containers import STANDINS
from spx_testing.controlplane import ControlPlane
from spx_testing.nodeagent import standin_node_env

pytestmark = pytest.mark.timeout(600)
NS = "step"
T = 2048


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("operator-step")
    pid_dir = workdir / "gpu-pids"
    pid_dir.mkdir()
    bin_dir = workdir / "bin"  # the stand-in vllm alone: no nvidia-smi on PATH, so the step runs "on CPU"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f'#!/bin/sh\nexec {sys.executable} {STANDINS / "vllm"} "$@"\n')
    (bin_dir / "vllm").chmod(0o755)
    env = standin_node_env(pid_dir)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), *(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvidia-smi").exists())])
    c = Cluster(control_plane, NS, workdir, env=env)
    c.start_operator(env={"SPX_BENCH_IMAGE": "spx-bench:test"})
    c.wait_operator_ready()
    yield c
    c.close()


def spec(allow_cpu: bool) -> dict[str, Any]:
    return {
        "projection": {"hiddenSize": 1024, "outputSizes": [256, 128]},
        "parallelism": {"tensorParallelSize": 2},
        "sweep": {"tokens": [8, T]},
        "kernel": {"device": "cpu", "timer": "host", "gather": "modelled", "samples": 15, "warmup": 1,
                   "cudaGraphs": False, "l2Flush": False, "gatherModel": {"latencyUs": 0, "busBandwidthGbps": 10000}},
        "gate": {"thresholdTokens": T, "allowCpuTimings": allow_cpu, "maxNumBatchedTokens": T + 1},  # (T − 2, T, T + 1 cover it)
        "serving": {
            "model": "deepseek-ai/DeepSeek-V4.1", "port": free_port(), "points": [],
            "env": {"STANDIN_SPLIT_DELAY_MS": "10"},
            "step": {"lengths": [T - 2, T, T + 1], "rounds": 30, "minRounds": 10, "lookEvery": 10, "warmupRounds": 1,
                     "layers": 4, "positiveControlMs": 5.0, "indifferenceMs": 1.0},
            "startupTimeoutSeconds": 20, "shutdownTimeoutSeconds": 5, "gpuReleaseTimeoutSeconds": 5,
        },
        "timeoutSeconds": 3600,
    }


def _regimes_disagree(kernel: dict[str, Any]) -> bool:
    gpu, host = kernel["regimes"]
    assert (gpu["regime"], host["regime"]) == ("gpu-bound", "host-bound")
    return bool(gpu["speedVerdict"] != host["speedVerdict"])


def test_the_step_ab_reaches_status_and_decides_where_the_kernel_regimes_disagree(cluster: Cluster) -> None:
    """allowCpuTimings: the CPU step may decide. Its 10 ms loss at T and T + 1 is in status.step, read against
    the kernel's Δg/Δh; usable, it makes the verdict Fail (``kernel.decidedBy: step``, the deciding reason first)
    whatever the kernel regimes say; where a regime says Pass, one note says so (issue #35)."""
    cluster.apply("step-decides", spec(allow_cpu=True))
    obj = cluster.wait_decided("step-decides", timeout=400)
    st = obj["status"]
    assert st["phase"] == "Succeeded", st.get("message")
    command = cluster.get("batch/v1", "jobs", "step-decides-g1")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["spx", "run"] and command[-1] == "--serving"

    step = st["step"]
    assert step["cpuTimings"] is True and step["complete"] is True
    points = {(p["arm"], p["length"]): p for p in step["points"]}
    assert {(a, n) for a, n in points if a == "split"} == {("split", n) for n in (T - 2, T, T + 1)}
    for n in (T - 2, T, T + 1):  # the 10 ms the stand-in adds, read through a loaded host's noise
        e = points[("split", n)]
        assert e["outcome"] == "loss" and 2.0 < e["effectLowMs"] and e["effectMs"] < 20.0, e
        assert e["perLayerUs"] == pytest.approx(e["effectMs"] * 250, rel=1e-4)  # 4 layers (6 significant digits)
    assert points[("split", T)]["kernelHostUs"] is not None and points[("split", T)]["kernelGpuUs"] is not None

    kernel = st["kernel"]  # a usable step decides whatever the kernel regimes say (issue #35)
    assert st["verdict"] == "Fail" and kernel["decidedBy"] == "step" and st["judgement"]["decidedBy"] == "step", st
    assert st["verdictReasons"][0].startswith("decided by the step A/B: the split lengthens the step"), st
    if not _regimes_disagree(kernel) and kernel["regimes"][0]["speedVerdict"] == "Pass":
        assert any(r.startswith("note: the kernel sweep says otherwise") for r in st["verdictReasons"]), st
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == st["verdict"]

    cm = cluster.get("v1", "configmaps", st["resultConfigMap"])
    assert cm is not None
    doc = StepResult.model_validate(read_result_configmap(cm, "step-result.json"))
    assert doc.complete and doc.server.workers == 2 and doc.experiment == "step-decides"
    assert all(r.prompt_tokens == r.length and r.confirmed for r in doc.requests)  # token-ID prompts, counted
    summary = json.loads(cm["data"]["summary.json"])  # the termination message carries the step too
    assert summary["step"]["rounds"] == doc.rounds_done
    assert len(cm["data"]["summary.json"].encode()) <= 4096


def test_a_cpu_step_never_decides_without_allow_cpu_timings(cluster: Cluster) -> None:
    """The same run with allowCpuTimings false: status.step is written, the step decides nothing; where the
    regimes disagree the verdict stays Inconclusive and says why the step did not decide and what would."""
    cluster.apply("step-cpu", spec(allow_cpu=False))
    st = cluster.wait_decided("step-cpu", timeout=400)["status"]
    assert st["phase"] == "Succeeded", st.get("message")
    assert {p["arm"] for p in st["step"]["points"]} >= {"split"} and st["step"]["cpuTimings"] is True
    assert st["kernel"]["decidedBy"] != "step"
    if _regimes_disagree(st["kernel"]):
        assert st["verdict"] == "Inconclusive" and st["kernel"]["decidedBy"] == "none"
        assert st["verdictReasons"][0].startswith("the step A/B decides nothing: "), st["verdictReasons"]
        assert any("CPU server" in r for r in st["verdictReasons"]), st["verdictReasons"]
        assert "spec.serving.step" in st["kernel"]["nextStep"]
