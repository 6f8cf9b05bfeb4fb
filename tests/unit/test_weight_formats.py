"""Weight formats: each format's block size, the validation that knows it, and the CRD rule that mirrors it."""

from __future__ import annotations

import pytest

from spx.api import ExperimentSpec, SpecError, validate_spec
from spx.api.crd import CEL_RULES
from spx.api.projection import WEIGHT_FORMAT_BLOCK, weight_block


def problems(spec: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    return info.value.problems


def test_v41_default_is_mxfp8_with_32x32_blocks():
    assert ExperimentSpec().projection.weight_format == "mxfp8-block32-ue8m0"
    assert weight_block("mxfp8-block32-ue8m0") == 32
    assert weight_block("fp8-block128-ue8m0") == 128
    assert weight_block("bf16") is None
    with pytest.raises(ValueError, match="unknown; use one of"):
        weight_block("fp8-block64")


@pytest.mark.parametrize(
    ("fmt", "hidden", "outputs", "ok"),
    [
        ("mxfp8-block32-ue8m0", 5120, [1280, 512], True),  # DeepSeek-V4.1 fused_wqa_wkv
        ("mxfp8-block32-ue8m0", 5120, [1280, 544], True),  # 544 = 17 × 32: fine with 32×32 blocks...
        ("fp8-block128-ue8m0", 5120, [1280, 544], False),  # ...but not a multiple of 128
        ("mxfp8-block32-ue8m0", 5136, [1280, 512], False),  # K not a multiple of 32
        ("fp8-block128-ue8m0", 7168, [1536, 576], False),  # 576 % 128 = 64
        ("mxfp8-block32-ue8m0", 7168, [1536, 576], True),
        ("bf16", 5000, [100], True),  # no blocks, no alignment
    ],
)
def test_block_alignment_follows_the_format(fmt, hidden, outputs, ok):
    spec = {"projection": {"hiddenSize": hidden, "outputSizes": outputs, "weightFormat": fmt}}
    if ok:
        assert validate_spec(spec).projection.weight_format == fmt
        return
    lines = problems(spec)
    block = WEIGHT_FORMAT_BLOCK[fmt]
    assert any(line.startswith("spec.projection") and (f"multiple of {block}" in line or f"multiples of {block}" in line)
               for line in lines), lines
    assert any(fmt in line and "bf16" in line for line in lines), lines  # names the format and a way out


def test_misaligned_output_sizes_are_listed_in_the_error():
    lines = problems({"projection": {"outputSizes": [1280, 520, 48], "weightFormat": "mxfp8-block32-ue8m0"}})
    assert any("[520, 48]" in line and "multiples of 32" in line for line in lines), lines


def test_crd_has_one_block_rule_per_block_scaled_format():
    rules = CEL_RULES["spec.projection"]
    assert len(rules) == sum(1 for b in WEIGHT_FORMAT_BLOCK.values() if b)
    for fmt, block in WEIGHT_FORMAT_BLOCK.items():
        if block is None:
            continue
        (rule,) = [r for r in rules if f"!= '{fmt}'" in r["rule"]]
        assert f"% {block} == 0" in rule["rule"] and fmt in rule["message"]
        # an object without weightFormat is the V4.1 default, as pydantic fills it in
        assert "has(self.weightFormat) ? self.weightFormat : 'mxfp8-block32-ue8m0'" in rule["rule"]


@pytest.mark.parametrize("backend", ["humming", "marlin", "torch-bf16", "torch-fp8", "vllm", "auto"])
def test_gemm_backends_are_accepted(backend):
    # torch-fp8 takes 128×128 blocks only: on the default MXFP8 weight it is refused (spx.api.combinations)
    projection = {"weightFormat": "fp8-block128-ue8m0"} if backend == "torch-fp8" else {}
    spec = validate_spec({"kernel": {"gemmBackend": backend}, "projection": projection})
    assert spec.kernel.gemm_backend == backend


def test_unknown_gemm_backend_lists_the_choices():
    lines = problems({"kernel": {"gemmBackend": "deepgemm"}})
    assert any("humming" in line and "marlin" in line for line in lines), lines
