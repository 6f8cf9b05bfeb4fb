"""Names, labels and owner references of everything the operator creates (the bench Job, its pod, the
result ConfigMap), and the label/annotation keys it reads them back by. Pure.

Every name is a deterministic function of the experiment's name and generation, so a restarted
operator finds its children by name (and owner uid) instead of creating them again. Kubernetes
bounds them: a Job name must be a DNS label (≤ 63) because it becomes the pods' ``job-name`` label
value, and label values are ≤ 63 characters too; longer names are cut and suffixed with a hash of
the full name.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from spx.api.spec import API_VERSION, GROUP, KIND

#: Prefix of every label/annotation key the operator owns (also kopf's finalizer/annotation prefix).
PREFIX = GROUP
LABEL_EXPERIMENT = f"{PREFIX}/experiment"
LABEL_EXPERIMENT_UID = f"{PREFIX}/experiment-uid"
LABEL_GENERATION = f"{PREFIX}/generation"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "spx-operator"
ANNOTATION_EXPERIMENT = f"{PREFIX}/experiment"
ANNOTATION_EXPERIMENT_NAME = f"{PREFIX}/experiment-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Kueue's WorkloadPriorityClass label (``kueue.x-k8s.io/priority-class``) on the Job.
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: Selector of everything the operator creates (used for server-side filtered watches).
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
#: The bench container's name in the Job's pod (its status, logs and termination message are read by it).
CONTAINER_NAME = "bench"

#: Kubernetes names: a Job name must be a DNS label (≤ 63) because it becomes the pods' ``job-name``
#: label value; label values are ≤ 63 characters too.
MAX_NAME = 63

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def _digest(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _dns_label(text: str) -> str:
    """Lower-case, ``[a-z0-9-]`` only, no leading/trailing dash."""
    return _NOT_DNS.sub("-", text.lower()).strip("-")


def _bounded(base: str, suffix: str, full: str) -> str:
    """``base + suffix`` if it fits a DNS label, else ``base[:k] + '-' + hash(full) + suffix``."""
    base = _dns_label(base) or "x"
    if len(base) + len(suffix) <= MAX_NAME and base == full:
        return base + suffix
    head = base[: MAX_NAME - len(suffix) - 9].rstrip("-") or "x"
    return f"{head}-{_digest(full)}{suffix}"


def job_name(experiment_name: str, generation: int) -> str:
    """Deterministic Job name of one run: ``<experiment>-g<generation>``, a DNS label ≤ 63 characters.

    Long (or non-DNS-label) experiment names are truncated and suffixed with a hash of the full
    name, so different experiments never share a Job name and the same one always gets the same.
    """
    return _bounded(experiment_name, f"-g{int(generation)}", experiment_name)


def result_configmap_name(experiment_name: str, generation: int) -> str:
    """Name of the ConfigMap holding the result of one run: ``<job name>-result``."""
    return f"{job_name(experiment_name, generation)}-result"


def experiment_label_value(experiment_name: str) -> str:
    """The ``bench.spx.dev/experiment`` label value: the name, or a bounded hash form if > 63 chars."""
    if len(experiment_name) <= MAX_NAME and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", experiment_name):
        return experiment_name
    return _bounded(experiment_name, "", experiment_name + "\0")


def owner_reference(experiment_name: str, uid: str) -> dict[str, Any]:
    """Controller owner reference to the experiment (garbage collection removes the child with it)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": experiment_name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def link_labels(experiment_name: str, uid: str, generation: int) -> dict[str, str]:
    """Labels put on every child (Job, pod, ConfigMap): which experiment, which incarnation, which run."""
    return {
        "app.kubernetes.io/name": "spx-bench",
        "app.kubernetes.io/component": "kernel-bench",
        "app.kubernetes.io/part-of": "spx",
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_EXPERIMENT: experiment_label_value(experiment_name),
        LABEL_EXPERIMENT_UID: uid,
        LABEL_GENERATION: str(int(generation)),
    }
