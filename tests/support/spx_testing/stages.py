"""What the two real-vLLM test stages (tests/real_vllm, tests/vllm_server) share: their folder's marker,
and the skip-or-fail rule for a missing install (skip on a developer's machine, fail in the stage that
set the ``SPX_REQUIRE_*`` variable, where a missing install is a broken set-up)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def mark_folder(items: list[pytest.Item], folder: Path, marker: pytest.MarkDecorator) -> None:
    """Add ``marker`` to every collected test under ``folder``."""
    for item in items:
        if folder in Path(str(item.fspath)).resolve().parents:
            item.add_marker(marker)


def missing(reason: str, require_env: str, fail_hint: str, skip_hint: str) -> None:
    """Fail (``require_env`` = 1: the stage needs it) or skip, naming ``reason`` and how to install it."""
    if os.environ.get(require_env) == "1":
        pytest.fail(f"{reason} ({require_env}=1: {fail_hint})")
    pytest.skip(f"{reason}: {skip_hint}")
