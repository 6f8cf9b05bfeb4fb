"""The ``ShardedProjectionExperiment`` spec (group ``bench.spx.dev``, version ``v1alpha1``).

The same model validates a file given to ``spx run`` and the object the operator reconciles, so an
invalid experiment is rejected before anything reaches a GPU. Field defaults describe the motivating
case: DeepSeek-V4.1's ``fused_wqa_wkv`` projection (hidden 5120 → 1280 + 512) at TP8 on Hopper.

This module holds the resource's identity (group, version, kind), :class:`ExperimentSpec` with the rules
that span sections, and :class:`Experiment`; each section's model is in the module of its name:
:mod:`spx.api.projection` (with ``parallelism``), :mod:`spx.api.sweep` (with ``sweep.refine``),
:mod:`spx.api.kernel` (its ``gatherModel`` in :mod:`spx.api.gather_model`), :mod:`spx.api.gate`,
:mod:`spx.api.resources`, :mod:`spx.api.scheduling`, :mod:`spx.api.serving`, :mod:`spx.api.accuracy`,
:mod:`spx.api.stage`, :mod:`spx.api.pod`; Kubernetes name syntax in :mod:`spx.api.k8s_patterns`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import Field, model_validator

from spx.api.accuracy import AccuracySpec
from spx.api.base import CamelModel
from spx.api.deployment import deployment_problems
from spx.api.gate import GateSpec
from spx.api.k8s_patterns import DNS_LABEL, DNS_SUBDOMAIN, LABEL_VALUE, LabelKey
from spx.api.kernel import KernelSpec
from spx.api.pod import PodSpec, path_overlaps
from spx.api.projection import ParallelismSpec, ProjectionSpec
from spx.api.resources import ResourcesSpec
from spx.api.scheduling import SchedulingSpec
from spx.api.serving import ServingSpec, server_tp
from spx.api.stage import StageSpec
from spx.api.step_checks import batch_limit, step_problems
from spx.api.sweep import SweepSpec

GROUP = "bench.spx.dev"
VERSION = "v1alpha1"
KIND: Final = "ShardedProjectionExperiment"
PLURAL = "shardedprojectionexperiments"
SINGULAR = "shardedprojectionexperiment"
SHORT_NAMES = ["spx"]
API_VERSION: Final = "bench.spx.dev/v1alpha1"


class ExperimentSpec(CamelModel):
    """``spec`` of a ``ShardedProjectionExperiment``.

    Raises:
        pydantic.ValidationError: on any invalid field (use :func:`spx.api.load_experiment` for
            a message naming the field path, the bad value and what is allowed).
    """

    projection: ProjectionSpec = Field(default_factory=ProjectionSpec)
    """The projection under test: Y[M, N] = X[M, K]·Wᵀ (default: DeepSeek-V4.1 fused_wqa_wkv, 5120 → 1280 + 512)."""
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    """Tensor parallelism: how many ranks the token dimension is split over."""
    sweep: SweepSpec = Field(default_factory=SweepSpec)
    """Token counts M (tokens in the batch) to measure, strictly increasing."""
    kernel: KernelSpec = Field(default_factory=KernelSpec)
    """How the kernel microbenchmark measures: GEMM and all-gather backends, device, timer, samples."""
    gate: GateSpec = Field(default_factory=GateSpec)
    """What a rollout needs from the measurement: the threshold under test and the speed and error bounds."""
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """Where the bench pod may run and what it reserves (Kubernetes only; spx run ignores it)."""
    image: str | None = Field(default=None, min_length=1)
    """Image of the bench pod; unset: the operator's default (SPX_BENCH_IMAGE)."""
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    """Optional Kueue queue and priority class of the bench Job."""
    timeout_seconds: int = Field(default=3600, ge=60, le=7 * 24 * 3600)
    """Deadline of the whole run in seconds (the Job's activeDeadlineSeconds): kernel bench, then every serving arm and GSM8K."""
    serving: ServingSpec | None = None
    """Optional vLLM serving A/B (split vs main arms) run in the same pod after the kernel bench."""
    accuracy: AccuracySpec | None = None
    """Optional GSM8K accuracy check on the serving arms' servers; needs spec.serving."""
    stage: StageSpec | None = None
    """Optional: time the whole input-projection stage per layer kind (fused_wqa_wkv, compressor, indexer), replicated vs split vs split-all (python -m spx.bench.stage)."""
    pod: PodSpec = Field(default_factory=PodSpec)
    """Cluster-specific fields of the bench pod: runtimeClassName, schedulerName, labels, annotations, env, volumes (allowed by the operator's policy)."""

    @model_validator(mode="after")
    def _vllm_benches_fit(self) -> ExperimentSpec:
        """``accuracy`` runs on ``serving``'s servers; the Job deadline must leave every arm its model load.

        ``timeoutSeconds`` is the whole run's deadline (the Job's ``activeDeadlineSeconds``): the
        kernel bench, then the step A/B's one model load and its rounds (first), then one model load per serving arm,
        its points and GSM8K. It must be at least ``(len(serving.arms) + step_servers) × serving.startupTimeoutSeconds
        + step.budgetSeconds``,
        so that no server that loads within its own startup timeout is killed by the deadline (defaults: 4 × 2400 s = 9600 s; plan 3–4 h,
        ``docs/serving.md``).
        """
        problems: list[str] = []
        if self.accuracy is not None and self.serving is None:
            problems.append("spec.accuracy: runs GSM8K on the servers of spec.serving's arms: set spec.serving too "
                            "(its points may be empty)")
        if self.serving is not None and self.serving.model_pvc:
            clash = [v.name for v in self.pod.volumes if path_overlaps(v.mount_path, self.serving.model_mount_path)]
            if clash:
                problems.append(f"spec.pod.volumes: {clash[:4]} overlap serving.modelMountPath "
                                f"{self.serving.model_mount_path}, where serving.modelPvc is mounted; mount them elsewhere")
        problems += deployment_problems(self.gate, self.serving, self.accuracy is not None)  # (issue #35)
        if self.serving is not None:
            problems += self._step_problems(self.serving)
            floor = min_timeout_seconds(self.serving, self.accuracy is not None)
            if self.timeout_seconds < floor:
                problems.append(
                    f"spec.timeoutSeconds: {self.timeout_seconds} is too short for spec.serving: "
                    f"({arm_servers(self.serving, self.accuracy is not None)} arms + {step_servers(self.serving)} "
                    f"step A/B server) × startupTimeoutSeconds {self.serving.startup_timeout_seconds} + "
                    f"step.budgetSeconds {step_budget_seconds(self.serving)} = {floor} s of model loading and step "
                    f"rounds alone (the kernel sweep's time comes on top); set timeoutSeconds ≥ {floor} (a DeepSeek-V4.1 "
                    "A/B with GSM8K takes 3–4 h: 14400) or lower serving.startupTimeoutSeconds"
                )
        from spx.api.combinations import CombinationError, combination_problems

        if problems := [*map(_at_spec, problems), *combination_problems(self)]:  # every problem at once (docs/cli.md)
            raise CombinationError(list(dict.fromkeys(problems)))
        return self

    def _step_problems(self, serving: ServingSpec) -> list[str]:
        """The step A/B's problems: every T it measures (``gate.thresholdTokens``, ``serving.step.thresholds``) must
        exceed the servers' TP (:func:`spx.api.serving.server_tp`; the default curve starts at ``T/2`` rounded down to a
        multiple of TP, :func:`spx.analysis.step.default_lengths`), and :func:`spx.api.step_checks.step_problems`
        (lengths, batch mix, looks, compilation flags); refused here rather than by ``spx serving`` after the kernel
        bench."""
        step = serving.step
        if step is None:
            return []
        tp = server_tp(serving.extra_args, self.parallelism.tensor_parallel_size)
        low = [t for t in step.thresholds if t <= tp]
        fields = []
        if self.gate.threshold_tokens <= tp:
            fields.append(f"gate.thresholdTokens {self.gate.threshold_tokens}")
        if low:
            fields.append(f"serving.step.thresholds {low[:8]}")
        out = []
        if fields:
            out.append(
                f"{' and '.join(fields)} must be above the servers' TP {tp} (tensorParallelSize, or "
                f"--tensor-parallel-size of serving.extraArgs) with serving.step set: the step A/B's base prompt has "
                f"T − TP tokens; raise each threshold above {tp} or leave it out"
            )
        most = batch_limit(self.gate.max_num_batched_tokens, serving.extra_args)
        if most is not None:
            ts = list(dict.fromkeys([self.gate.threshold_tokens, *step.thresholds]))
            out += step_problems(step, serving.extra_args, tp, most, ts)
        return out


