"""The spx vLLM general plugin against stand-in modules (one exposes the symbol, one does not)."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spx.vllm_ext.plugin import (
    DEFAULT_TARGET,
    ENV_TARGET,
    ENV_THRESHOLD,
    OFF_TOKENS,
    SYMBOL,
    ThresholdPluginError,
    apply,
    parse_threshold,
    register,
)


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package ``spx_standin_vllm`` with ``attention`` (has the symbol), ``model`` (copied it with
    ``from .attention import``), ``old_attention`` (no symbol) and ``weird`` (symbol not an int)."""
    pkg = tmp_path / "spx_standin_vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "attention.py").write_text(f"{SYMBOL} = 2048\n")
    (pkg / "model.py").write_text(f"from .attention import {SYMBOL}\n\ndef gate(n):\n    return n >= {SYMBOL}\n")
    (pkg / "old_attention.py").write_text("OTHER = 1\n")
    (pkg / "weird.py").write_text(f"{SYMBOL} = '2048'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [n for n in sys.modules if n.startswith("spx_standin_vllm")]:
        del sys.modules[name]


def test_sets_the_symbol_and_logs_it(standins: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vllm.plugins.spx_shard_threshold")
    assert apply({ENV_THRESHOLD: "4096", ENV_TARGET: "spx_standin_vllm.attention"}) == 4096
    mod = importlib.import_module("spx_standin_vllm.attention")
    assert getattr(mod, SYMBOL) == 4096
    assert "spx: set spx_standin_vllm.attention._SHARD_FUSED_WQA_WKV_MIN_TOKENS = 4096" in caplog.text
    assert "was 2048" in caplog.text
    assert caplog.records[-1].name.startswith("vllm.")  # printed by vLLM's own log handler


def test_off_is_a_threshold_no_batch_reaches(standins: Path) -> None:
    assert apply({ENV_THRESHOLD: "off", ENV_TARGET: "spx_standin_vllm.attention"}) == OFF_TOKENS
    assert getattr(importlib.import_module("spx_standin_vllm.attention"), SYMBOL) == 2**31 - 1
    assert OFF_TOKENS < 2**31  # still an int32


def test_copies_already_imported_are_updated_and_later_imports_see_the_value(standins: Path) -> None:
    model = importlib.import_module("spx_standin_vllm.model")
    assert model.gate(2048) is True
    apply({ENV_THRESHOLD: "off", ENV_TARGET: "spx_standin_vllm.attention"})
    assert getattr(model, SYMBOL) == OFF_TOKENS
    assert model.gate(1 << 20) is False  # the copied binding was updated too


def test_module_without_the_symbol_is_a_startup_error(standins: Path) -> None:
    with pytest.raises(ThresholdPluginError, match=f"has no {SYMBOL}.*Refusing to start"):
        apply({ENV_THRESHOLD: "2048", ENV_TARGET: "spx_standin_vllm.old_attention"})


def test_missing_module_is_a_startup_error(standins: Path) -> None:
    with pytest.raises(ThresholdPluginError, match="cannot be imported.*vLLM ≥ 0.33"):
        apply({ENV_THRESHOLD: "2048", ENV_TARGET: "spx_standin_vllm.nope"})


def test_the_repository_never_shadows_vllm() -> None:
    """No folder of the repository is importable as ``vllm`` (a namespace package from a ``vllm/`` folder
    on ``sys.path``, e.g. ``tests/`` under pytest, would make ``find_spec`` find it and hide a missing vLLM)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        return
    repo = Path(__file__).resolve().parents[2]
    where = [Path(p).resolve() for p in (spec.submodule_search_locations or [])]
    ours = [p for p in where if repo in p.parents and "site-packages" not in p.parts]  # (.venv may be in the repo)
    assert spec.origin not in (None, "namespace") and not ours, where


def test_default_target_is_vllms_module() -> None:
    assert DEFAULT_TARGET == "vllm.models.deepseek_v41.attention"
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the error path needs a machine without it")
    with pytest.raises(ThresholdPluginError, match=DEFAULT_TARGET.replace(".", r"\.")):
        apply({ENV_THRESHOLD: "2048"})  # vLLM is not installed here: a clear error, not a no-op


def test_symbol_that_is_not_an_int_is_an_error(standins: Path) -> None:
    with pytest.raises(ThresholdPluginError, match="not a token count"):
        apply({ENV_THRESHOLD: "2048", ENV_TARGET: "spx_standin_vllm.weird"})


def test_unset_does_nothing_and_imports_nothing(standins: Path) -> None:
    assert apply({ENV_TARGET: "spx_standin_vllm.attention"}) is None
    assert apply({ENV_THRESHOLD: "  ", ENV_TARGET: "spx_standin_vllm.attention"}) is None
    assert "spx_standin_vllm.attention" not in sys.modules


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "2.5", "+5", "2048 tokens", "²"])
def test_invalid_values(raw: str) -> None:
    with pytest.raises(ThresholdPluginError, match="not a token count"):
        parse_threshold(raw)


@pytest.mark.parametrize(("raw", "tokens"), [("2048", 2048), (" 1024 ", 1024), ("OFF", OFF_TOKENS), ("16_384", 16384), ("1", 1)])
def test_valid_values(raw: str, tokens: int) -> None:
    assert parse_threshold(raw) == tokens


def test_register_reads_the_environment_and_is_idempotent(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_THRESHOLD, "1536")
    monkeypatch.setenv(ENV_TARGET, "spx_standin_vllm.attention")
    register()
    register()  # vLLM may load plugins more than once per process
    assert getattr(importlib.import_module("spx_standin_vllm.attention"), SYMBOL) == 1536


def test_importing_the_plugin_has_no_side_effects() -> None:
    """In a fresh interpreter: another test of this process may have imported vLLM where it is installed."""
    import subprocess

    code = "import sys, spx.vllm_ext.plugin; sys.exit(1 if 'vllm' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
