"""spx's vocabularies, each defined once: everything else (the status and spec models, the CRD's
descriptions, the CLI's help, the metrics' label values, the gate's exit codes, the docs' tables) is
derived from or tested against these definitions.

Pure and standard library only, the lowest layer, below :mod:`spx.api`: the vLLM plugin loads it in
every vLLM process, and importing ``spx.api`` builds all its pydantic models (2.3 s measured with
``python -X importtime``). Names, one ``Literal`` type per vocabulary, the tuple of its values derived
from that type (``typing.get_args``, so the two cannot drift) and, where users choose a value, a
one-line meaning per value. The pattern follows kopf's ``causes.Reason`` (an enum with derived tuples "to prevent a direct
usage of strings, and typos"), written as ``Literal`` types so the published schema stays a plain
string ``enum``. ``tests/unit/test_vocabulary.py::test_no_module_spells_a_vocabulary_out_again`` finds every
vocabulary here by introspection and fails on a second spelling of one anywhere else in the package.

- verdicts and the reasons of the terminal ``Decided`` condition (:data:`VERDICTS`,
  :data:`FAILURE_REASONS`, :data:`DECIDED_REASONS`), what decided a verdict (:data:`DECIDED_BY`) and
  the kernel's regimes (:data:`KERNEL_REGIMES`);
- the condition types (:data:`CONDITION_TYPES`) and the reasons of ``Completed`` (:data:`COMPLETED_REASONS`,
  :data:`INFRA_REASONS`, :data:`BENCH_REASONS`, with :data:`COMPLETED_REASON_MEANINGS`);
- phases, waiting and terminal (:data:`PHASES`, :data:`WAITING_PHASES`, :data:`TERMINAL_PHASES`);
- GEMM and all-gather backends of the kernel microbenchmark (:data:`GEMM_BACKENDS`,
  :data:`GATHER_BACKENDS`, with :data:`GEMM_BACKEND_MEANINGS` / :data:`GATHER_BACKEND_MEANINGS`);
- the candidates (:data:`CANDIDATES`, :data:`STAGE_CANDIDATES`), the resolved backends and the gather's
  source, the values that need CUDA (:data:`CUDA_TIMERS`, :data:`CUDA_GATHER_BACKENDS`, :data:`CUDA_GEMM_BACKENDS`);
- how the kernel bench times (:data:`TIMERS`, :data:`DEVICES`, :data:`EXECUTIONS`, :data:`EXECUTION_MODES`) and
  the weight formats (:data:`WEIGHT_FORMATS`, :data:`MXFP8`);
- the threshold's rounding and rule, the interpolation, the gather priors and regimes;
- the serving arms' variants (:data:`ARM_VARIANTS`);
- the command line: command names, output formats, shells and log formats (the exit codes, with their
  per-command meanings, are :mod:`spx.api.exit_codes`);
- the files of a run directory (:data:`RESULT_FILE`, :data:`STATUS_FILE`, :data:`POINTS_FILE`, …);
- the spx vLLM plugin's environment variables and the marker of the line it logs
  (:data:`PLUGIN_ENV_THRESHOLD`, :data:`PLUGIN_ENV_TARGET`, :data:`PLUGIN_LOG_MARKER`, :data:`ARM_ENV`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeVar, get_args

# --- verdicts and decided reasons ------------------------------------------------------------------

#: The gate's verdict (``status.verdict``; the reason of ``Decided`` True when a verdict was reached).
Verdict = Literal["Pass", "Fail", "Inconclusive"]
#: The failure reasons a bench pod's end can give (``spx.controller.decide.observation``); InvalidSpec is admission's.
PodFailureReason = Literal["BenchmarkFailed", "InfraFailed"]
#: The reason of ``Decided`` True when the run ended without a verdict.
FailureReason = Literal["InvalidSpec", PodFailureReason]
#: Every reason of the terminal ``Decided`` condition: the verdict, or why there is none.
DecidedReason = Literal[Verdict, FailureReason]

VERDICTS: Final[tuple[Verdict, ...]] = get_args(Verdict)
FAILURE_REASONS: Final[tuple[FailureReason, ...]] = get_args(FailureReason)
DECIDED_REASONS: Final[tuple[DecidedReason, ...]] = VERDICTS + FAILURE_REASONS

# --- condition types and the reasons of Completed ---------------------------------------------------

#: spx's own conditions, always present, in this order (``spx.api.conditions`` says what each means).
SpxConditionType = Literal["Scheduled", "Completed", "Decided"]
#: kstatus's conditions (``sigs.k8s.io/cli-utils/pkg/kstatus``), computed from the phase.
KstatusConditionType = Literal["Ready", "Reconciling", "Stalled"]
#: Every condition type spx writes, spx's then kstatus's.
ConditionType = Literal[SpxConditionType, KstatusConditionType]
SPX_CONDITION_TYPES: Final[tuple[SpxConditionType, ...]] = get_args(SpxConditionType)
KSTATUS_CONDITION_TYPES: Final[tuple[KstatusConditionType, ...]] = get_args(KstatusConditionType)
CONDITION_TYPES: Final[tuple[ConditionType, ...]] = SPX_CONDITION_TYPES + KSTATUS_CONDITION_TYPES

#: Reasons of ``Completed`` True when the cluster (not the bench) ended the run: ``Decided`` is ``InfraFailed``.
InfraReason = Literal[
    "NotAdmitted", "Unschedulable", "NeverScheduled", "NeverStarted", "NodeLost", "PodDeleted", "ResultLost",
    "Evicted", "ImagePullFailed", "ContainerCreateFailed", "PodCreateFailed", "PodFailed", "DeadlineExceeded",
    "JobDeleted", "JobConflict", "JobRejected", "JobFailed", "StatusRejected", "KueueNotInstalled", "LocalQueueNotFound",
]
#: Reasons of ``Completed`` True when the bench itself failed: ``Decided`` is ``BenchmarkFailed``.
BenchReason = Literal["BenchmarkCrashed", "OOMKilled", "InvalidInput"]
#: Every reason of ``Completed`` True: the bench pod succeeded, never ran, or why it ended; ``BenchmarkCompleted``
#: is a run's outside Kubernetes (``spx run``'s status.json) whose bench finished with a verdict. The producers
#: (``spx.controller.decide``, ``spx.analysis.judge.local_status``) are typed with it, so ``mypy`` refuses a
#: reason spelt otherwise.
CompletedReason = Literal[InfraReason, BenchReason, "JobSucceeded", "BenchmarkCompleted", "NotRun"]
INFRA_REASONS: Final[tuple[InfraReason, ...]] = get_args(InfraReason)
BENCH_REASONS: Final[tuple[BenchReason, ...]] = get_args(BenchReason)
COMPLETED_REASONS: Final[tuple[CompletedReason, ...]] = INFRA_REASONS + BENCH_REASONS + ("JobSucceeded",
                                                                                         "BenchmarkCompleted", "NotRun")
#: What each ``Completed`` reason means (``docs/operator.md`` lists them).
COMPLETED_REASON_MEANINGS: Final[Mapping[CompletedReason, str]] = {
    "NotAdmitted": "Kueue never admitted the Job within spec.scheduling.admissionTimeoutSeconds",
    "Unschedulable": "the pod stayed unschedulable past the operator's limit",
    "NeverScheduled": "the Job's deadline passed before its pod was ever bound",
    "NeverStarted": "the pod was bound but its container never started before the deadline",
    "NodeLost": "the pod's node went away while the bench ran",
    "PodDeleted": "the pod was deleted (not evicted) while the bench ran: it was killed",
    "ResultLost": "the pod succeeded but was removed before its result was read",
    "Evicted": "the pod was disrupted more often than the retry budget",
    "ImagePullFailed": "the bench image could not be pulled",
    "ContainerCreateFailed": "the bench container could not be created",
    "PodCreateFailed": "the Job controller could not create the pod",
    "PodFailed": "the pod failed before its container ran",
    "DeadlineExceeded": "the bench ran past activeDeadlineSeconds (spec.timeoutSeconds)",
    "JobDeleted": "the Job was deleted before the run ended",
    "JobConflict": "a Job of that name exists and is not this experiment's",
    "JobRejected": "the API server refused the Job",
    "JobFailed": "the Job failed and its pod is gone",
    "StatusRejected": "the API server refuses (422) every status the operator writes",
    "KueueNotInstalled": "spec.scheduling.queueName is set but the cluster does not serve Kueue's API",
    "LocalQueueNotFound": "the Kueue LocalQueue spec.scheduling.queueName does not exist in the namespace",
    "BenchmarkCrashed": "the bench process exited non-zero (not 2 or 3)",
    "OOMKilled": "the bench container ran out of memory",
    "InvalidInput": "the bench refused its input (exit 3, or 2 of older images)",
    "JobSucceeded": "the bench pod succeeded",
    "BenchmarkCompleted": "spx run (outside Kubernetes): the bench finished and its result was judged",
    "NotRun": "the run was not started (an invalid spec, or the operator's policy refused it)",
}

#: The note on everything a CPU run reports (the bench's warnings, the verdict's reason, the report's caption,
#: the plot's title): its timings prove the pipeline, never a GPU's speed. Readers recognise the note by it.
CPU_NOTE: Final = "CPU smoke run: timings say nothing about GPUs"

# --- what decided a verdict, and the kernel's regimes (issue #28) ----------------------------------

#: Which measurement decided ``status.verdict`` (``status.kernel.decidedBy``, :mod:`spx.analysis.judge`):
#: ``correctness`` (the split's output differs: Fail whatever the speed), ``kernel`` (the kernel sweep:
#: both regimes agree, or only one applies), ``step`` (the step A/B, when the regimes disagree),
#: ``deployment`` (a threshold above the largest batch the deployment forms: the split never engages),
#: ``serving`` / ``accuracy`` (that gate demoted the verdict), ``none`` (nothing decided: Inconclusive,
#: ``kernel.nextStep`` says what would).
DecidedBy = Literal["correctness", "kernel", "step", "deployment", "serving", "accuracy", "none"]
DECIDED_BY: Final[tuple[DecidedBy, ...]] = get_args(DecidedBy)
DECIDED_BY_MEANINGS: Final[Mapping[DecidedBy, str]] = {
    "correctness": "the split's output differs from the replicated one",
    "kernel": "the kernel sweep: both regimes agree, or only one applies",
    "step": "the step A/B on the deployment: the kernel regimes disagree",
    "deployment": "the threshold lies above the largest batch the deployment forms",
    "serving": "the serving A/B gate demoted the verdict",
    "accuracy": "the GSM8K gate demoted the verdict",
    "none": "no measurement decided: Inconclusive, kernel.nextStep names what would",
}

#: The two regimes of an eagerly run step (docs/kernel-benchmark.md, "Regimes"; :mod:`spx.research.queue`):
#: ``gpu-bound`` (the GPU is the bottleneck: the split moves the step by its GPU difference Δg),
#: ``host-bound`` (the host is: by its host difference Δh).
KernelRegime = Literal["gpu-bound", "host-bound"]
KERNEL_REGIMES: Final[tuple[KernelRegime, ...]] = get_args(KernelRegime)

# --- phases ----------------------------------------------------------------------------------------

#: Phases while the run is not finished (also the reasons of ``Decided`` False).
WaitingPhase = Literal["Pending", "Queued", "Running", "Analyzing"]
#: Phases in which nothing more happens for this generation of the spec.
TerminalPhase = Literal["Succeeded", "Failed"]
#: ``status.phase``, in the order a run goes through them.
Phase = Literal[WaitingPhase, TerminalPhase]

WAITING_PHASES: Final[tuple[WaitingPhase, ...]] = get_args(WaitingPhase)
TERMINAL_PHASES: Final[tuple[TerminalPhase, ...]] = get_args(TerminalPhase)
PHASES: Final[tuple[Phase, ...]] = WAITING_PHASES + TERMINAL_PHASES

# --- the candidates ------------------------------------------------------------------------------

#: The kernel bench's two candidates: every rank projects all M rows, or its token shard then an all-gather.
Candidate = Literal["replicated", "split"]
CANDIDATES: Final[tuple[Candidate, ...]] = get_args(Candidate)
#: The kernel sweep's and eager step bench's candidates: also ``pad-free``, the split with a pad-free
#: shard (``spx.bench.sequence_parallel.pad_free_shard``: spx's proposal for vLLM, measured beside it).
MeasuredCandidate = Literal[Candidate, "pad-free"]
MEASURED_CANDIDATES: Final[tuple[MeasuredCandidate, ...]] = get_args(MeasuredCandidate)
#: The stage bench's candidates (``spx.api.stage``): also ``split-all``, the two light GEMMs split as well.
StageCandidate = Literal[Candidate, "split-all"]
STAGE_CANDIDATES: Final[tuple[StageCandidate, ...]] = get_args(StageCandidate)

# --- the step A/B (spx.api.step's StepSpec / StepResult / StepStatus; docs/serving.md) ---------------------

#: What one request measures, switched per request inside the server: ``replicated`` (never split: the
#: reference), ``split`` (vLLM's ``sp_shard`` + all-gather), ``pad-free`` (the pad-free shard spx proposes:
#: each rank a view of its rows, only the last rank pads its own short shard), ``aa`` (a second no-split
#: switch value: its effect against ``replicated`` must cover 0), ``positive-control`` (no split + an
#: injected delay of known size: its effect must cover that size).
StepArm = Literal[MeasuredCandidate, "aa", "positive-control"]
STEP_ARMS: Final[tuple[StepArm, ...]] = get_args(StepArm)
#: Which kernel regime the measured step effect matches (``spx.analysis.regimes``): ``gpu-bound`` (near Δg),
#: ``host-bound`` (near Δh), ``between`` (at the pivot: neither), ``undetermined`` (the interval covers both,
#: or no kernel Δ to compare with).
StepRegime = Literal[KernelRegime, "between", "undetermined"]
STEP_REGIMES: Final[tuple[StepRegime, ...]] = get_args(StepRegime)
#: What the effect's interval says: ``gain`` (entirely below 0: the split shortens the step), ``loss``
#: (entirely above 0), ``indifferent`` (it straddles 0: within the noise).
StepOutcome = Literal["gain", "loss", "indifferent"]
STEP_OUTCOMES: Final[tuple[StepOutcome, ...]] = get_args(StepOutcome)
#: The statistic of a length's per-round paired differences: ``median`` (robust to a shared host's
#: interference, which slows one request of a pair) or ``mean``.
StepStatistic = Literal["median", "mean"]
STEP_STATISTICS: Final[tuple[StepStatistic, ...]] = get_args(StepStatistic)

# --- kernel microbenchmark backends ----------------------------------------------------------------

#: ``spec.kernel.gemmBackend`` (``spx.bench.gemm`` builds each; docs/kernel-benchmark.md).
GemmBackend = Literal["auto", "humming", "marlin", "torch-bf16", "torch-fp8", "vllm"]
GEMM_BACKENDS: Final[tuple[GemmBackend, ...]] = get_args(GemmBackend)
#: What each GEMM backend runs (vLLM 0.33: ``vllm/model_executor/kernels/linear/`` picks Humming on SM90).
GEMM_BACKEND_MEANINGS: Final[Mapping[GemmBackend, str]] = {
    "auto": "the kernel vLLM 0.33 would pick for this weight on this GPU, torch-bf16 on CPU",
    "humming": "Humming MXFP8 W8A16, the kernel vLLM 0.33 runs on SM90",
    "marlin": "Marlin MXFP8 W8A16, vLLM 0.33 with --linear-backend marlin",
    "torch-bf16": "cuBLAS on the dequantised weight, a reference ceiling",
    "torch-fp8": "cuBLASLt blockwise W8A8, 128x128 blocks only, a reference ceiling",
    "vllm": "vLLM's own linear layer, needs vLLM",
}

#: ``spec.kernel.gather`` (``spx.bench.kernel`` and ``spx.bench.vllm_gather``).
GatherBackend = Literal["auto", "nccl", "gloo", "vllm", "modelled"]
GATHER_BACKENDS: Final[tuple[GatherBackend, ...]] = get_args(GatherBackend)
GATHER_BACKEND_MEANINGS: Final[Mapping[GatherBackend, str]] = {
    "auto": "nccl on GPUs, gloo on CPU, modelled with fewer ranks than TP",
    "nccl": "torch.distributed all_gather_into_tensor over NCCL",
    "gloo": "the same over gloo, for CPU",
    "vllm": "vLLM's sp_all_gather, its custom all-gather below the size limit and NCCL above",
    "modelled": "latency plus bytes over bus bandwidth, spec.kernel.gatherModel",
}

#: A backend that actually ran (``KernelResult.gemmBackend``): ``auto`` resolved.
ResolvedGemmBackend = Literal["humming", "marlin", "torch-bf16", "torch-fp8", "vllm"]
#: The all-gather that ran (``KernelResult.gatherBackend``): ``auto`` resolved, ``none`` at TP 1.
ResolvedGatherBackend = Literal["nccl", "gloo", "vllm", "modelled", "none"]
RESOLVED_GATHER_BACKENDS: Final[tuple[ResolvedGatherBackend, ...]] = get_args(ResolvedGatherBackend)
#: Where a gather time comes from (``gatherSource``, ``gatherHostSource``).
GatherSource = Literal["measured", "modelled"]
GATHER_SOURCES: Final[tuple[GatherSource, ...]] = get_args(GatherSource)

#: GEMM backends that are CUDA kernels only (``spx.api.combinations`` refuses them on ``device: cpu``).
CudaGemmBackend = Literal["humming", "marlin", "torch-fp8"]
CUDA_GEMM_BACKENDS: Final[tuple[CudaGemmBackend, ...]] = get_args(CudaGemmBackend)
#: All-gather backends that need CUDA GPUs (refused on ``device: cpu``; gloo and vLLM's run on CPU).
CudaGatherBackend = Literal["nccl"]
CUDA_GATHER_BACKENDS: Final[tuple[CudaGatherBackend, ...]] = get_args(CudaGatherBackend)
#: GEMM backends that run vLLM's MXFP8 W8A16 path (32×32 blocks, e8m0 scales).
MxfpGemmBackend = Literal["humming", "marlin"]
MXFP8_GEMM_BACKENDS: Final[tuple[MxfpGemmBackend, ...]] = get_args(MxfpGemmBackend)

# --- how the kernel microbenchmark times -----------------------------------------------------------

#: A timer that ran (``KernelResult.timer``): CUPTI kernel spans, CUDA events, or the host's wall clock.
ResolvedTimer = Literal["cupti", "cuda-events", "host"]
#: The timers of CUDA kernels (refused on ``device: cpu``).
CudaTimer = Literal["cupti", "cuda-events"]
CUDA_TIMERS: Final[tuple[CudaTimer, ...]] = get_args(CudaTimer)
#: ``spec.kernel.timer``: ``auto`` is cupti on GPUs, host on CPU (``spx.bench.context``).
Timer = Literal["auto", ResolvedTimer]
TIMERS: Final[tuple[Timer, ...]] = get_args(Timer)

#: A device that ran (``KernelResult.device``, ``torch.device.type``).
ResolvedDevice = Literal["cuda", "cpu"]
#: ``spec.kernel.device`` and ``spx run --device``: ``auto`` is cuda when a GPU is visible.
Device = Literal["auto", ResolvedDevice]
DEVICES: Final[tuple[Device, ...]] = get_args(Device)

#: How one point was timed (``PointResult.execution``, ``KernelPoint.execution``): CUDA-graph replays, or
#: op by op as vLLM 0.33 runs batches above its largest capture size (``spx.analysis.execution``).
ExecutionMode = Literal["graph", "eager"]
EXECUTION_MODES: Final[tuple[ExecutionMode, ...]] = get_args(ExecutionMode)
#: ``spec.kernel.execution`` (and ``KernelResult.execution``): ``auto`` times each point as vLLM would run it.
Execution = Literal["auto", ExecutionMode]
EXECUTIONS: Final[tuple[Execution, ...]] = get_args(Execution)
#: The timing protocol of one point (``spx.bench.timing.TimingProtocol.mode``): ``host`` on CPU.
TimingMode = Literal[ExecutionMode, "host"]
#: Whether vLLM runs the compressor's and indexer's GEMMs on auxiliary streams at a batch size.
StreamMode = Literal["parallel", "sequential"]
#: A stage-bench row's streams (``StageRow.streams``): ``none`` for a layer without auxiliary GEMMs.
StageStreams = Literal[StreamMode, "none"]

# --- weights --------------------------------------------------------------------------------------

#: ``spec.projection.weightFormat`` (``spx.api.projection.WEIGHT_FORMAT_BLOCK`` gives each block edge).
WeightFormat = Literal["mxfp8-block32-ue8m0", "fp8-block128-ue8m0", "bf16"]
WEIGHT_FORMATS: Final[tuple[WeightFormat, ...]] = get_args(WeightFormat)
#: DeepSeek-V4.1's format: FP8 e4m3, one UE8M0 scale per 32×32 block (the default; Humming and Marlin run it).
MXFP8: Final[WeightFormat] = WEIGHT_FORMATS[0]
#: DeepSeek-V3's layout: one UE8M0 scale per 128×128 block (cuBLASLt's blockwise W8A8 takes it).
FP8_BLOCK128: Final[WeightFormat] = WEIGHT_FORMATS[1]
#: Unquantised weights.
BF16: Final[WeightFormat] = WEIGHT_FORMATS[2]

#: The modelled all-gather's regimes: vLLM's custom all-gather up to 2 MiB per shard, NCCL above
#: (``spx.api.gather_model``).
GatherRegime = Literal["custom", "nccl"]
GATHER_REGIMES: Final[tuple[GatherRegime, ...]] = get_args(GatherRegime)

# --- the threshold and the prediction --------------------------------------------------------------

#: ``spec.gate.thresholdRounding`` and ``spx predict --rounding``.
ThresholdRounding = Literal["next-power-of-two", "next-multiple-of-tp", "none"]
THRESHOLD_ROUNDINGS: Final[tuple[ThresholdRounding, ...]] = get_args(ThresholdRounding)
#: ``spec.gate.thresholdRule``: the interpolated break-even (``break-even``), or the smallest measured count
#: from which the speedup's lower bound stays ≥ 1 (``lower-bound``; ``spx.analysis.band``).
ThresholdRule = Literal["break-even", "lower-bound"]
THRESHOLD_RULES: Final[tuple[ThresholdRule, ...]] = get_args(ThresholdRule)
#: How the break-even is interpolated between measured counts (``spx.analysis.crossover``).
Interpolation = Literal["log-log", "linear"]
INTERPOLATIONS: Final[tuple[Interpolation, ...]] = get_args(Interpolation)
#: ``spec.kernel.gatherModel.prior``: the modelled all-gather's parameters.
GatherPrior = Literal["h20-calibrated", "datasheet"]
GATHER_PRIORS: Final[tuple[GatherPrior, ...]] = get_args(GatherPrior)
#: ``spx predict --gather``: the gather derived from the seed's table, or one of the priors.
PredictGather = Literal["h20-derived", GatherPrior]
PREDICT_GATHERS: Final[tuple[PredictGather, ...]] = get_args(PredictGather)

# --- the serving A/B ------------------------------------------------------------------------------

#: ``spec.serving.arms[].variant``: vLLM as released (``main``) or with the split threshold under test.
ArmVariant = Literal["main", "split"]
ARM_VARIANTS: Final[tuple[ArmVariant, ...]] = get_args(ArmVariant)

# --- the command line -----------------------------------------------------------------------------

#: ``spx``'s commands, in the order ``spx --help`` lists them (``spx.cli.registry``; their exit codes:
#: ``spx.api.exit_codes``).
CommandName = Literal["run", "validate", "report", "predict", "gate", "crd", "serving", "operator", "completion"]
COMMAND_NAMES: Final[tuple[CommandName, ...]] = get_args(CommandName)

#: ``-o/--output`` of every ``spx`` command that prints a document.
OutputFormat = Literal["text", "json", "yaml"]
OUTPUT_FORMATS: Final[tuple[OutputFormat, ...]] = get_args(OutputFormat)
#: ``spx completion SHELL``.
CompletionShell = Literal["bash", "zsh", "tcsh"]
COMPLETION_SHELLS: Final[tuple[CompletionShell, ...]] = get_args(CompletionShell)
#: ``spx operator --log-format`` (kopf's log formats).
LogFormat = Literal["json", "plain", "full"]
LOG_FORMATS: Final[tuple[LogFormat, ...]] = get_args(LogFormat)

# --- a run directory (``spx run --out DIR``, the bench pod's ``/results``) -----------------------------

#: The kernel bench's result document (``spx.api.result.KernelResult``).
RESULT_FILE: Final = "result.json"
#: The run's status (``spx.api.status.ExperimentStatus``), what ``spx gate DIR`` reads.
STATUS_FILE: Final = "status.json"
#: The points measured so far, one JSON line each, appended while the sweep runs.
POINTS_FILE: Final = "points.partial.jsonl"
#: The ranks' logs (one folder per rank, torchrun's layout) and the launcher's log beside them.
LOGS_DIR: Final = "logs"
LAUNCHER_LOG: Final = "launcher.log"
#: Held by the ``spx run`` writing into the folder (``spx.rundir``).
LOCK_FILE: Final = ".spx.lock"
#: The crossover plot ``spx run`` and ``spx report`` draw.
PLOT_FILE: Final = "crossover.png"
#: The serving A/B's folder and documents (``spx.serving.ab``).
SERVING_DIR: Final = "serving"
SERVING_RESULT_FILE: Final = "serving-result.json"
ACCURACY_RESULT_FILE: Final = "accuracy-result.json"
#: In each serving arm's folder: the vLLM server's log and the GSM8K replies.
SERVER_LOG: Final = "server.log"
GSM8K_REPLIES_FILE: Final = "gsm8k-replies.jsonl"
#: The step A/B's document (``spx.api.step.StepResult``).
STEP_RESULT_FILE: Final = "step-result.json"
#: The files a run wrote into its ``--out`` (``spx.rundir``): ``--overwrite`` replaces only these.
MANIFEST_FILE: Final = ".spx-manifest.json"
#: The manifest's ``schemaVersion``.
MANIFEST_SCHEMA: Final = "spx.dev/run-files/v1"
#: What ``spx run`` writes into its ``--out`` (an ``--overwrite`` removes exactly these).
RUN_OUTPUTS: Final[tuple[str, ...]] = (RESULT_FILE, STATUS_FILE, PLOT_FILE, POINTS_FILE, SERVING_DIR)
#: Files whose presence marks a folder as a run's directory.
RUN_MARKERS: Final[tuple[str, ...]] = (STATUS_FILE, RESULT_FILE, POINTS_FILE, LOCK_FILE, MANIFEST_FILE)

# --- the bench pod's own mounts (``spx.controller.manifests.job``, ``pod_security``) ----------------

#: The experiment file the operator projects into the pod (from an annotation, read-only).
EXPERIMENT_MOUNT: Final = "/etc/spx"
#: The scratch emptyDir: results, HOME and the caches.
SCRATCH_MOUNT: Final = "/var/run/spx"
#: The scratch volume again (``subPath: tmp``), as ``TMPDIR``.
TMP_MOUNT: Final = "/tmp"
#: The memory-backed ``/dev/shm`` NCCL and vLLM need.
SHM_MOUNT: Final = "/dev/shm"
#: Where the pod → operator summary is written (``terminationMessagePath``).
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
#: Every path the bench pod mounts itself: ``spec.pod.volumes`` and ``spec.serving.modelMountPath`` may not
#: be mounted at, above or below them (``spx.api.pod``, ``spx.api.serving``, the CRD's rule).
RESERVED_MOUNT_PATHS: Final[tuple[str, ...]] = (
    EXPERIMENT_MOUNT, SCRATCH_MOUNT, TMP_MOUNT, SHM_MOUNT, TERMINATION_MESSAGE_PATH)

# --- the spx vLLM plugin (spx.vllm_ext.plugin) --------------------------------------------------

#: The threshold the plugin sets in every vLLM process: ``off`` or a token count.
PLUGIN_ENV_THRESHOLD: Final = "SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS"
#: :data:`PLUGIN_ENV_THRESHOLD` of a main (unsplit) arm: the split never happens.
PLUGIN_THRESHOLD_OFF: Final = "off"
#: The token count ``off`` stands for: 2³¹ − 1, more than any batch holds (vLLM splits when M ≥ the threshold), and
#: still an int32 should a kernel ever receive it. The plugin, the step A/B's switch and its analysis use this one.
PLUGIN_OFF_TOKENS: Final = 2**31 - 1
#: Overrides the module the plugin patches (tests point it at stand-ins).
PLUGIN_ENV_TARGET: Final = "SPX_SHARD_FUSED_WQA_WKV_TARGET"
#: Start of the line the plugin logs once it set the threshold (the serving A/B looks for it).
PLUGIN_LOG_MARKER: Final = "spx: set "
#: The name of the plugin's entry point (group ``vllm.general_plugins``, pyproject.toml).
PLUGIN_ENTRY_POINT_NAME: Final = "spx_shard_threshold"
#: The serving arm's name, set by spx in the server's environment.
ARM_ENV: Final = "SPX_ARM"
#: Environment variables spx sets per serving arm; ``spec.serving.server.env`` must not set them.
RESERVED_SERVER_ENV: Final[tuple[str, ...]] = (PLUGIN_ENV_THRESHOLD, ARM_ENV)


_V = TypeVar("_V", bound=str)


def one_of(values: tuple[_V, ...], meanings: Mapping[_V, str] | None = None) -> str:
    """``values`` as the text of a description or ``--help``: ``"a, b or c"``.

    With ``meanings`` (value → one line), each value is followed by its meaning in parentheses:
    ``"a (first), b (second) or c (third)"``.

    Raises:
        ValueError: ``meanings`` lacks a value or has one that is not in ``values`` (names both).
    """
    if meanings is not None and set(meanings) != set(values):
        raise ValueError(f"meanings {sorted(meanings)} do not match the values {sorted(values)}")
    words = [f"{v} ({meanings[v]})" if meanings is not None else v for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def member(value: str, values: tuple[_V, ...], what: str) -> _V:
    """``value`` as a member of the vocabulary ``values`` (typed as it), e.g. a pod reading's reason as a
    :data:`CompletedReason`.

    Raises:
        ValueError: ``value`` is not one of ``values`` (names ``what``, a bounded excerpt of the value and the
            known values).
    """
    for v in values:
        if v == value:
            return v
    raise ValueError(f"{what}: {value[:64]!r} is not one of {one_of(values)}")
