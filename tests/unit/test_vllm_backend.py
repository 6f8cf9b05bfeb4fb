"""spx.bench.vllm_backend without vLLM: clear errors, version rules, the checkpoint configs. The layer itself
is tested against the real vLLM in tests/real_vllm (``pytest -m vllm``)."""

from __future__ import annotations

import sys
import types

import pytest

from spx.api.spec import ExperimentSpec
from spx.bench import vllm_backend
from spx.bench.vllm_backend import checkpoint_quant_config, ensure_vllm
from spx.bench.vllm_runtime import _parse_version

MESSAGE = "gemmBackend vllm needs an importable vLLM ≥ 0.33"


def test_missing_vllm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(RuntimeError, match=MESSAGE) as err:
        ensure_vllm()
    assert "bench image" in str(err.value)
    spec = ExperimentSpec()
    with pytest.raises(RuntimeError, match=MESSAGE):
        vllm_backend.build_vllm_projection(spec, "cuda", None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=MESSAGE):
        vllm_backend.build_vllm_gather(spec, "cuda", 16, 1792, None)  # type: ignore[arg-type]


def test_old_vllm_is_refused_unless_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("vllm")
    fake.__version__ = "0.30.1rc1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    with pytest.raises(RuntimeError, match=rf"{MESSAGE} \(found 0.30.1rc1"):
        ensure_vllm()
    monkeypatch.setenv("SPX_VLLM_SKIP_VERSION_CHECK", "1")
    assert ensure_vllm() is fake
    monkeypatch.delenv("SPX_VLLM_SKIP_VERSION_CHECK")
    fake.__version__ = "0.33.0"  # type: ignore[attr-defined]
    assert ensure_vllm() is fake


@pytest.mark.parametrize(
    ("version", "parsed"),
    [("0.33.0", (0, 33)), ("0.34.1.dev12+gabc", (0, 34)), ("1.0.0", (1, 0)), ("0.1.dev1+g1234", None), ("unknown", None)],
)
def test_parse_version(version: str, parsed: tuple[int, int] | None) -> None:
    assert _parse_version(version) == parsed


@pytest.mark.parametrize("block", [32, 128])
def test_quant_config_is_the_checkpoints(block: int) -> None:
    """V4.1 (32, MXFP8) and V3-style (128) ``quantization_config`` of ``config.json``."""
    assert checkpoint_quant_config(block) == {
        "quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "scale_fmt": "ue8m0",
        "weight_block_size": [block, block],
    }


def test_unknown_block_is_refused() -> None:
    with pytest.raises(ValueError, match="FP8 weight block 64"):
        checkpoint_quant_config(64)


def test_module_does_not_import_vllm_at_import_time() -> None:
    """In a fresh interpreter: another test of this process may have imported vLLM where it is installed."""
    import subprocess

    code = "import sys, spx.bench.vllm_backend; sys.exit(1 if 'vllm' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
