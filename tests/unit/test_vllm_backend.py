"""spx.bench.vllm_backend without vLLM: clear errors, version rules (the GPU paths need vLLM + a GPU)."""

from __future__ import annotations

import sys
import types

import pytest

from spx.api.spec import ExperimentSpec
from spx.bench import vllm_backend
from spx.bench.vllm_backend import DEEPSEEK_V4_FP8_CONFIG, _parse_version, ensure_vllm

MESSAGE = "gemmBackend vllm needs an importable vLLM ≥ 0.33"


def test_missing_vllm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(RuntimeError, match=MESSAGE) as err:
        ensure_vllm()
    assert "bench image" in str(err.value)
    spec = ExperimentSpec()
    with pytest.raises(RuntimeError, match=MESSAGE):
        vllm_backend.build_vllm_projection(spec, "cuda")
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


def test_deepseek_v4_quant_config_is_the_checkpoints() -> None:
    assert DEEPSEEK_V4_FP8_CONFIG == {
        "quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "scale_fmt": "ue8m0",
        "weight_block_size": [128, 128],
    }


def test_module_does_not_import_vllm_at_import_time() -> None:
    import importlib

    importlib.reload(vllm_backend)
    assert "vllm" not in sys.modules


def test_checkpoint_weight_is_loaded_shard_by_shard_then_post_processed() -> None:
    """The loader feeds vLLM's ``weight_loader`` the ``wq_a`` rows as shard 0 and ``wkv`` as shard 1,
    with the matching 128-row blocks of scales (a fake layer records the calls; torch on CPU)."""
    torch = pytest.importorskip("torch")
    from spx.bench.weights import quantize_weight_fp8_block

    w = quantize_weight_fp8_block(torch.randn(1792, 256) * 0.05)
    calls: list[tuple[str, int, tuple[int, ...], object]] = []

    class Param(torch.nn.Parameter):
        pass

    def make(name: str, shape: tuple[int, ...], dtype: object) -> object:
        p = Param(torch.empty(shape, dtype=dtype), requires_grad=False)
        p.weight_loader = lambda param, loaded, shard: calls.append((name, shard, tuple(loaded.shape), loaded.dtype))
        return p

    class QuantMethod:
        processed = False

        def process_weights_after_loading(self, layer: object) -> None:
            QuantMethod.processed = True

    layer = torch.nn.Module()
    layer.register_parameter("weight", make("weight", (1792, 256), torch.float8_e4m3fn))
    layer.register_parameter("weight_scale_inv", make("scale", (14, 2), torch.float32))
    layer.quant_method = QuantMethod()
    vllm_backend._load_checkpoint_weight(layer, w, [1280, 512])
    assert calls == [
        ("weight", 0, (1280, 256), torch.float8_e4m3fn), ("scale", 0, (10, 2), torch.float32),
        ("weight", 1, (512, 256), torch.float8_e4m3fn), ("scale", 1, (4, 2), torch.float32),
    ]
    assert QuantMethod.processed
