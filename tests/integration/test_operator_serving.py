"""An experiment with ``spec.serving`` and ``spec.accuracy`` through the real operator.

The test kubelet runs the bench pod's command — ``spx run … --jsonl --serving`` — as a local process:
the real CPU kernel bench, then the serving A/B and GSM8K against the stand-in ``vllm`` and
``nvidia-smi`` executables (``standins/``, on the pod's ``PATH``) that speak vLLM's CLI and HTTP on
loopback. The serving and accuracy results travel back like the kernel's (JSON lines in the log, their
statuses in the termination message's summary); the operator stores them in the result ConfigMap,
writes ``status.serving`` / ``status.accuracy``, lets their gates decide the verdict with the
kernel's, and exports the ``spx_serving_*`` / ``spx_accuracy_*`` series.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spx.api.accuracy import AccuracyResult
from spx.api.serving import ServingResult
from spx.controller.manifests.result_configmap import read_result_configmap
from spx_testing.cluster import EXP_API, EXP_PLURAL, Cluster, condition, free_port
from spx_testing.controlplane import ControlPlane
from spx_testing.nodeagent import standin_node_env, write_gsm8k

pytestmark = pytest.mark.timeout(600)
NS = "serving"

NAME = "ab"
N_QUESTIONS = 16
WRONG_MOD = 16  # the split servers answer the questions whose sum (2i + 2) is divisible by 16 wrongly: 2 of 16


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("operator-serving")
    pid_dir = workdir / "gpu-pids"
    pid_dir.mkdir()
    node_env = standin_node_env(pid_dir, STANDIN_CHAT_WRONG_MOD=str(WRONG_MOD))
    c = Cluster(control_plane, NS, workdir, env=node_env)
    c.start_operator(env={"SPX_BENCH_IMAGE": "spx-bench:test"})
    c.wait_operator_ready()
    yield c
    c.close()


def spec(tmp: Path) -> dict[str, Any]:
    test, train = write_gsm8k(tmp, N_QUESTIONS)
    return {
        "projection": {"hiddenSize": 1024, "outputSizes": [256, 128]},
        "parallelism": {"tensorParallelSize": 2},
        "sweep": {"tokens": [8, 2048]},
        "kernel": {"device": "cpu", "timer": "host", "gather": "gloo", "samples": 5, "warmup": 1,
                   "cudaGraphs": False, "l2Flush": False},
        "gate": {"thresholdTokens": 2048},
        "serving": {
            "model": "deepseek-ai/DeepSeek-V4.1", "port": free_port(),
            # two servers per variant: without a noise estimate a serving point decides nothing (issue #28)
            "arms": [{"name": "B1", "variant": "split"}, {"name": "A1", "variant": "main"},
                     {"name": "A2", "variant": "main"}, {"name": "B2", "variant": "split"}],
            "points": [
                {"name": "ttft_8k_c1", "inputLen": 8192, "outputLen": 1, "concurrency": 1, "numPrompts": 2,
                 "metric": "ttft"},
                {"name": "1k_in_1k_out_c2", "inputLen": 1024, "outputLen": 8, "concurrency": 2, "numPrompts": 4,
                 "metric": "output_throughput"},
            ],
            "startupTimeoutSeconds": 20, "shutdownTimeoutSeconds": 5, "gpuReleaseTimeoutSeconds": 5,
        },
        "accuracy": {"datasetPath": str(test), "fewshotPath": str(train), "concurrency": 8, "maxDropPoints": 1.0},
        "timeoutSeconds": 3600,
    }


def samples(cluster: Cluster, metric: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted((k, v) for k, v in lb.items() if k not in ("namespace", "experiment"))): value
            for lb, value in cluster.metric_samples(metric) if lb.get("experiment") == NAME}


def test_serving_and_accuracy_reach_status_verdict_configmap_and_metrics(cluster: Cluster, tmp_path: Path) -> None:
    created = cluster.apply(NAME, spec(tmp_path))
    obj = cluster.wait_decided(NAME, timeout=300)
    st = obj["status"]
    assert st["phase"] == "Succeeded", st.get("message")

    # The pod ran the kernel bench, then the vLLM benches, in one `spx run … --serving`.
    job = cluster.get("batch/v1", "jobs", f"{NAME}-g1")
    assert job is not None
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["spx", "run"] and command[-1] == "--serving"
    assert st["kernel"]["points"]  # the kernel's result is there as before

    serving = st["serving"]
    assert [(a["name"], a["variant"], a["threshold"], a["state"]) for a in serving["arms"]] == [
        ("B1", "split", "2048", "Succeeded"), ("A1", "main", "off", "Succeeded"), ("A2", "main", "off", "Succeeded"),
        ("B2", "split", "2048", "Succeeded")]
    points = {p["name"]: p for p in serving["points"]}
    assert points["ttft_8k_c1"]["changePct"] == pytest.approx(-5.0)  # 8k prompts reach the threshold: split
    assert points["1k_in_1k_out_c2"]["changePct"] == pytest.approx(0.0)
    assert {v["arm"]: v["value"] for v in points["ttft_8k_c1"]["values"]} == {"B1": 95.0, "A1": 100.0, "A2": 100.0,
                                                                          "B2": 95.0}
    assert serving["complete"] is True and serving["gatePassed"] is True

    accuracy = st["accuracy"]
    assert {(r["arm"], r["correct"], r["total"]) for r in accuracy["runs"]} == {("B1", 14, 16), ("A1", 16, 16)}
    assert accuracy["dropPoints"] == pytest.approx(12.5) and accuracy["maxDropPoints"] == 1.0
    assert accuracy["gatePassed"] is False

    # The accuracy gate failed: the verdict is Fail (the CPU kernel run alone would be Inconclusive).
    assert st["verdict"] == "Fail"
    assert st["verdictReasons"][0].startswith("accuracy gate failed: GSM8K: split 87.50% vs main 100.00%")
    assert any(r.startswith("serving A/B gate passed") for r in st["verdictReasons"])
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "Fail"
    assert "VerdictFail" in {e["reason"] for e in cluster.events(NAME)}

    # Everything the pod produced is kept in the result ConfigMap.
    cm = cluster.get("v1", "configmaps", st["resultConfigMap"])
    assert cm is not None
    serving_doc = ServingResult.model_validate(read_result_configmap(cm, "serving-result.json"))
    accuracy_doc = AccuracyResult.model_validate(read_result_configmap(cm, "accuracy-result.json"))
    assert serving_doc.complete and [a.name for a in serving_doc.arms] == ["B1", "A1", "A2", "B2"]
    assert all(a.threshold_confirmed and a.gpu_check == "freed" for a in serving_doc.arms)
    assert accuracy_doc.complete and len(accuracy_doc.runs) == 2
    summary = json.loads(cm["data"]["summary.json"])  # the termination message carries the gates too
    assert summary["serving"]["gatePassed"] is True and summary["accuracy"]["gatePassed"] is False
    assert len(cm["data"]["summary.json"].encode()) <= 4096

    # Metrics, in base units, bounded labels.
    values = samples(cluster, "spx_serving_value")
    assert values[(("metric", "ttft"), ("point", "ttft_8k_c1"), ("variant", "split"))] == pytest.approx(0.095)
    assert values[(("metric", "ttft"), ("point", "ttft_8k_c1"), ("variant", "main"))] == pytest.approx(0.100)
    assert (("metric", "output_throughput"), ("point", "1k_in_1k_out_c2"), ("variant", "main")) in values
    change = samples(cluster, "spx_serving_change_ratio")
    assert change[(("metric", "ttft"), ("point", "ttft_8k_c1"))] == pytest.approx(-0.05)
    assert samples(cluster, "spx_serving_gate_passed") == {(): 1.0}
    assert samples(cluster, "spx_accuracy_ratio") == {
        (("variant", "main"),): pytest.approx(1.0), (("variant", "split"),): pytest.approx(0.875)}
    assert samples(cluster, "spx_accuracy_drop_ratio") == {(): pytest.approx(0.125)}
    assert samples(cluster, "spx_accuracy_max_drop_ratio") == {(): 0.01}
    assert samples(cluster, "spx_experiment_timeout_seconds") == {(): 3600.0}  # SpxExperimentStuck's exemption
    assert [lb for lb, v in cluster.metric_samples("spx_verdict") if lb.get("experiment") == NAME and v == 1] == [
        {"namespace": NS, "experiment": NAME, "gpu": st["environment"].get("gpu", ""),
         "vllm": st["environment"].get("vllm", ""), "decided_by": st["kernel"]["decidedBy"], "verdict": "Fail"}]
    assert st["kernel"]["decidedBy"] == "accuracy"  # the GSM8K gate failed: what decided is on the verdict's series

    # Deleting the experiment removes its series.
    cluster.delete(EXP_API, EXP_PLURAL, NAME)
    families = ("spx_serving_value", "spx_serving_change_ratio", "spx_serving_gate_passed", "spx_accuracy_ratio",
                "spx_accuracy_drop_ratio", "spx_accuracy_max_drop_ratio",
                "spx_experiment_timeout_seconds")
    cluster.wait_for(lambda: not any(samples(cluster, f) for f in families), 60, "the serving series to be removed")
    cluster.wait_for(lambda: cluster.owned_by(created["metadata"]["uid"]) == [], 60, "the garbage collector")


def test_vllm_benches_that_cannot_start_fail_the_run_and_keep_the_kernel_result(cluster: Cluster, tmp_path: Path) -> None:
    """A GSM8K dataset missing from the image: `spx run --serving` stops before any server starts
    (exit 1); the run is BenchmarkFailed with the reason, the kernel's points are kept."""
    body = spec(tmp_path)
    body["accuracy"]["datasetPath"] = str(tmp_path / "missing" / "test.jsonl")
    cluster.apply("ab-nodata", body)
    obj = cluster.wait_decided("ab-nodata", timeout=300)
    st = obj["status"]
    decided = condition(obj, "Decided")
    assert st["phase"] == "Failed" and decided is not None and decided["reason"] == "BenchmarkFailed", st
    assert "the vLLM benches did not start" in decided["message"] and "missing" in decided["message"]
    assert st["kernel"]["points"] and "verdict" not in st
    assert st["serving"]["failures"][0].startswith("the vLLM benches did not start")
    assert "gatePassed" not in st["accuracy"]  # undecided (None is left out of the status)
    assert "did not start" in st["accuracy"]["reasons"][0]
