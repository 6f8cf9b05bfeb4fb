"""spx.api: the resource's schema, its error messages and the generated CRD."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from spx.api import (
    Experiment,
    ExperimentSpec,
    ExperimentStatus,
    KernelResult,
    SpecError,
    load_experiment,
    validate_spec,
)
from spx.api.crd import build_crd

REPO = Path(__file__).resolve().parents[2]


def problems(spec: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    return info.value.problems


def test_defaults_are_the_motivating_case():
    spec = ExperimentSpec()
    assert spec.projection.hidden_size == 5120 and spec.projection.output_sizes == [1280, 512]
    assert spec.projection.output_size == 1792
    assert spec.parallelism.tensor_parallel_size == 8
    assert spec.gate.threshold_tokens == 2048
    assert spec.sweep.tokens == [6, 12, 24, 48, 96, 384, 1024, 2048, 4096, 8192, 16384]
    assert spec.kernel.samples == 50 and spec.kernel.l2_flush


@pytest.mark.parametrize(
    ("spec", "path", "fragment"),
    [
        ({"projection": {"hidenSize": 5120}}, "spec.projection.hidenSize", "unknown field"),
        ({"sweep": {"tokens": [6, 0, 12]}}, "spec.sweep.tokens[1]", "greater than 0"),
        ({"sweep": {"tokens": [12, 6]}}, "spec.sweep.tokens", "increasing order"),
        ({"sweep": {"tokens": [6, 6, 12]}}, "spec.sweep.tokens", "unique, [6] repeat"),
        ({"projection": {"outputSizes": [1280, 500]}}, "spec.projection", "outputSizes [500] are not multiples of 32"),
        ({"projection": {"hiddenSize": 5000}}, "spec.projection", "hiddenSize=5000 is not a multiple of 32"),
        ({"projection": {"hiddenSize": 5056, "weightFormat": "fp8-block128-ue8m0"}}, "spec.projection",
         "hiddenSize=5056 is not a multiple of 128"),
        ({"kernel": {"samples": 4}}, "spec.kernel.samples", "must be at least 5: raise it to 5 or more"),
        ({"parallelism": {"tensorParallelSize": 0}}, "spec.parallelism.tensorParallelSize", "must be at least 1"),
        ({"gate": {"thresholdTokens": 2048.5}}, "spec.gate.thresholdTokens", "whole number"),
        ({"gate": {"thresholdTokens": "2k"}}, "spec.gate.thresholdTokens", "whole number"),
        ({"gate": {"thresholdTokens": 0}}, "spec.gate.thresholdTokens", "greater than 0"),
        ({"kernel": {"gemmBackend": "cutlass"}}, "spec.kernel.gemmBackend", "must be one of"),
        ({"resources": {"gpuProducts": ["NVIDIA H200"]}}, "spec.resources.gpuProducts[0]", "a Kubernetes label value"),
        ({"scheduling": {"queueName": "team a/q"}}, "spec.scheduling.queueName", "a Kubernetes label value"),
        ({"resources": {"memory": "lots"}}, "spec.resources.memory", "a Kubernetes quantity"),
        ({"scheduling": {"priorityClassName": "High"}}, "spec.scheduling.priorityClassName", "DNS-1123 subdomain"),
        # a bidi override would show a different name than the one stored; a newline would forge a report line
        ({"projection": {"name": "wq\u202eakv"}}, "spec.projection.name", "printable characters only, got U+202E"),
        ({"projection": {"name": "a\nverdict: Pass"}}, "spec.projection.name", "got U+000A"),
        ({"projection": {"name": "x\x1b[2J"}}, "spec.projection.name", "got U+001B"),
    ],
)
def test_bad_input_names_field_value_and_what_is_allowed(spec, path, fragment):
    lines = problems(spec)
    assert any(line.startswith(path + ":") and fragment in line for line in lines), lines
    assert all("(got " in line for line in lines)  # the bad value is shown


def test_names_follow_the_api_servers_rules():
    exp = load_experiment(
        "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n"
        "metadata: {name: h200-vllm-0.34}\nspec: {}\n"
    )
    assert exp.metadata.name == "h200-vllm-0.34"  # a DNS subdomain, as kubectl apply accepts
    spec = validate_spec({"resources": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}})
    # unset requests follow the experiment (a GPU run here): 32 CPUs, 192Gi
    assert spec.resources.cpu is None and spec.resources.reserved("auto", "64Gi") == {
        "cpu": "32", "memory": "192Gi", "shmSize": "64Gi", "ephemeralStorage": None}


def test_bf16_weights_need_no_block_alignment():
    spec = validate_spec({"projection": {"hiddenSize": 5000, "outputSizes": [100], "weightFormat": "bf16"}})
    assert spec.projection.output_size == 100


def test_several_problems_are_reported_at_once():
    lines = problems({"kernel": {"samples": 1}, "parallelism": {"tensorParallelSize": 0}, "bogus": 1})
    assert len(lines) == 3


def test_load_experiment_reads_what_kubectl_applies():
    exp = load_experiment((REPO / "examples" / "deepseek-v41-tp8.yaml").read_text())
    assert isinstance(exp, Experiment) and exp.metadata.name == "deepseek-v41-fused-wqa-wkv-tp8"
    assert 1536 in exp.spec.sweep.tokens and 6144 in exp.spec.sweep.tokens


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kind: Deployment\napiVersion: apps/v1\nmetadata: {name: x}\n", "expected kind ShardedProjectionExperiment"),
        ("a: [1, 2\n", "(YAML)"),
        ("---\nkind: ShardedProjectionExperiment\n---\nkind: ShardedProjectionExperiment\n", "exactly one YAML document"),
        ("apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\nmetadata: {name: Bad_Name}\n", "metadata.name"),
    ],
)
def test_load_errors(text, fragment):
    with pytest.raises(SpecError, match=None) as info:
        load_experiment(text)
    assert fragment in str(info.value)


def test_status_and_result_round_trip_in_camel_case():
    status = ExperimentStatus.model_validate(
        json.loads((REPO / "examples/results/h200-1gpu/torch-bf16/status.json").read_text())
    )
    wire = status.to_wire()
    assert wire["kernel"]["recommendedThresholdTokens"] == status.kernel.recommended_threshold_tokens
    result = KernelResult.model_validate_json((REPO / "examples/results/h200-1gpu/torch-bf16/result.json").read_text())
    assert result.schema_version == "spx.dev/kernel-result/v1" and len(result.points) == 14
    assert all(len(p.replicated.samples_us) == 50 for p in result.points)


def _walk(node, path=""):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def test_crd_schema_is_structural():
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        if "properties" in node:
            assert node.get("type") == "object", path
            assert "additionalProperties" not in node, path
    status = schema["properties"]["status"]["properties"]
    assert {"phase", "conditions", "kernel", "verdict", "verdictReasons", "environment"} <= set(status)
    assert status["kernel"]["properties"]["points"]["items"]["properties"]["speedup"]["type"] == "number"
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Phase", "GPU", "Crossover", "Threshold", "Verdict", "Decided-By", "Reason", "Age"
    ]
    tokens = schema["properties"]["spec"]["properties"]["sweep"]["properties"]["tokens"]
    assert tokens["items"]["minimum"] == 0 and tokens["items"]["exclusiveMinimum"] is True
    assert tokens["maxItems"] == 64
    assert schema["properties"]["spec"]["properties"]["sweep"]["x-kubernetes-validations"]
    assert schema["properties"]["spec"]["properties"]["kernel"]["properties"]["samples"]["minimum"] == 5


def test_checked_in_crd_matches_the_models():
    from spx.api.crd import crd_yaml

    assert (REPO / "crds" / "shardedprojectionexperiments.yaml").read_text() == crd_yaml()
    assert yaml.safe_load(crd_yaml())["metadata"]["name"] == "shardedprojectionexperiments.bench.spx.dev"
