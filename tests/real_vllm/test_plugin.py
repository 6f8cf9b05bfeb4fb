"""The spx threshold plugin inside the real vLLM 0.33.0: found through the installed entry point by
vLLM's own ``load_general_plugins`` (group ``vllm.general_plugins``, filtered by ``VLLM_PLUGINS``), it
sets ``vllm.models.deepseek_v41.attention._SHARD_FUSED_WQA_WKV_MIN_TOKENS``; and a real ``vllm serve``
refuses to start on a bad value and logs the value it set.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from spx.vllm_ext.plugin import ENTRY_POINT_GROUP, ENTRY_POINT_NAME, ENV_THRESHOLD, LOG_MARKER, OFF_TOKENS, SYMBOL

TARGET = "vllm.models.deepseek_v41.attention"


@pytest.fixture
def attention(vllm: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """vLLM's V4.1 attention module, its threshold restored afterwards; vLLM's once-per-process plugin
    flag reset so each test loads the plugins again (vLLM does so once per process it starts)."""
    import vllm.plugins

    module = importlib.import_module(TARGET)
    assert getattr(module, SYMBOL) == 2048  # vLLM 0.33.0's default
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    monkeypatch.delenv("SPX_SHARD_FUSED_WQA_WKV_TARGET", raising=False)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    yield module
    setattr(module, SYMBOL, 2048)


def test_entry_point_is_in_vllms_group(vllm: ModuleType) -> None:
    from importlib.metadata import entry_points

    from vllm.plugins import DEFAULT_PLUGINS_GROUP

    assert DEFAULT_PLUGINS_GROUP == ENTRY_POINT_GROUP
    found = {ep.name: ep.value for ep in entry_points(group=DEFAULT_PLUGINS_GROUP)}
    assert found.get(ENTRY_POINT_NAME) == "spx.vllm_ext.plugin:register"


@pytest.mark.parametrize(("raw", "tokens"), [("off", OFF_TOKENS), ("4096", 4096), ("1_024", 1024)])
def test_load_general_plugins_sets_the_threshold(
    attention: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raw: str, tokens: int
) -> None:
    from vllm.plugins import load_general_plugins

    monkeypatch.setenv(ENV_THRESHOLD, raw)
    load_general_plugins()
    assert getattr(attention, SYMBOL) == tokens
    assert f"{LOG_MARKER}{TARGET}.{SYMBOL} = {tokens}" in capsys.readouterr().err
    load_general_plugins()  # vLLM loads plugins once per process
    assert getattr(attention, SYMBOL) == tokens


def test_vllm_plugins_filter_selects_or_leaves_out_the_plugin(attention: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.plugins

    monkeypatch.setenv(ENV_THRESHOLD, "off")
    monkeypatch.setenv("VLLM_PLUGINS", "some_other_plugin")
    vllm.plugins.load_general_plugins()
    assert getattr(attention, SYMBOL) == 2048  # filtered out: vLLM's default stays
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    monkeypatch.setenv("VLLM_PLUGINS", f"some_other_plugin,{ENTRY_POINT_NAME}")
    vllm.plugins.load_general_plugins()
    assert getattr(attention, SYMBOL) == OFF_TOKENS


def test_garbage_is_raised_through_load_general_plugins(attention: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.plugins import load_general_plugins

    from spx.vllm_ext.plugin import ThresholdPluginError

    monkeypatch.setenv(ENV_THRESHOLD, "2k")
    with pytest.raises(ThresholdPluginError, match="'2k' is not a token count"):
        load_general_plugins()
    assert getattr(attention, SYMBOL) == 2048


def _vllm_serve(env_update: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The real ``vllm serve`` CLI on a model directory that does not exist: it loads the plugins while
    building its parser, then stops at the model (CPU, offline)."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", **env_update}
    env.pop("VLLM_PLUGINS", None)
    cli = Path(sys.executable).with_name("vllm")
    return subprocess.run(
        [str(cli), "serve", str(tmp_path / "no-model"), "--port", "0"], env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )


def test_vllm_serve_refuses_to_start_on_garbage(vllm: ModuleType, tmp_path: Path) -> None:
    out = _vllm_serve({ENV_THRESHOLD: "garbage"}, tmp_path)
    assert out.returncode != 0
    assert "ThresholdPluginError: SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS='garbage' is not a token count" in out.stderr
    assert "non-default args" not in out.stderr + out.stdout  # stopped before parsing its arguments


def test_vllm_serve_logs_the_threshold_it_set(vllm: ModuleType, tmp_path: Path) -> None:
    out = _vllm_serve({ENV_THRESHOLD: "off"}, tmp_path)
    log = out.stderr + out.stdout
    assert f"{LOG_MARKER}{TARGET}.{SYMBOL} = {OFF_TOKENS} (off (never split); was 2048)" in log
    assert "non-default args" in log  # it went on to start, and stopped only at the missing model
    assert out.returncode != 0
