"""spx.controller.decide.pod_exit: how the bench container ended, in one line and from its pod's status."""

from __future__ import annotations

from spx.controller.decide.pod_exit import describe_exit, termination_message


def test_exit_descriptions() -> None:
    assert describe_exit({"exitCode": 139, "reason": "Error"}) == "container bench ended with exit code 139, SIGSEGV"
    assert "rejected its input" in describe_exit({"exitCode": 2})
    assert "OOMKilled" in describe_exit({"exitCode": 137, "reason": "OOMKilled"})


def test_the_termination_message_is_the_bench_containers_current_else_last_end() -> None:
    ended = {"terminated": {"exitCode": 0, "message": '{"points": []}'}}
    pod = {"status": {"containerStatuses": [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "message": "not mine"}}},
        {"name": "bench", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": ended},
    ]}}
    assert termination_message(pod) == '{"points": []}'
    pod["status"]["containerStatuses"][1]["state"] = {"terminated": {"exitCode": 1, "message": "now"}}
    assert termination_message(pod) == "now"
    assert termination_message({"status": {"phase": "Pending"}}) is None
