"""``spec.serving`` (optional): the serving A/B of the patched vLLM, and what it reports.

Each *arm* is one fresh ``vllm serve`` with ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` set by the spx
vLLM plugin (:mod:`spx.vllm_ext.plugin`): ``main`` arms run with ``off`` (the projection is never split),
``split`` arms with the threshold under test. Arms run in the listed order (default B1 A1 A2 B2:
split, main, main, split, as the seed PR ran them, so a drift over time hits both variants alike).
Every arm runs every *point* with ``vllm bench serve … --save-result``; per point the analysis
compares the mean of the main arms with the mean of the split arms (``change_pct``).

The seed's seven points (``tests/data/h20_tp8_serving.csv``) are the default. Their ISL / OSL /
concurrency come from the point names of that table; the prompt counts are not in it and are this
project's choice (≥ 8 requests per point, 4 × concurrency for the throughput points).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Final, Literal

from pydantic import Field, field_validator, model_validator

from spx.api.base import CamelModel, FiniteFloat
from spx.api.step import StepSpec
from spx.vocabulary import ARM_VARIANTS, RESERVED_SERVER_ENV
from spx.vocabulary import RESERVED_MOUNT_PATHS as RESERVED_MOUNT_PATHS  # re-exported: the model volume's rule
from spx.vocabulary import ArmVariant as ArmVariant  # re-exported: the serving documents' type

SERVING_RESULT_SCHEMA_VERSION: Final = "spx.dev/serving-result/v1"

#: What a point reports, as named in ``vllm bench serve``'s saved JSON (``mean_<metric>_ms`` for the
#: latencies, ``<metric>`` for the throughputs).
ServingMetric = Literal[
    "ttft", "tpot", "itl", "e2el", "output_throughput", "total_token_throughput", "request_throughput"
]
LATENCY_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
THROUGHPUT_METRICS: tuple[str, ...] = ("output_throughput", "total_token_throughput", "request_throughput")
METRIC_UNITS: dict[str, str] = {
    "ttft": "ms",
    "tpot": "ms",
    "itl": "ms",
    "e2el": "ms",
    "output_throughput": "tok/s",
    "total_token_throughput": "tok/s",
    "request_throughput": "req/s",
}

#: The seed PR's ``vllm bench serve`` protocol where a ServingSpec field can change it
#: (:func:`spx.analysis.serving.protocol_deviations` lists every change in the result).
SEED_BENCH_BACKEND: Final = "openai"
SEED_BENCH_ENDPOINT: Final = "/v1/completions"
SEED_BENCH_SEED: Final = 1

ArmState = Literal["Pending", "Succeeded", "Partial", "Failed", "Skipped"]
GpuCheck = Literal["freed", "busy", "skipped"]

_NAME_PATTERN = r"^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?$"
_ARM_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"


class ServingPointSpec(CamelModel):
    """One ``vllm bench serve`` run: random prompts of ``input_len`` tokens, ``output_len`` generated
    (``--ignore-eos``), ``concurrency`` requests in flight, ``num_prompts`` requests in all.

    ``metric`` is the number the A/B compares (``ttft`` = mean TTFT in ms, lower is better;
    ``output_throughput`` = output tok/s, higher is better).
    """

    name: str = Field(min_length=1, max_length=63, pattern=_NAME_PATTERN)
    """Name of the point (lowercase alphanumerics, '.', '_', '-'), unique within serving.points."""
    input_len: int = Field(gt=0, le=1 << 22)
    """Prompt length in tokens (random prompts)."""
    output_len: int = Field(gt=0, le=1 << 20)
    """Generated tokens per request."""
    concurrency: int = Field(gt=0, le=4096)
    """Requests in flight (--max-concurrency)."""
    num_prompts: int = Field(gt=0, le=100_000)
    """Requests sent in this point."""
    metric: ServingMetric
    """What the point compares, as vllm bench serve names it: ttft, tpot, itl, e2el (ms) or output_throughput, total_token_throughput (tok/s), request_throughput (req/s)."""


def seed_points() -> list[ServingPointSpec]:
    """The seed PR's seven serving points (``h20_tp8_serving.csv``), prompt counts chosen by spx."""
    raw: list[tuple[str, int, int, int, int, ServingMetric]] = [
        ("ttft_8k_c1", 8192, 1, 1, 8, "ttft"),
        ("ttft_32k_c1", 32768, 1, 1, 8, "ttft"),
        ("ttft_128k_c1", 131072, 1, 1, 8, "ttft"),
        ("8k_in_1k_out_c16", 8192, 1024, 16, 64, "output_throughput"),
        ("8k_in_1k_out_c64", 8192, 1024, 64, 256, "output_throughput"),
        ("1k_in_1k_out_c64", 1024, 1024, 64, 256, "output_throughput"),
        ("1k_in_1k_out_c1", 1024, 1024, 1, 8, "output_throughput"),
    ]
    return [
        ServingPointSpec(name=n, input_len=i, output_len=o, concurrency=c, num_prompts=p, metric=m)
        for n, i, o, c, p, m in raw
    ]


