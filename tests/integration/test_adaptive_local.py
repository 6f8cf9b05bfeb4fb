"""The adaptive sweep (``sweep.refine``) end to end on CPU: the real kernel bench, 2 gloo ranks.

Rank 0 plans from its max-over-ranks points and broadcasts the plan; both ranks must then measure the
same added counts (a disagreement would hang the gloo collectives inside a measurement and the run
would time out). CPU smoke run: the timings say nothing about GPUs. The gather is modelled (µs), not
measured over gloo: a measured gloo all-gather costs 0.5–1.4 ms on some 2-core hosts, so the split
could lose at every count and the planner would rightly add nothing. With the modelled gather the
split's half-size GEMM wins at 512 tokens of this shape by ~2× on CPU, so the sweep has a crossover
(or the split wins everywhere and the planner verifies the winning run 8–512 or probes below the
smallest count): at least one count is added either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from spx.api import ExperimentStatus, KernelResult

REPO = Path(__file__).resolve().parents[2]

EXPERIMENT = """\
apiVersion: bench.spx.dev/v1alpha1
kind: ShardedProjectionExperiment
metadata:
  name: adaptive-cpu
spec:
  projection:
    name: fused_wqa_wkv-small
    hiddenSize: 1024
    outputSizes: [256, 128]
    weightFormat: fp8-block128-ue8m0
    activationDtype: bfloat16
  parallelism:
    tensorParallelSize: 2
  sweep:
    tokens: [8, 512]
    refine: {maxRounds: 1, pointsPerRound: 2, maxAddedPoints: 2}
  kernel: {device: cpu, timer: host, gather: modelled, gemmBackend: auto, samples: 5, warmup: 1,
           cudaGraphs: false, l2Flush: false}
  gate: {thresholdTokens: 2048}
  timeoutSeconds: 300
"""


def test_adaptive_sweep_on_two_gloo_ranks(tmp_path: Path) -> None:
    spec = tmp_path / "adaptive.yaml"
    spec.write_text(EXPERIMENT)
    exe = Path(sys.executable).with_name("spx")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "spx.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}
    proc = subprocess.run([*cmd, "run", str(spec), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = KernelResult.model_validate_json((tmp_path / "out" / "result.json").read_text())
    tokens = [p.tokens for p in result.points]
    added = [p for p in result.points if p.added_because]
    assert {8, 512} <= set(tokens) and tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert 1 <= len(added) <= 2
    for p in added:
        assert p.tokens % 2 == 0 and p.tokens not in (8, 512)
        assert p.rows_per_rank == p.tokens // 2 and p.padded_tokens == p.tokens
        assert any(rule in (p.added_because or "") for rule in
                   ("verify the winning run", "narrow the bracket", "probe below the smallest"))
        assert len(p.replicated.samples_us) == len(p.split.samples_us) == 5  # measured like the others
    status = ExperimentStatus.model_validate_json((tmp_path / "out" / "status.json").read_text())
    assert status.kernel is not None and status.kernel.uncertainty is not None
    assert {p.tokens for p in status.kernel.points if p.added_because} == {p.tokens for p in added}
    assert all(p.speedup_low is not None for p in status.kernel.points)
