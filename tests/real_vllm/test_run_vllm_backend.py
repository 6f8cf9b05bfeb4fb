"""``spx run`` end to end with ``gemmBackend: vllm`` on the real vLLM 0.33.0 (CPU): one rank with the gather
modelled (the rank must rendezvous through the launcher's store, a hang before), and two gloo ranks with
vLLM's own ``sp_all_gather``.

The result records which quant method and linear kernel vLLM chose (``gemmBackendReason``). On CPU the
kernel is vLLM's MXFP8 emulation (vLLM 0.33 has no CPU MXFP8 kernel): a pipeline check, not a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

SPEC = {
    "apiVersion": "bench.spx.dev/v1alpha1",
    "kind": "ShardedProjectionExperiment",
    "metadata": {"name": "vllm-cpu"},
    "spec": {
        "projection": {"name": "fused_wqa_wkv-small", "hiddenSize": 256, "outputSizes": [128, 64],
                       "weightFormat": "mxfp8-block32-ue8m0", "activationDtype": "bfloat16"},
        "parallelism": {"tensorParallelSize": 2},
        "sweep": {"tokens": [8, 64]},
        "kernel": {"device": "cpu", "timer": "host", "gather": "modelled", "gemmBackend": "vllm",
                   "samples": 5, "warmup": 1, "cudaGraphs": False, "l2Flush": False},
        "timeoutSeconds": 300,
    },
}


@pytest.mark.parametrize(("nproc", "gather"), [(1, "modelled"), (2, "vllm")])
def test_spx_run_with_the_vllm_backend_records_vllms_choice(
    vllm: ModuleType, tmp_path: Path, nproc: int, gather: str
) -> None:
    doc = {**SPEC, "spec": {**SPEC["spec"], "kernel": {**SPEC["spec"]["kernel"], "gather": gather}}}
    spec = tmp_path / "vllm-cpu.yaml"
    spec.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "spx", "run", str(spec), "--out", str(out), "--nproc", str(nproc)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["gemmBackend"] == "vllm" and result["complete"]
    assert result["gatherBackend"] == gather and result["gatherSource"] == ("modelled" if nproc == 1 else "measured")
    reason = result["gemmBackendReason"]
    assert "quantMethod=ModelOptLinearMethod" in reason and "quantConfig=DeepseekV4FP8Config" in reason
    assert "linearKernel=EmulationMxfp8LinearKernel" in reason
    assert [p["tokens"] for p in result["points"]] == [8, 64]
    assert all(p["referenceRelError"] < 1e-2 for p in result["points"])