class ServingArmSpec(CamelModel):
    """One arm: a fresh server of one variant.

    ``threshold_tokens`` is the ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` of a ``split`` arm; unset, the
    experiment's ``gate.thresholdTokens`` is used. A ``main`` arm always runs with ``off`` and must
    not set it.
    """

    name: str = Field(min_length=1, max_length=32, pattern=_ARM_PATTERN)
    """Name of the arm, unique within serving.arms."""
    variant: ArmVariant
    """main (the split off) or split (the split on at thresholdTokens)."""
    threshold_tokens: int | None = Field(default=None, gt=0, le=1 << 24)
    """SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS of a split arm; unset: gate.thresholdTokens. A main arm must not set it."""

    @model_validator(mode="after")
    def _main_has_no_threshold(self) -> ServingArmSpec:
        if self.variant == "main" and self.threshold_tokens is not None:
            raise ValueError(
                f"arm {self.name}: a main arm runs with the split off; remove thresholdTokens "
                f"(or make it variant: split)"
            )
        return self


def default_arms() -> list[ServingArmSpec]:
    """B1 A1 A2 B2: split, main, main, split (the seed PR's run order)."""
    return [
        ServingArmSpec(name="B1", variant="split"),
        ServingArmSpec(name="A1", variant="main"),
        ServingArmSpec(name="A2", variant="main"),
        ServingArmSpec(name="B2", variant="split"),
    ]


class ServingGateSpec(CamelModel):
    """What the serving A/B must show for a rollout (changes are split vs main, in percent).

    Every throughput point must have ``change_pct ≥ min_throughput_change_pct``; every TTFT point
    ``change_pct ≤ max_ttft_regression_pct`` (a positive TTFT change is a regression). The defaults
    tolerate 1 % either way, the order of the spread between two arms of the same variant in the
    seed's H20 table (1k_in_1k_out_c1: B1 338.0 vs B2 334.1 tok/s). TPOT/ITL/E2EL points are reported,
    not gated. A point without a value for both variants makes the gate Inconclusive.
    """

    min_throughput_change_pct: FiniteFloat = Field(default=-1.0, ge=-100.0, le=1000.0)
    """Smallest allowed throughput change of split vs main, in percent (default −1)."""
    max_ttft_regression_pct: FiniteFloat = Field(default=1.0, ge=-100.0, le=1000.0)
    """Largest allowed TTFT increase of split vs main, in percent (default +1)."""




def flag_int(args: Sequence[str], flag: str) -> int | None:
    """The integer value of ``flag`` in an argv (``--flag N`` or ``--flag=N``; the last one wins), else ``None``."""
    value: int | None = None
    for i, a in enumerate(args):
        raw = args[i + 1] if a == flag and i + 1 < len(args) else a.split("=", 1)[1] if a.startswith(flag + "=") else None
        if raw is not None:
            try:
                value = int(raw.replace("_", ""))
            except ValueError:
                continue
    return value


def server_tp(extra_args: Sequence[str], tensor_parallel_size: int) -> int:
    """The servers' TP size: ``--tensor-parallel-size``/``-tp`` of ``serving.extraArgs`` when given (it wins on the
    ``vllm serve`` command line), else ``tensor_parallel_size`` (``spec.parallelism.tensorParallelSize``)."""
    from spx.api.serving_args import TENSOR_PARALLEL_FLAGS, extra_arg_value

    raw = extra_arg_value(extra_args, *TENSOR_PARALLEL_FLAGS)  # (every spelling vLLM accepts: issue #35)
    return int(raw) if raw is not None and raw.isdigit() and int(raw) >= 1 else tensor_parallel_size


