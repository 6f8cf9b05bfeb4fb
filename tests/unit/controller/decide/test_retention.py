"""spx.controller.decide.retention.due: finished experiments past the retention, and nothing else."""

from __future__ import annotations

import datetime as dt
from typing import Any

from spx.controller.decide.retention import due

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def exp(name: str, phase: str | None, completed_h_ago: float | None, generation: int = 1, observed: int = 1,
        deleting: bool = False) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "namespace": "ml", "generation": generation}
    if deleting:
        m["deletionTimestamp"] = "2026-12-01T11:00:00Z"
    st: dict[str, Any] = {"observedGeneration": observed}
    if phase:
        st["phase"] = phase
    if completed_h_ago is not None:
        st["completionTime"] = (NOW - dt.timedelta(hours=completed_h_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": m, "status": st}


EXPERIMENTS = [
    exp("old-pass", "Succeeded", 50),
    exp("older-fail", "Failed", 70),
    exp("fresh", "Succeeded", 1),
    exp("running", "Running", None),
    exp("rerun-pending", "Succeeded", 90, generation=2, observed=1),
    exp("going", "Failed", 90, deleting=True),
    exp("no-time", "Succeeded", None),
]


def test_only_decided_experiments_past_the_retention_are_due_oldest_first() -> None:
    assert due(EXPERIMENTS, NOW, 48 * 3600) == [("ml", "older-fail"), ("ml", "old-pass")]


def test_zero_keeps_everything() -> None:
    assert due(EXPERIMENTS, NOW, 0) == []


def test_the_bound_is_strict() -> None:
    assert due([exp("edge", "Succeeded", 2)], NOW, 2 * 3600) == []
    assert due([exp("edge", "Succeeded", 2)], NOW, 2 * 3600 - 1) == [("ml", "edge")]