def _at_spec(problem: str) -> str:
    """A problem line as ``spec.<field>: <what>`` (a line already starting ``spec.`` keeps its field; one starting
    with a dotted field name followed by a space, ``gate.thresholdTokens 9 is …``, gets ``spec.`` and a colon)."""
    if problem.startswith("spec.") or problem.startswith("spec:"):
        return problem
    m = re.match(r"([a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)+)(:? )", problem)
    if m is None:
        return f"spec: {problem}"
    return f"spec.{m.group(1)}: {problem[m.end():]}"


def step_servers(serving: ServingSpec) -> int:
    """How many ``vllm serve`` the step A/B starts (``spec.serving.step``, :mod:`spx.api.step`): one (the split is
    switched per request inside it), 0 without a step A/B."""
    return 0 if serving.step is None else 1


def step_budget_seconds(serving: ServingSpec) -> int:
    """The step A/B's rounds as the Job deadline counts them: ``step.budgetSeconds`` (0 when unset, or no step)."""
    return 0 if serving.step is None or serving.step.budget_seconds is None else serving.step.budget_seconds


def arm_servers(serving: ServingSpec, accuracy: bool) -> int:
    """How many serving arms load a model: every arm when there are serving points or GSM8K (``accuracy``), none
    otherwise (the step A/B alone: ``points: []`` and no ``spec.accuracy``; the runner skips such arms)."""
    return len(serving.arms) if serving.points or accuracy else 0


