"""The vocabulary of the controller's decision step: what it observed, what it asks, what it decides.

Plain, frozen data (no behaviour): :class:`Observed` goes into :func:`spx.controller.decide.conclusion.conclude`,
a :class:`Plan` comes out — with at most one :data:`Need` (a question only the API server can
answer; the reactor answers it and decides again) and :data:`Action` effects.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spx import __version__
from spx.api.loading import SpecError
from spx.api.policy import Policy
from spx.api.spec import ExperimentSpec
from spx.api.status import ExperimentStatus
from spx.controller.decide.observation import Timeouts
from spx.controller.manifests.job import BenchOptions
from spx.vocabulary import InfraReason

Manifest = dict[str, Any]


# Questions the reactor answers (then decides again) -------------------------------------------------


@dataclass(frozen=True)
class AskAdmission:
    """Is there a slot under the operator's concurrency limit for a new run?"""


@dataclass(frozen=True)
class CreateJob:
    """Create this Job; tell me how it went (created/adopted, refused, or a foreign Job has the name)."""

    manifest: Manifest


@dataclass(frozen=True)
class ConfirmJobGone:
    """The status names Job ``name`` but the store has none: ask the API server, not the cache."""

    name: str


@dataclass(frozen=True)
class FetchFailedCreate:
    """Why did the Job controller create no pod for Job ``job`` (its latest ``FailedCreate`` event)?"""

    job: str


@dataclass(frozen=True)
class ReadResults:
    """Read the pod's termination message and log (``pod`` None: the pod is gone)."""

    pod: str | None


@dataclass(frozen=True)
class CheckNodes:
    """Are these nodes (of pods being deleted) Ready? A pod on a lost node is not waited on."""

    names: tuple[str, ...]


Need = AskAdmission | CreateJob | ConfirmJobGone | FetchFailedCreate | ReadResults | CheckNodes


# Effects the reactor carries out --------------------------------------------------------------------


@dataclass(frozen=True)
class DeleteJobs:
    """Delete these Jobs (background propagation: their pods go with them)."""

    names: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class StoreResult:
    """Create (or refresh) the result ConfigMap — only while the owning experiment still exists."""

    manifest: Manifest


@dataclass(frozen=True)
class ReadProgress:
    """Make sure the running pod's log is followed (:mod:`spx.controller.logs`), so its points survive
    the pod."""

    pod: str
    pod_uid: str


Action = DeleteJobs | StoreResult | ReadProgress

#: (type, reason, message) of a core/v1 Event about the experiment.
Event = tuple[str, str, str]


@dataclass(frozen=True)
class Plan:
    """What to do for one experiment.

    Order of execution: ``before`` (effects), the ``status`` write (None: leave ``.status`` as it
    is) with its ``events``, ``after`` (effects), then ``need`` (find out and decide again) or a
    re-check in ``requeue_after_s`` seconds. ``slot_freed``: queued experiments may start now.
    ``outcome`` labels ``spx_reconcile_total``.
    """

    outcome: str
    status: ExperimentStatus | None = None
    events: tuple[Event, ...] = ()
    before: tuple[Action, ...] = ()
    after: tuple[Action, ...] = ()
    need: Need | None = None
    requeue_after_s: float | None = None
    slot_freed: bool = False
    observed_duration: bool = False


# What the reactor observed ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """The answer to :class:`AskAdmission`: ``admitted``, else how many run (``active``) of ``limit``;
    ``synced`` False while the reactor has not listed both experiments and Jobs yet (then: wait)."""

    admitted: bool
    active: int = 0
    limit: int = 0
    synced: bool = True


@dataclass(frozen=True)
class JobCreation:
    """The answer to :class:`CreateJob`: ``code``/``message`` of a refusal (400/403/422), or
    ``foreign`` (a Job of that name belongs to someone else)."""

    code: int | None = None
    message: str = ""
    foreign: bool = False
    #: Set when the operator itself refused before asking the API server (Kueue not installed,
    #: LocalQueue missing: :func:`spx.controller.decide.admission.queue_refusal`): the Completed reason.
    reason: InfraReason | None = None


@dataclass(frozen=True)
class Results:
    """The raw outputs of the run's pod (the answer to :class:`ReadResults`): its termination message
    and its log (None: not available), and the log received while it still ran (``progress_log``: the
    operator follows the pod's log stream, so what the bench wrote up to its exit survives the pod)."""

    message: str | None = None
    log: str | None = None
    progress_log: str | None = None


@dataclass(frozen=True)
class Observed:
    """The inputs of :func:`conclude` for one experiment (plain data; the reactor fills it in).

    ``jobs``: this experiment's Jobs (any generation) from the store; ``pods``: the pods of those
    Jobs; ``gone_pods``: the last state of those Jobs' pods deleted since (from the watch's DELETED
    events or a re-list; the operator's memory — an evicted pod, a pod deleted at the deadline);
    ``nodes``: the answer to :class:`CheckNodes` (node name → Ready, None: unknown); ``spec``: the validated spec of this generation or the validation error. The answers to
    earlier :data:`Need` questions: ``admission``, ``creation``, ``job_gone`` (the API server said
    404 for the status' Job), ``failed_create``, ``results``, ``progress_log`` (the running pod's log
    as last read, and when: ``progress_read_at``), ``status_rejected`` (the API server's 422 message
    for the last status write). ``policy``: what the operator's admin allows an experiment to ask
    for (``SPX_POLICY``; the default allows everything), checked before a Job is created.
    """

    name: str
    namespace: str
    uid: str
    generation: int
    spec: ExperimentSpec | SpecError
    status: ExperimentStatus
    now: dt.datetime
    jobs: Sequence[Mapping[str, Any]] = ()
    pods: Sequence[Mapping[str, Any]] = ()
    gone_pods: Sequence[Mapping[str, Any]] = ()
    deleting: bool = False
    timeouts: Timeouts = Timeouts()
    bench_image: str = f"ghcr.io/spx-dev/spx-bench:{__version__}"
    bench: BenchOptions = BenchOptions()
    progress_interval_s: float = 30.0
    policy: Policy = field(default_factory=Policy)
    admission: Admission | None = None
    creation: JobCreation | None = None
    job_gone: bool = False
    failed_create: str | None = None
    results: Results | None = None
    progress_log: str | None = None
    progress_read_at: dt.datetime | None = None
    status_rejected: str | None = None
    nodes: Mapping[str, bool | None] | None = None
    #: The API server's message when it refused the result ConfigMap for good (4xx: a quota, an
    #: admission policy): the run is decided without it.
    store_refused: str | None = None
