"""The result ConfigMap: everything one run produced, kept next to the experiment (pure builders).

Owned by the experiment (garbage-collected with it), named :func:`~spx.controller.manifests.naming.result_configmap_name`.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping, Sequence
from typing import Any

from spx.api.result import SUMMARY_MAX_BYTES
from spx.controller.manifests.naming import (
    ANNOTATION_EXPERIMENT_NAME,
    PREFIX,
    link_labels,
    owner_reference,
    result_configmap_name,
)
from spx.vocabulary import ACCURACY_RESULT_FILE, CANDIDATES, RESULT_FILE, SERVING_RESULT_FILE, STEP_RESULT_FILE

#: A ConfigMap holds at most 1 MiB; keep a margin for metadata.
CONFIGMAP_BUDGET_BYTES = 1_000_000
#: ``problems.txt`` keeps at most this many bytes (one problem per broken line of a long log would
#: otherwise crowd out the log itself, or push the ConfigMap past 1 MiB: refused, never written).
PROBLEMS_MAX_BYTES = 64 * 1024


def _problem_lines(notes: Sequence[str], limit: int) -> str:
    """The notes, one a line, whole lines up to ``limit`` bytes, then how many were left out."""
    kept: list[str] = []
    size = 0
    for i, note in enumerate(notes):
        line = note + "\n"
        if size + len(line.encode()) > limit - 100:
            kept.append(f"… {len(notes) - i} more problem line(s) left out to fit the ConfigMap\n")
            break
        kept.append(line)
        size += len(line.encode())
    return "".join(kept)


def _fit(data: dict[str, str], binary: dict[str, str], key: str, text: str, budget: int) -> int:
    """Put ``text`` under ``key`` if it fits ``budget`` bytes; else its gzip (base64) if that fits."""
    raw = text.encode()
    if len(raw) <= budget:
        data[key] = text
        return budget - len(raw)
    packed = base64.b64encode(gzip.compress(raw, mtime=0)).decode()
    if len(packed) <= budget:
        binary[key + ".gz"] = packed
        return budget - len(packed)
    return budget


def _truncate_middle(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    marker = f"\n… [{len(raw) - limit} bytes of the log left out to fit the ConfigMap] …\n"
    keep = max(0, limit - len(marker.encode()))
    head = raw[: keep // 4].decode(errors="ignore")
    tail = raw[len(raw) - (keep - keep // 4):].decode(errors="ignore")
    return head + marker + tail


def build_result_configmap(
    experiment_name: str,
    namespace: str,
    uid: str,
    generation: int,
    *,
    result: Mapping[str, Any] | None = None,
    termination_message: str | None = None,
    log: str | None = None,
    problems: Sequence[str] = (),
    pod_name: str | None = None,
    serving_result: Mapping[str, Any] | None = None,
    accuracy_result: Mapping[str, Any] | None = None,
    step_result: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ConfigMap that keeps everything a run produced, owned by the experiment.

    Keys: ``result.json`` (the validated full :class:`~spx.api.KernelResult`, when there is one),
    ``summary.json`` (the termination message exactly as the pod wrote it), ``pod.log`` (the pod's
    log), ``problems.txt`` (what was wrong with the result, if anything; at most
    :data:`PROBLEMS_MAX_BYTES`, then how many lines were left out). Everything must fit the
    1 MiB ConfigMap limit: the result goes gzip-compressed under ``binaryData`` (``result.json.gz``)
    when it does not fit as text; if even that is too big, its per-sample arrays are left out (the
    medians, quartiles and everything else stay) and ``problems.txt`` says so; the log is cut in the
    middle (head and tail kept) to what is left. ``serving-result.json``, ``accuracy-result.json`` and
    ``step-result.json`` (the vLLM benches' documents, when the run had them: every request of the step A/B
    is there) come after the kernel result, gzip-compressed when needed, left out with a note in
    ``problems.txt`` when they do not fit at all.
    """
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    notes = list(problems)
    budget = CONFIGMAP_BUDGET_BYTES
    if termination_message:
        clipped = termination_message[: SUMMARY_MAX_BYTES * 4]
        data["summary.json"] = clipped
        budget -= len(clipped.encode())
    if result is not None:
        budget = _fit_result(data, binary, notes, result, budget)
    for key, doc in ((SERVING_RESULT_FILE, serving_result), (ACCURACY_RESULT_FILE, accuracy_result),
                     (STEP_RESULT_FILE, step_result)):
        if doc is None:
            continue
        left = _fit(data, binary, key, json.dumps(doc, sort_keys=True, separators=(",", ":")), budget - 2048)
        if key not in data and key + ".gz" not in binary:
            notes.append(f"{key}: left out, too big for the 1 MiB ConfigMap (the pod log has it)")
        budget = left + 2048
    if notes:
        text = _problem_lines(notes, min(PROBLEMS_MAX_BYTES, max(0, budget)))
        data["problems.txt"] = text
        budget -= len(text.encode())
    if log:
        data["pod.log"] = _truncate_middle(log, max(0, budget - 1024))
    annotations = {ANNOTATION_EXPERIMENT_NAME: experiment_name}
    if pod_name:
        annotations[f"{PREFIX}/pod"] = pod_name
    metadata = {"name": result_configmap_name(experiment_name, generation), "namespace": namespace,
                "labels": link_labels(experiment_name, uid, generation), "annotations": annotations,
                "ownerReferences": [owner_reference(experiment_name, uid)]}
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
    if binary:
        manifest["binaryData"] = binary
    return manifest


def _fit_result(data: dict[str, str], binary: dict[str, str], notes: list[str], result: Mapping[str, Any],
                budget: int) -> int:
    """Put the kernel result into ``data`` (text) or ``binary`` (gzip), without its per-sample arrays if
    it does not fit otherwise (then a line in ``notes``); the bytes of ``budget`` left."""
    text = json.dumps(result, sort_keys=True, separators=(",", ":"))
    left = _fit(data, binary, RESULT_FILE, text, budget - 2048)
    if RESULT_FILE not in data and RESULT_FILE + ".gz" not in binary:
        slim = json.loads(json.dumps(result))
        for point in slim.get("points", []):
            for cand in CANDIDATES:
                if isinstance(point.get(cand), dict):
                    point[cand]["samplesUs"] = []
        notes.append("result.json: per-sample arrays (samplesUs) left out to fit the 1 MiB ConfigMap limit")
        left = _fit(data, binary, RESULT_FILE, json.dumps(slim, sort_keys=True, separators=(",", ":")), budget - 2048)
    return left + 2048


def read_result_configmap(configmap: Mapping[str, Any], key: str = RESULT_FILE) -> dict[str, Any] | None:
    """A document stored by :func:`build_result_configmap` (text or gzip), or None: ``result.json``
    (the kernel's), ``serving-result.json``, ``accuracy-result.json`` or ``step-result.json``."""
    data = configmap.get("data") or {}
    if key in data:
        return json.loads(data[key])  # type: ignore[no-any-return]
    binary = configmap.get("binaryData") or {}
    if key + ".gz" in binary:
        return json.loads(gzip.decompress(base64.b64decode(binary[key + ".gz"])))  # type: ignore[no-any-return]
    return None
