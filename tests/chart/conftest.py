"""Fixtures of the chart tests: the real Helm engine (helm-python-sdk) and the loaded chart."""

from __future__ import annotations

from typing import Any

import pytest
from chartlib import CHART


@pytest.fixture(scope="session")
def helm() -> Any:
    return pytest.importorskip("helm_python", reason="helm-python-sdk (dev dependency) is not installed")


@pytest.fixture(scope="session")
def chart(helm: Any) -> Any:
    loaded = helm.Chart.load(str(CHART))
    yield loaded
    loaded.close()
