"""Retention of finished experiments (``SPX_FINISHED_RETENTION_SECONDS``): which ones are due. Pure.

An experiment decided (phase ``Succeeded`` or ``Failed``, ``status.completionTime`` set) longer ago
than the retention is deleted by the operator; its Job, pods and result ConfigMap go with it through
their owner references, its metric series with the store's delete event. 0 keeps everything (the
default). Experiments being deleted, undecided ones and those of an older generation's decision
(``observedGeneration`` behind ``metadata.generation``: a new run is pending) are never due.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from spx.api.conditions import TERMINAL_PHASES
from spx.controller.decide import objects as objs
from spx.controller.decide.conditions import parse_time
from spx.controller.decide.objects import deleting, meta

Key = tuple[str, str]


def due(experiments: Iterable[Mapping[str, Any]], now: dt.datetime, retention_s: float) -> list[Key]:
    """``(namespace, name)`` of the experiments decided more than ``retention_s`` seconds before ``now``,
    oldest first; [] when ``retention_s`` is 0 or less."""
    if retention_s <= 0:
        return []
    rows = []
    for exp in experiments:
        m, st = meta(exp), objs.status(exp)
        if deleting(exp) or st.get("phase") not in TERMINAL_PHASES:
            continue
        if st.get("observedGeneration") != m.get("generation"):
            continue
        done = parse_time(st.get("completionTime"))
        if done is not None and (now - done).total_seconds() > retention_s:
            rows.append((done, (str(m.get("namespace")), str(m.get("name")))))
    return [k for _, k in sorted(rows)]
