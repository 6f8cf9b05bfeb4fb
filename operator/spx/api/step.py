"""The step A/B: the split's effect on a whole eager prefill step, measured inside **one** vLLM server.

Why: an eager step is a queue. Replacing the replicated projection by the split moves the step by the
split's GPU difference Δg while the GPU is the bottleneck and by its host difference Δh while the host
is (docs/kernel-benchmark.md, "Regimes"); which one holds depends on the whole layer (attention, MoE
and their host cost) and on the node. Only a measurement of the whole step settles it.

Design (issue #34; one model load, no server-to-server noise in the effect):

- one ``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1`` (``POST /collective_rpc``, bound to 127.0.0.1) and
  spx's worker extension (``--worker-extension-cls``), prefix caching off, concurrency 1;
- before each request the runner *switches* the arm inside the running server (an RPC to every TP worker,
  outside the timed window): ``replicated`` (threshold off), ``split`` (threshold = the request's length:
  vLLM's ``sp_shard``), ``pad-free`` (split with the pad-free shard), ``aa`` (threshold = length + 1: a
  second value that also means "no split", the A/A) and ``positive-control`` (no split + a known delay the
  extension injects, :attr:`StepSpec.positive_control_ms`);
- each worker confirms the switch, and the forward itself reports whether it took the split branch and the
  token count it saw; a request whose forward contradicts its arm makes its round unusable (named);
- a round sends every arm once at every length, in a seeded random order; lengths run from below the gate
  threshold up to ``max_num_batched_tokens``, aligned (``L % TP == 0``) and off-aligned (``sp_shard``'s pad
  path, 7 of 8 batch sizes);
- the effect of an arm at a length is a statistic of the per-round paired differences
  ``latency(arm) − latency(replicated)`` (ms per step; negative: a gain), with an interval valid under the
  sequential stopping rule (``spx.analysis.step``); per layer it is divided by :attr:`StepSpec.layers`.

The result document (``step-result.json``) keeps every switch and every request; the status section
(:class:`StepStatus`) keeps the curve, the calibration and the expected effect over the batch mix.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field, field_validator

from spx.api.base import CamelModel

# The step A/B's vocabularies are spx.vocabulary's (guarded by tests/unit/test_vocabulary.py), re-exported here.
from spx.vocabulary import StepArm as StepArm
from spx.vocabulary import StepOutcome as StepOutcome
from spx.vocabulary import StepRegime as StepRegime
from spx.vocabulary import StepStatistic as StepStatistic

STEP_RESULT_SCHEMA_VERSION: Final = "spx.dev/step-result/v2"


class BatchMixBucket(CamelModel):
    """One bucket of the deployment's batch-size distribution: batches of ``(previous le, le]`` tokens.

    Give buckets as vLLM's ``vllm:iteration_tokens_total`` histogram reports them (``le`` the upper bound,
    ``weight`` the count or share in that bucket); weights need not sum to 1.
    """

    le: int = Field(gt=0, le=1 << 24)
    """Upper bound of the bucket, tokens (inclusive)."""
    weight: float = Field(ge=0)
    """Relative frequency of batches in the bucket (count or share)."""


class StepSpec(CamelModel):
    """``spec.serving.step``: the one-server step A/B (module docstring).

    Runs on ``spec.serving``'s model and server settings, first (before any serving arm): one server, the
    split switched per request. The gate threshold is always evaluated; ``thresholds`` adds thresholds
    whose expected effect is reported too (no extra server: the curve covers them).
    """

    thresholds: list[Annotated[int, Field(gt=0, le=1 << 24)]] = Field(default_factory=list, max_length=8)
    """Thresholds T (tokens) to evaluate besides gate.thresholdTokens; each listed once."""
    lengths: list[Annotated[int, Field(gt=0, le=1 << 24)]] = Field(default_factory=list, max_length=64)
    """Prompt lengths (tokens) to measure; empty: the default curve (``spx.analysis.step.default_lengths``:
    aligned and off-aligned lengths from below the gate threshold up to max_num_batched_tokens)."""
    pad_free: bool = True
    """Also measure the pad-free shard (arm ``pad-free``): a measured proposal for vLLM, never gated."""
    positive_control_ms: float = Field(default=1.0, gt=0, le=1000)
    """The known effect (ms per step) the worker extension injects for the positive control: after the
    forward has issued all its work, it synchronises the device (as the runner would a moment later) and
    waits this long. Its measured effect's interval must cover it, or the step decides nothing."""
    rounds: int = Field(default=200, ge=8, le=10_000)
    """Most rounds (the budget); a round sends every arm once at every length. 200 (with minRounds 40, lookEvery
    40): a −0.8 ms effect with 1 ms request noise resolved in ≥ 96 % of simulated runs, a null in none
    (examples/results/step-power.md)."""
    min_rounds: int = Field(default=40, ge=8, le=10_000)
    """Rounds before the first look of the stopping rule."""
    look_every: int = Field(default=40, ge=1, le=10_000)
    """Rounds between two looks of the stopping rule (the number of looks sets each interval's level)."""
    budget_seconds: int | None = Field(default=None, ge=60, le=7 * 24 * 3600)
    """Wall-clock budget of the rounds (after the model load); None: rounds alone bound it."""
    indifference_ms: float = Field(default=0.2, ge=0, le=1000)
    """Half-width of the indifference band around 0 (ms per step): the rounds may stop once every gated
    interval excludes it."""
    statistic: StepStatistic = "median"
    """The statistic of each length's per-round paired differences. The median is the default: with 30 % of
    requests slowed by 10–100 ms it resolved a −0.8 ms effect in 96 % of simulated runs, the mean in 8 %
    (``benchmarks/step_power.py``, examples/results/step-power.md)."""
    warmup_rounds: int = Field(default=3, ge=0, le=1_000)
    """Rounds sent and discarded first (allocator, JIT and cache warm-up)."""
    layers: int = Field(default=40, ge=1, le=1_000)
    """Layers running the projection once per step (DeepSeek-V4.1: 40): the per-layer effect is the step effect / layers."""
    request_timeout_seconds: int = Field(default=600, ge=1, le=24 * 3600)
    """Seconds one request may take."""
    seed: int = Field(default=0, ge=0)
    """Seed of the token IDs, of each round's order and of the bootstrap."""
    batch_mix: list[BatchMixBucket] = Field(default_factory=list, max_length=128)
    """The deployment's batch-size distribution (e.g. from vllm:iteration_tokens_total); empty: every size
    from 1 to max_num_batched_tokens equally likely (so 7 in 8 take the pad path at TP 8)."""

    @field_validator("thresholds", "lengths")
    @classmethod
    def _listed_once(cls, v: list[int]) -> list[int]:
        """Refuse a repeated threshold or length."""
        dupes = sorted({t for t in v if v.count(t) > 1})
        if dupes:
            raise ValueError(f"each value must be listed once, {dupes} repeat")
        return v


