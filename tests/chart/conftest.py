"""Fixtures of the chart tests: the real Helm engine (helm-python-sdk), the loaded chart, and a real
control plane (``KUBEBUILDER_ASSETS``) for the RBAC / admission-policy / CRD-upgrade tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spx_testing.chart_cluster import Cluster, skip_reason, start
from spx_testing.chartlib import CHART


@pytest.fixture(scope="session")
def helm() -> Any:
    return pytest.importorskip("helm_python", reason="helm-python-sdk (dev dependency) is not installed")


@pytest.fixture(scope="session")
def chart(helm: Any) -> Any:
    loaded = helm.Chart.load(str(CHART))
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One control plane for the chart's cluster tests (each test uses its own namespaces)."""
    why = skip_reason()
    if why:
        pytest.skip(why)
    yield from start(tmp_path_factory.mktemp("chart-control-plane"))