class ServingSpec(CamelModel):
    """``spec.serving``: the serving A/B (and the server settings ``spec.accuracy`` runs on).

    Model: ``model`` is the Hugging Face id (or any name); with ``model_path`` the server loads the
    weights from that local directory and serves them under ``served_model_name`` (default ``model``).
    With ``model_pvc`` the operator mounts that PersistentVolumeClaim read-only at
    ``model_mount_path`` and ``model_path`` must lie under it. ``extra_args`` are appended to
    ``vllm serve`` (``--tensor-parallel-size`` comes from ``spec.parallelism`` unless given here);
    ``env`` is added to the server's environment (the threshold variable is reserved).

    Timeouts (seconds): ``startup_timeout_seconds`` from launch to a healthy ``/health`` (model
    loading: DeepSeek-V4.1 from a local disk takes many minutes), ``point_timeout_seconds`` per
    ``vllm bench serve``, ``shutdown_timeout_seconds`` from SIGTERM to SIGKILL,
    ``gpu_release_timeout_seconds`` for the GPUs to show no compute process after the server exits.
    """

    model: str = Field(min_length=1, max_length=512)
    """Hugging Face model id (or any name) the servers serve."""
    revision: str | None = Field(default=None, min_length=1, max_length=128)
    """Model revision (branch, tag or commit) to load."""
    model_path: str | None = Field(default=None, min_length=1, max_length=1024)
    """Local directory of the weights; the server loads them from there and serves them under servedModelName."""
    model_pvc: str | None = Field(default=None, min_length=1, max_length=253)
    """PersistentVolumeClaim holding the weights, mounted read-only at modelMountPath; modelPath must lie under it."""
    model_mount_path: str = Field(default="/models", pattern=r"^/.*")
    """Where modelPvc is mounted in the bench pod (not /, /etc/spx, /var/run/spx, /dev/shm or /dev/termination-log)."""
    served_model_name: str | None = Field(default=None, min_length=1, max_length=512)
    """Model name clients send (--served-model-name); default: model."""
    extra_args: list[str] = Field(default_factory=list, max_length=128)
    """Arguments appended to vllm serve (--tensor-parallel-size comes from spec.parallelism unless given here)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables added to the server's (SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS and SPX_ARM are reserved)."""
    host: str = "127.0.0.1"
    """Address the servers listen on inside the pod."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Port the servers listen on."""
    seed: int = Field(default=SEED_BENCH_SEED, ge=0)
    """--seed of vllm bench serve's random prompts (and of vllm serve); default 1, the seed PR's."""
    backend: str = Field(default=SEED_BENCH_BACKEND, min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    """--backend of vllm bench serve; default openai, the seed PR's."""
    endpoint: str = Field(default=SEED_BENCH_ENDPOINT, min_length=2, max_length=256, pattern=r"^/\S*$")
    """--endpoint of vllm bench serve; default /v1/completions, the seed PR's."""
    num_warmups: int | None = Field(default=None, ge=0, le=100_000)
    """--num-warmups of vllm bench serve; unset: the point's concurrency, as the seed PR ran it."""
    points: list[ServingPointSpec] = Field(default_factory=seed_points, max_length=64)
    """The vllm bench serve runs of every arm (default: the seed PR's TTFT and throughput points)."""
    arms: list[ServingArmSpec] = Field(default_factory=default_arms, min_length=2, max_length=16)
    """The servers, in run order, each a fresh vllm serve of one variant (default B1 A1 A2 B2: split, main, main, split)."""
    extra_bench_args: list[str] = Field(default_factory=list, max_length=64)
    """Arguments appended to every vllm bench serve."""
    startup_timeout_seconds: int = Field(default=2400, ge=1, le=24 * 3600)
    """Seconds from launch to a healthy /health (model loading)."""
    point_timeout_seconds: int = Field(default=3600, ge=1, le=24 * 3600)
    """Seconds one vllm bench serve may take."""
    shutdown_timeout_seconds: int = Field(default=120, ge=1, le=3600)
    """Seconds from SIGTERM to SIGKILL when a server is stopped."""
    gpu_release_timeout_seconds: int = Field(default=120, ge=0, le=3600)
    """Seconds for the GPUs to show no compute process after a server exits."""
    gate: ServingGateSpec = Field(default_factory=ServingGateSpec)
    """What the serving A/B must show: bounds on the split's throughput and TTFT changes."""
    step: StepSpec | None = None
    """Optional step A/B: the split's effect on a whole prefill step, measured inside one server per threshold against a server that never splits (settles the verdict where the kernel's GPU- and host-bound regimes disagree)."""

    @field_validator("model_mount_path")
    @classmethod
    def _mount_path_free(cls, v: str) -> str:
        norm = "/" + posixpath.normpath(v).lstrip("/")
        if norm == "/":
            raise ValueError("the model volume cannot be mounted at / (spec.serving.modelMountPath)")
        for taken in RESERVED_MOUNT_PATHS:
            if norm == taken or norm.startswith(taken + "/"):
                raise ValueError(
                    f"{taken} is mounted by the bench Job itself: spec.serving.modelMountPath must lie outside "
                    f"{', '.join(RESERVED_MOUNT_PATHS)} (e.g. /models)")
        return v

    @field_validator("env")
    @classmethod
    def _no_reserved_env(cls, v: dict[str, str]) -> dict[str, str]:
        reserved = set(RESERVED_SERVER_ENV) & set(v)
        if reserved:
            raise ValueError(f"{sorted(reserved)} are set per arm by spx; remove them from serving.env")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ServingSpec:
        names = [p.name for p in self.points]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"serving.points: point names must be unique, {dupes} repeat")
        arms = [a.name for a in self.arms]
        dupes = sorted({n for n in arms if arms.count(n) > 1})
        if dupes:
            raise ValueError(f"serving.arms: arm names must be unique, {dupes} repeat")
        variants = {a.variant for a in self.arms}
        if variants != set(ARM_VARIANTS):
            raise ValueError(
                f"serving.arms needs at least one main and one split arm (got only {sorted(variants)})"
            )
        if self.model_pvc is not None:
            mount = self.model_mount_path.rstrip("/") + "/"
            if self.model_path is None or not (self.model_path + "/").startswith(mount):
                raise ValueError(
                    f"serving.modelPvc is mounted at {self.model_mount_path}: set serving.modelPath to the "
                    f"weights' directory under it (got {self.model_path!r})"
                )
        return self

    @property
    def api_model_name(self) -> str:
        """The model name clients send (``--served-model-name``, else ``model``)."""
        return self.served_model_name or self.model