# --------------------------------------------------------------------------- result document


class StepSwitch(CamelModel):
    """One switch of the arm inside the server, as every TP worker confirmed it."""

    at: float
    """Unix time (s) the switch was sent."""
    arm: StepArm
    threshold: int
    """The threshold set (tokens; 2³¹ − 1 for off)."""
    inject_ms: float = 0.0
    """The injected delay set (positive control), ms."""
    workers: int = Field(default=0, ge=0)
    """Workers that answered."""
    confirmed: bool = False
    """Every worker reported the new threshold, pad mode and delay."""
    rpc_ms: float | None = Field(default=None, ge=0)
    """Wall time of the switch RPC (outside any timed request)."""
    error: str | None = Field(default=None, max_length=1024)


class StepRequest(CamelModel):
    """One request as sent and answered, with what its forward did.

    ``latency_ms`` is the wall time from sending to the full answer (``max_tokens`` 1: the prefill step,
    sampling one token, and the HTTP round trip); ``prompt_tokens`` the server's ``usage.prompt_tokens``,
    which must equal ``length``. ``split_forwards`` / ``forward_tokens``: per worker, the forwards since the
    switch that took the split branch, and the token counts the forwards saw (from the worker extension).
    """

    round: int = Field(ge=0)
    order: int = Field(ge=0)
    arm: StepArm
    length: int = Field(gt=0)
    sent_at: float | None = None
    """Unix time (s) the request was sent."""
    prompt_tokens: int | None = Field(default=None, ge=0)
    latency_ms: float | None = Field(default=None, ge=0)
    split_forwards: list[int] = Field(default_factory=list)
    """Per worker: forwards that took the split branch during this request."""
    forward_tokens: list[list[int]] = Field(default_factory=list)
    """Per worker: the token count of each forward during this request."""
    confirmed: bool | None = None
    """The forward did what the arm asked (split at L for split/pad-free, no split otherwise) on every worker."""
    error: str | None = Field(default=None, max_length=1024)


