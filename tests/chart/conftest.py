"""Fixtures of the chart tests: the real Helm engine (helm-python-sdk), the loaded chart, and a real
control plane (``KUBEBUILDER_ASSETS``) for the RBAC / admission-policy / CRD-upgrade tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from chart_cluster import SKIP_REASON, Cluster, start
from chartlib import CHART


@pytest.fixture(scope="session")
def helm() -> Any:
    return pytest.importorskip("helm_python", reason="helm-python-sdk (dev dependency) is not installed")


@pytest.fixture(scope="session")
def chart(helm: Any) -> Any:
    loaded = helm.Chart.load(str(CHART))
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """One control plane for the chart's cluster tests (each test uses its own namespaces)."""
    if not os.environ.get("KUBEBUILDER_ASSETS"):
        pytest.skip(SKIP_REASON)
    yield from start()