# --------------------------------------------------------------------------- result document


class ServingPointRun(CamelModel):
    """One point of one arm as measured: the compared value and vLLM's summary fields.

    ``value`` is ``None`` when the point failed (``error`` says why). ``summary`` keeps the scalar
    fields of the saved JSON (throughputs, mean/median/p99 latencies, completed, failed, duration);
    ``result_file`` is the JSON ``vllm bench serve --save-result`` wrote, ``log_file`` its output.
    """

    point: str
    metric: ServingMetric
    value: float | None = None
    summary: dict[str, float] = Field(default_factory=dict)
    result_file: str | None = None
    log_file: str | None = None
    wall_seconds: float | None = Field(default=None, ge=0)
    command: list[str] = Field(default_factory=list)
    sampling: dict[str, str] = Field(default_factory=dict)
    """The sampling the requests asked for (``vllm bench serve`` sends no temperature unless told: the server's
    default, the model's generation_config, applies): :func:`spx.analysis.serving.sampling_of`."""
    error: str | None = None


class ServingArmRun(CamelModel):
    """One arm: its server's life and every point it ran.

    ``threshold`` is the value given to ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` (``off`` or a count);
    ``threshold_confirmed`` whether the server log shows the spx plugin's "spx: set …" line;
    ``server_log`` the server's stdout+stderr, kept; ``gpu_check`` whether the GPUs showed no compute
    process after the server stopped (``skipped`` without ``nvidia-smi``).
    """

    name: str
    variant: ArmVariant
    threshold: str
    state: ArmState = "Pending"
    server_command: list[str] = Field(default_factory=list)
    server_log: str | None = None
    server_exit_code: int | None = None
    healthy_after_seconds: float | None = Field(default=None, ge=0)
    threshold_confirmed: bool | None = None
    gpu_check: GpuCheck | None = None
    points: list[ServingPointRun] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    error: str | None = None