def min_timeout_seconds(serving: ServingSpec, accuracy: bool = False) -> int:
    """The smallest ``timeoutSeconds`` an experiment with ``serving`` (and GSM8K when ``accuracy``) may have: every
    server's ``startupTimeoutSeconds`` (the model load it is allowed) fits the Job deadline: the serving arms that run
    (:func:`arm_servers`) and the step A/B's one server (:func:`step_servers`), plus the step A/B's rounds
    (``step.budgetSeconds``)."""
    servers = arm_servers(serving, accuracy) + step_servers(serving)
    return servers * serving.startup_timeout_seconds + step_budget_seconds(serving)


class ObjectMeta(CamelModel):
    """The subset of ``metadata`` an experiment file carries; the rest is the API server's."""

    model_config = CamelModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL)
    labels: dict[LabelKey, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(default_factory=dict)
    annotations: dict[LabelKey, str] = Field(default_factory=dict)


class Experiment(CamelModel):
    """A whole ``ShardedProjectionExperiment`` object as a user writes it for ``kubectl apply``."""

    api_version: Literal["bench.spx.dev/v1alpha1"] = Field(default=API_VERSION)
    kind: Literal["ShardedProjectionExperiment"] = KIND
    metadata: ObjectMeta
    spec: ExperimentSpec
    status: dict[str, Any] | None = None


def spec_hash(spec: ExperimentSpec) -> str:
    """A short, stable hash of ``spec`` (its wire form, keys sorted): ``sha256:`` + 16 hex digits.

    Every bench document (step, serving, accuracy results) records it with the experiment's name and the
    run id, so a document of another spec or run is refused rather than judged with this one (issue #35).
    Defaults are included, so two files that differ only in writing a default the same way hash alike.
    """
    import hashlib
    import json

    wire = json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(wire.encode()).hexdigest()[:16]
