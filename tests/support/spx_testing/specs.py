"""Experiment specs shared by the operator tests."""

from __future__ import annotations

from typing import Any

#: A small CPU run of the real bench (2 gloo ranks, ~5 s on 2 cores).
CPU_SPEC: dict[str, Any] = {
    "projection": {"hiddenSize": 1024, "outputSizes": [256, 128]},
    "parallelism": {"tensorParallelSize": 2},
    "sweep": {"tokens": [8, 128, 2048]},
    "kernel": {"device": "cpu", "timer": "host", "gather": "gloo", "samples": 5, "warmup": 1,
               "cudaGraphs": False, "l2Flush": False},
    "gate": {"thresholdTokens": 2048},
    "timeoutSeconds": 3600,
}

#: The YAML head of every experiment file.
EXPERIMENT_HEAD = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n"
#: A tiny CPU experiment file (2 gloo ranks, two token counts): the CLI process tests' run.
TINY_CPU_YAML = EXPERIMENT_HEAD + """\
metadata: {name: tiny}
spec:
  projection: {hiddenSize: 256, outputSizes: [128]}
  parallelism: {tensorParallelSize: 2}
  sweep: {tokens: [8, 32]}
  kernel: {device: cpu, timer: host, gather: gloo, samples: 5, warmup: 1, cudaGraphs: false, l2Flush: false}
  timeoutSeconds: 300
"""