class ServingResult(CamelModel):
    """The serving bench's output (``serving-result.json``), rewritten after every measurement.

    ``complete`` is false when any arm or point failed; ``failures`` names each (``arm/point: why``,
    the cause read from the server's or the bench's log); whatever finished is kept.
    ``protocol_deviations`` lists every way this run's spec differs from the seed PR's protocol.
    """

    schema_version: Literal["spx.dev/serving-result/v1"] = SERVING_RESULT_SCHEMA_VERSION
    experiment: str = "local"
    """metadata.name of the experiment it belongs to."""
    spec_hash: str | None = None
    """Hash of the experiment's spec (``spx.api.spec.spec_hash``): a bench document of another spec is refused."""
    run_id: str | None = None
    """The run it belongs to (a run folder's or a Job's id)."""
    serving: ServingSpec
    gate_threshold_tokens: int = Field(gt=0)
    arms: list[ServingArmRun] = Field(default_factory=list)
    complete: bool = False
    failures: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    protocol_deviations: list[str] = Field(default_factory=list)
    device: str | None = None
    """cuda or cpu: where the servers ran (cpu when no nvidia-smi was found); a CPU A/B decides nothing unless gate.allowCpuTimings."""
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


# --------------------------------------------------------------------------- status


class ServingArmValue(CamelModel):
    """One arm's value at one point (``value`` unset: that arm's point failed)."""

    arm: str
    """Arm name."""
    variant: ArmVariant
    """main or split."""
    value: float | None = None
    """The arm's value; unset: the arm's point failed."""


class ServingPointStatus(CamelModel):
    """One point summarised: each arm's value, the variants' means and the change.

    ``change_pct`` = (split mean − main mean) / main mean × 100 (negative TTFT change is better);
    ``improvement_pct`` is the same change signed so that positive is always better.
    ``within_kind_pct`` is the larger spread between arms of the same kind (A1 vs A2, B1 vs B2:
    (max − min) / mean × 100); when it exceeds ``|change_pct|`` the point is noise and
    ``passed`` is ``None``. ``passed`` is this point's gate check (``None``: not gated, not decidable,
    or within noise).
    """

    name: str
    """Point name."""
    metric: ServingMetric
    """The compared metric."""
    unit: str
    """Unit of the values (ms, tok/s or req/s)."""
    values: list[ServingArmValue] = Field(default_factory=list)
    """Each arm's value."""
    main_mean: float | None = None
    """Mean over the main arms."""
    split_mean: float | None = None
    """Mean over the split arms."""
    change_pct: float | None = None
    """(split mean − main mean) / main mean × 100."""
    improvement_pct: float | None = None
    """changePct signed so that positive is better."""
    within_kind_pct: float | None = None
    """Largest spread between arms of the same variant, percent of their mean; unset: a variant has fewer than two values (no noise estimate: the point is not gated)."""
    threshold_tokens: int | None = None
    """The split arms' threshold compared here (arms with different thresholds are never pooled: one status per threshold)."""
    max_batch_tokens: int | None = None
    """Largest batch this point can form, tokens: min(concurrency × inputLen, --max-num-batched-tokens); unset: unbounded."""
    control: bool = False
    """Every batch stays below the threshold, so the split cannot engage: a control, reported and not gated."""
    sampling: dict[str, str] = Field(default_factory=dict)
    """The sampling the point's requests used (see ServingPointRun.sampling)."""
    passed: bool | None = None
    """This point's gate check; unset: not gated or not decidable."""


class ServingArmStatus(CamelModel):
    """One arm's outcome in the status (no per-request data)."""

    name: str
    """Arm name."""
    variant: ArmVariant
    """main or split."""
    threshold: str
    """The threshold the arm ran with (off for main)."""
    state: ArmState
    """Pending, Succeeded, Partial, Failed or Skipped."""
    message: str | None = None
    """Why the arm failed or was skipped."""


class ServingStatus(CamelModel):
    """``status.serving``: the A/B summary and its gate (``gatePassed`` unset: inconclusive)."""

    arms: list[ServingArmStatus] = Field(default_factory=list)
    """Each arm's outcome, in run order."""
    points: list[ServingPointStatus] = Field(default_factory=list)
    """Each point summarised over the arms."""
    complete: bool = False
    """True when every arm and point finished."""
    failures: list[str] = Field(default_factory=list)
    """What failed, one entry per arm or point (arm/point: why)."""
    gate_passed: bool | None = None
    """The serving gate's result; unset: inconclusive."""
    cpu_timings: bool = False
    """The servers ran on CPU: the A/B proves the pipeline and decides nothing unless gate.allowCpuTimings."""
    reasons: list[str] = Field(default_factory=list)
    """Why the gate passed, failed or could not decide."""
