"""How the bench container ended, read from its pod: the container's status, its ``terminated`` state
(exit code, the signal of codes > 128, the kubelet's reason such as ``OOMKilled``) and its
termination message (``/dev/termination-log``, where the bench writes its bounded
:class:`~spx.api.ResultSummary`). Pure.
"""

from __future__ import annotations

import signal

from spx.controller.decide import objects as objs
from spx.controller.manifests.naming import CONTAINER_NAME


def container_status(pod: objs.Body, name: str = CONTAINER_NAME) -> objs.Body | None:
    """The status of container ``name`` (else the first container's); None before the kubelet reports any."""
    statuses = objs.status(pod).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == name), statuses[0] if statuses else None)


def terminated_state(pod: objs.Body) -> objs.Body | None:
    """The bench container's ``terminated`` state (current, else the last one); None if it never ended."""
    cs = container_status(pod)
    if cs is None:
        return None
    return (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")


def termination_message(pod: objs.Body) -> str | None:
    """The bench container's termination message (``/dev/termination-log``); None if it never ended."""
    term = terminated_state(pod)
    return term.get("message") if term else None


def _signal_name(code: int) -> str | None:
    if code > 128:
        try:
            return signal.Signals(code - 128).name
        except ValueError:
            return None
    return None


def describe_exit(term: objs.Body) -> str:
    """One line on how the container ended: exit code, the signal of codes > 128, the kubelet's reason."""
    code = int(term.get("exitCode", -1))
    reason = term.get("reason") or ""
    sig = _signal_name(code)
    meaning = {1: "the benchmark failed", 2: "the benchmark rejected its input"}.get(code, "")
    parts = [f"exit code {code}"]
    if sig:
        parts.append(sig)
    if reason and reason not in ("Error", "Completed"):
        parts.append(reason)
    text = f"container {CONTAINER_NAME} ended with " + ", ".join(parts)
    return f"{text} ({meaning})" if meaning else text
