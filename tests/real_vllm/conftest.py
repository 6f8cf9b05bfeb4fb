"""Tests against the real vLLM package on CPU (marker ``vllm``; ``pytest -m vllm``).

``scripts/setup_vllm.sh`` installs ``vllm==0.33.0`` into ``.venv`` (``scripts/test.sh`` runs it, then this
stage with ``SPX_REQUIRE_VLLM=1``). Without vLLM the tests skip, saying so; with
``SPX_REQUIRE_VLLM=1`` a missing vLLM fails them instead (a broken install must not pass as skipped).

vLLM is imported inside fixtures, never at collection: the other stages deselect these tests
(``-m "not vllm"``) and check that spx itself never imports vLLM.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from spx_testing.stages import mark_folder, missing

HERE = Path(__file__).resolve().parent
VLLM_VERSION = "0.33.0"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, HERE, pytest.mark.vllm)


def _missing(reason: str) -> None:
    missing(reason, "SPX_REQUIRE_VLLM", "the vllm stage needs it; run scripts/setup_vllm.sh",
            "install it with `bash scripts/setup_vllm.sh` (CI does)")


@pytest.fixture(scope="session")
def vllm() -> Iterator[ModuleType]:
    """The real ``vllm`` package on its CPU platform (``VLLM_TARGET_DEVICE=cpu``)."""
    if importlib.util.find_spec("vllm") is None:
        _missing("vllm is not installed")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    module = importlib.import_module("vllm")
    if module.__version__ != VLLM_VERSION:
        _missing(f"these tests are written against vllm {VLLM_VERSION}, found {module.__version__}")
    from vllm.platforms import current_platform

    assert current_platform.is_cpu(), f"vLLM chose {type(current_platform).__name__}, not its CPU platform"
    yield module
