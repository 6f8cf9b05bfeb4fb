"""spx.controller.leader.lease_action: create, renew, take or wait, from the Lease and how long it has not changed."""

from __future__ import annotations

from typing import Any

import pytest

from spx.controller.leader import Timing, lease_action, micro_time

T = Timing(lease_s=15, renew_deadline_s=10, retry_s=2)


def lease(holder: str | None, duration: int | None = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if holder is not None:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"metadata": {"resourceVersion": "7"}, "spec": spec}


@pytest.mark.parametrize(("case", "obj", "unchanged_s", "action"), [
    ("none", None, 0.0, "create"),
    ("mine", lease("me"), 100.0, "renew"),
    ("mine-fresh", lease("me"), 0.0, "renew"),
    ("free", lease(""), 0.0, "take"),
    ("no-holder-field", lease(None), 0.0, "take"),
    ("other-fresh", lease("other"), 3.0, "wait"),
    ("other-at-duration", lease("other"), 15.0, "wait"),
    ("other-expired", lease("other"), 15.1, "take"),
    ("other-short-lease-expired", lease("other", 5), 6.0, "take"),
    ("other-no-duration-uses-ours", lease("other", None), 14.0, "wait"),
])
def test_lease_action(case: str, obj: dict[str, Any] | None, unchanged_s: float, action: str) -> None:
    assert lease_action(obj, "me", unchanged_s, T) == action


def test_timing_must_leave_a_gap_between_renew_deadline_and_expiry() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        Timing(lease_s=10, renew_deadline_s=10, retry_s=2)


def test_micro_time_is_what_the_api_server_accepts() -> None:
    import datetime as dt

    assert micro_time(dt.datetime(2026, 12, 1, 22, 5, 1, 12, tzinfo=dt.UTC)) == "2026-12-01T22:05:01.000012Z"