class StepServerInfo(CamelModel):
    """The one server of the step A/B: its command, life and what its workers reported."""

    server_command: list[str] = Field(default_factory=list)
    server_log: str | None = None
    server_exit_code: int | None = None
    healthy_after_seconds: float | None = Field(default=None, ge=0)
    workers: int = Field(default=0, ge=0)
    """TP workers that answered the extension's RPC."""
    extension_confirmed: bool = False
    """Every worker loaded spx's worker extension and found the split target."""
    capture_limit_tokens: int = Field(default=0, ge=0)
    """Largest CUDA-graph capture size (0: none): lengths at or below it are refused (a graph keeps its branch)."""
    compiled: bool = False
    """The forward is torch.compiled (then every length is refused: a compiled region keeps its branch)."""


class StepRefusal(CamelModel):
    """A length the step A/B did not measure, and why."""

    length: int = Field(gt=0)
    reason: str = Field(max_length=1024)


class StepResult(CamelModel):
    """``step-result.json``: every switch and request of the one server, rewritten after every block."""

    schema_version: Literal["spx.dev/step-result/v2"] = STEP_RESULT_SCHEMA_VERSION
    experiment: str = "local"
    """metadata.name of the experiment it belongs to."""
    spec_hash: str | None = None
    """Hash of the experiment's spec (``spx.api.spec.spec_hash``): a bench document of another spec is refused."""
    run_id: str | None = None
    """The run it belongs to (a run folder's or a Job's id)."""
    step: StepSpec
    tensor_parallel_size: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    gate_threshold_tokens: int = Field(gt=0)
    thresholds: list[int] = Field(default_factory=list)
    """Every threshold evaluated: the gate's first, then step.thresholds."""
    lengths: list[int] = Field(default_factory=list)
    """The lengths measured (after refusals), ascending."""
    arms: list[StepArm] = Field(default_factory=list)
    refused: list[StepRefusal] = Field(default_factory=list)
    device: str | None = None
    """cuda or cpu: where the server ran (a CPU run never decides a verdict unless gate.allowCpuTimings)."""
    server: StepServerInfo = Field(default_factory=StepServerInfo)
    switches: list[StepSwitch] = Field(default_factory=list)
    requests: list[StepRequest] = Field(default_factory=list)
    rounds_planned: int = Field(default=0, ge=0)
    rounds_done: int = Field(default=0, ge=0)
    stopped_because: str | None = None
    """Why the rounds stopped: resolved (every gated interval excludes the band), budget, rounds, or a failure."""
    complete: bool = False
    """The rounds ended by the stopping rule or the budget, with no failure."""
    failures: list[str] = Field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None


# --------------------------------------------------------------------------- status


class StepPoint(CamelModel):
    """One arm's measured effect on the step at one length (``spx.analysis.step``).

    ``effect_ms`` is the :attr:`StepSpec.statistic` of the per-round paired differences
    ``latency(arm) − latency(replicated)``, ms per step; negative: the arm shortens the step.
    ``per_layer_us`` is ``effect_ms × 1000 / layers``. ``kernel_gpu_us`` / ``kernel_host_us`` are the kernel
    sweep's Δg and Δh at this length (µs per layer, interpolated), the figures the regime is judged against.
    """

    arm: StepArm
    """The arm measured against ``replicated``."""
    length: int = Field(gt=0)
    """Prompt length (tokens): the step's batch size M."""
    aligned: bool
    """length % TP == 0 (off-aligned lengths take sp_shard's pad path)."""
    rounds: int = Field(ge=0)
    """Usable rounds behind the figure."""
    effect_ms: float
    """The statistic of the per-round paired differences, ms per step (negative: a gain)."""
    effect_low_ms: float
    """Lower end of its interval, ms per step."""
    effect_high_ms: float
    """Upper end of its interval, ms per step."""
    per_layer_us: float
    """``effect_ms`` × 1000 / layers, µs per layer."""
    per_layer_low_us: float
    """Lower end of the per-layer interval, µs."""
    per_layer_high_us: float
    """Upper end of the per-layer interval, µs."""
    kernel_gpu_us: float | None = None
    """The kernel sweep's Δg at this length, µs per layer (interpolated; None without a sweep)."""
    kernel_host_us: float | None = None
    """The kernel sweep's Δh at this length, µs per layer (interpolated; None without a sweep)."""
    regime: StepRegime = "undetermined"
    """Which kernel regime the per-layer interval matches."""
    outcome: StepOutcome = "indifferent"
    """gain, loss or indifferent: where the interval lies against 0."""


