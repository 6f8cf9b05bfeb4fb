"""spx.api.combinations: field combinations no machine can run are refused by ``spx validate``, the CRD's
CEL rules and the operator's admission check, with one message each, all at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spx.api.combinations import COMBINATIONS, cel_rules, combination_problems
from spx.api.crd import build_crd
from spx.api.exit_codes import EXIT_USAGE
from spx.api.loading import SpecError, validate_spec
from spx.api.spec import ExperimentSpec
from spx.vocabulary import CUDA_GEMM_BACKENDS, MXFP8_GEMM_BACKENDS


def _and(values: tuple[str, ...]) -> str:
    """How a message lists a vocabulary's values (so adding a backend changes no test here)."""
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} and {values[-1]}"


CUDA_ONLY = f"spec.kernel.gemmBackend: {_and(CUDA_GEMM_BACKENDS)}"
MXFP8_ONLY = f"spec.kernel.gemmBackend: {_and(MXFP8_GEMM_BACKENDS)}"

HEAD = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\nmetadata: {name: combo}\n"
#: The issue's example: device cpu with cupti, nccl and torch-fp8 on an MXFP8 weight.
CPU_GPU_ONLY = {"parallelism": {"tensorParallelSize": 2},
                "kernel": {"device": "cpu", "timer": "cupti", "gather": "nccl", "gemmBackend": "torch-fp8"}}

# (id, spec, the fields whose problems must be listed)
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("cpu-cupti-nccl-fp8-mxfp8", CPU_GPU_ONLY,
     ["spec.kernel.timer: cupti", "spec.kernel.gather: nccl", CUDA_ONLY,
      "spec.kernel.gemmBackend: torch-fp8"]),
    ("cpu-cuda-events", {"kernel": {"device": "cpu", "timer": "cuda-events"}}, ["spec.kernel.timer: cupti"]),
    ("cpu-humming", {"kernel": {"device": "cpu", "gemmBackend": "humming"}},
     [CUDA_ONLY]),
    ("cuda-host-timer", {"kernel": {"device": "cuda", "timer": "host"}}, ["spec.kernel.timer: host"]),
    ("marlin-on-fp8-blocks", {"kernel": {"gemmBackend": "marlin"}, "projection": {"weightFormat": "fp8-block128-ue8m0"}},
     [MXFP8_ONLY]),
    ("humming-on-bf16", {"kernel": {"gemmBackend": "humming"}, "projection": {"weightFormat": "bf16"}},
     [MXFP8_ONLY]),
    ("torch-fp8-on-mxfp8", {"kernel": {"gemmBackend": "torch-fp8"}}, ["spec.kernel.gemmBackend: torch-fp8"]),
]
ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("defaults", {}),
    ("cpu-auto", {"kernel": {"device": "cpu"}}),
    ("cpu-smoke", {"kernel": {"device": "cpu", "timer": "host", "gather": "gloo", "gemmBackend": "torch-bf16"}}),
    ("cpu-tp1-nccl", {"parallelism": {"tensorParallelSize": 1}, "kernel": {"device": "cpu", "gather": "nccl"}}),
    # vLLM's own sp_all_gather runs over gloo on CPU (tests/real_vllm/test_run_vllm_backend.py runs it)
    ("cpu-vllm-gather", {"parallelism": {"tensorParallelSize": 2}, "kernel": {"device": "cpu", "gather": "vllm"}}),
    ("auto-device-cupti", {"kernel": {"timer": "cupti", "gather": "nccl", "gemmBackend": "humming"}}),
    ("torch-fp8-on-fp8", {"kernel": {"gemmBackend": "torch-fp8"}, "projection": {"weightFormat": "fp8-block128-ue8m0"}}),
]


def _problems(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as err:
        validate_spec(spec)
    return err.value.problems


@pytest.mark.parametrize(("spec", "fields"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_all_at_once(spec: dict[str, Any], fields: list[str]) -> None:
    problems = _problems(spec)
    assert len(problems) == len(fields), problems
    for field, problem in zip(fields, problems, strict=True):
        assert problem.startswith(field), problems
        assert problem in {c.message for c in COMBINATIONS}  # exactly the table's message


@pytest.mark.parametrize("spec", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_accepted(spec: dict[str, Any]) -> None:
    assert combination_problems(validate_spec(spec)) == []


def test_the_crd_carries_every_rule_with_the_same_message() -> None:
    spec_rules = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"]
    messages = [r["message"] for r in spec_rules]
    for rule, combination in zip(cel_rules(ExperimentSpec), COMBINATIONS, strict=True):
        assert rule in spec_rules and rule["message"] == combination.message
    assert len(set(messages)) == len(messages)


def test_cel_rules_read_absent_fields_as_the_models_defaults() -> None:
    rule = cel_rules(ExperimentSpec)[0]["rule"]  # cpu + cupti/cuda-events
    assert "(has(self.kernel) && has(self.kernel.device)) ? self.kernel.device : 'auto'" in rule
    tp = next(r["rule"] for r in cel_rules(ExperimentSpec) if "tensorParallelSize" in r["rule"])
    assert "? self.parallelism.tensorParallelSize : 8)" in tp


def test_spx_validate_lists_every_problem_in_one_try(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "combo.yaml"
    path.write_text(HEAD + yaml.safe_dump({"spec": CPU_GPU_ONLY}))
    proc = subprocess.run([str(Path(sys.executable).with_name("spx")), "validate", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == EXIT_USAGE
    listed = " ".join(proc.stderr.split())  # rich may wrap long lines
    for message in _problems(CPU_GPU_ONLY):
        assert " ".join(message.split()) in listed, proc.stderr
