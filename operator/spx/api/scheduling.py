"""``spec.scheduling``: the bench Job's optional Kueue queue, priority classes and admission timeout."""

from __future__ import annotations

from pydantic import Field

from spx.api.base import CamelModel
from spx.api.k8s_patterns import DNS_SUBDOMAIN, LABEL_VALUE

#: Default of ``spec.scheduling.admissionTimeoutSeconds``: how long a Kueue-suspended Job may wait.
DEFAULT_ADMISSION_TIMEOUT_SECONDS = 6 * 3600


class SchedulingSpec(CamelModel):
    """Optional Kueue queue and priority classes for the bench Job.

    With ``queue_name`` Kueue is the queue: the Job is created suspended with the label
    ``kueue.x-k8s.io/queue-name`` (and ``kueue.x-k8s.io/priority-class`` from
    ``workload_priority_class_name``), a suspended Job holds none of the operator's concurrency slots,
    and the operator refuses the run before creating it when Kueue's API is not served or the
    LocalQueue does not exist (phase ``Failed``, reason ``InfraFailed``, Completed reason
    ``KueueNotInstalled`` / ``LocalQueueNotFound``).

    ``admission_timeout_seconds``: how long the Job may stay suspended waiting for Kueue's admission
    (default 6 h) before the run ends ``InfraFailed`` with reason ``NotAdmitted`` (the Job is deleted
    and the operator's slot freed). It bounds the wait, not the run (``timeoutSeconds`` does that).
    """

    queue_name: str | None = Field(default=None, min_length=1, max_length=63, pattern=LABEL_VALUE)
    """Kueue LocalQueue to submit the Job to (the Job is created suspended, Kueue admits it)."""
    priority_class_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """PriorityClass of the bench pod."""
    workload_priority_class_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Kueue WorkloadPriorityClass of the Job (label kueue.x-k8s.io/priority-class; with queueName): its order in Kueue's queue."""
    admission_timeout_seconds: int = Field(default=DEFAULT_ADMISSION_TIMEOUT_SECONDS, ge=60, le=7 * 24 * 3600)
    """Seconds the Job may wait suspended for Kueue admission before the run ends InfraFailed with reason NotAdmitted (default 21600 = 6 h)."""