class StepExpectation(CamelModel):
    """The expected effect of splitting from ``threshold_tokens`` over the batch sizes the deployment forms
    at and above it (up to max_num_batched_tokens), weighted by the batch mix (aligned and pad path as
    they occur), ms per step and µs per layer, with its interval."""

    threshold_tokens: int = Field(gt=0)
    """The threshold T the expectation splits from (tokens)."""
    arm: StepArm
    """split (vLLM's sp_shard) or pad-free (the proposal)."""
    mix: Literal["uniform", "given"] = "uniform"
    """``uniform`` (every size up to max_num_batched_tokens equally likely) or ``given`` (step.batchMix)."""
    pad_path_share: float = Field(ge=0, le=1)
    """Share of the weighted batch sizes that take the pad path (M % TP != 0)."""
    effect_ms: float
    """The expected effect, ms per step (negative: a gain)."""
    effect_low_ms: float
    """Lower end of its interval, ms per step."""
    effect_high_ms: float
    """Upper end of its interval, ms per step."""
    per_layer_us: float
    """``effect_ms`` × 1000 / layers, µs per layer."""
    per_layer_low_us: float
    """Lower end of the per-layer interval, µs."""
    per_layer_high_us: float
    """Upper end of the per-layer interval, µs."""
    outcome: StepOutcome = "indifferent"
    """gain, loss or indifferent: where the interval lies against 0."""


class StepCalibration(CamelModel):
    """One calibration check (``spx.analysis.step``): the A/A (expected 0) or the positive control (expected
    ``positiveControlMs``), its effect pooled over its lengths (equal weights; the same joint bootstrap over
    rounds), ms per step. ``passed``: the interval reaches the expected value within ±indifferenceMs."""

    arm: StepArm
    """``aa`` or ``positive-control``."""
    expected_ms: float
    """What the check must find, ms per step: 0 for the A/A, positiveControlMs for the positive control."""
    lengths: int = Field(ge=0)
    """Lengths pooled."""
    effect_ms: float
    """The pooled effect, ms per step."""
    effect_low_ms: float
    """Lower end of its interval, ms per step."""
    effect_high_ms: float
    """Upper end of its interval, ms per step."""
    passed: bool
    """The interval reaches expectedMs within ±indifferenceMs."""


class StepStatus(CamelModel):
    """``status.step``: the step A/B's curve, calibration and expectation, and whether it may decide."""

    points: list[StepPoint] = Field(default_factory=list)
    """Per arm (split, pad-free) and length."""
    aa: list[StepPoint] = Field(default_factory=list)
    """The A/A's effects (must cover 0)."""
    positive_control: list[StepPoint] = Field(default_factory=list)
    """The injected effect as measured (must cover positiveControlMs)."""
    positive_control_ms: float | None = None
    """The injected delay the positive control must recover (step.positiveControlMs), ms."""
    calibration: list[StepCalibration] = Field(default_factory=list)
    """The A/A's and the positive control's pooled checks (both must pass for the step to be usable)."""
    expectations: list[StepExpectation] = Field(default_factory=list)
    """Per threshold (the gate's first) and arm."""
    break_even_tokens: float | None = None
    """Where the split's mix-weighted effect crosses from loss to gain on the curve (tokens), if it does."""
    recommended_threshold_tokens: int | None = None
    """The smallest measured length from which the split's effect (1/TP aligned, (TP−1)/TP pad path at each length)
    is a resolved gain at every larger measured length: the step's recommendation, measured on the deployment."""
    usable: bool = False
    """The step may decide: complete enough, calibrated (A/A covers 0, positive control recovered), every switch
    confirmed, this experiment's, on a GPU (or allowCpuTimings)."""
    unusable_reasons: list[str] = Field(default_factory=list)
    """Why it may not decide, most important first."""
    complete: bool = False
    """The rounds ended by the stopping rule or the budget, with no failure (step-result.json's complete)."""
    rounds: int = Field(default=0, ge=0)
    """Rounds measured."""
    stopped_because: str | None = None
    """Why the rounds stopped (the stopping rule's reason, or a failure)."""
    statistic: StepStatistic = "median"
    """The statistic of the per-round paired differences (step.statistic)."""
    confidence: float = Field(default=0.95, gt=0, lt=1)
    """Coverage of the gated interval (the split's expectation from the gate threshold) over every look of the
    stopping rule: 1 − α."""
    interval_level: float = Field(default=0.95, gt=0, lt=1)
    """Level of each interval reported: 1 − α/K (Bonferroni over the K looks of the stopping rule)."""
    looks: int = Field(default=1, ge=1)
    """K: the looks the stopping rule plans (minRounds, then every lookEvery rounds up to rounds)."""
    cpu_timings: bool = False
    """The server ran on CPU: the effects prove the machinery, they say nothing about GPUs."""
    failures: list[str] = Field(default_factory=list)
    """What failed while measuring (server, requests), named."""
    reasons: list[str] = Field(default_factory=list)
    """What the effects say, most important first."""
