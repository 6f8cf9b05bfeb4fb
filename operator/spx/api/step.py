"""The step A/B: the split's effect on a whole eager prefill step, measured inside one vLLM server.

Why: an eager step is a queue. Replacing the replicated projection by the split moves the step by the
split's GPU difference Δg while the GPU is the bottleneck and by its host difference Δh while the host
is (docs/kernel-benchmark.md, "Regimes"); which one holds depends on the whole layer (attention, MoE
and their host cost) and on the node. Only a measurement of the whole step settles it.

Design (issue #28; difference in differences, no server-to-server noise in the effect):

- a *treated* server splits at ``T`` (``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=T``), a *control* server
  never splits (``off``); both with prefix caching off, concurrency 1;
- on each server, rounds of single-request prefills interleave prompts of exactly ``T − TP`` tokens
  (the *base*: below ``T``, replicated on both servers), ``T`` tokens (split on the treated server) and
  ``T + 1`` tokens (the *pad* path: ``sp_shard`` pads to a multiple of TP), each sent as a list of
  token IDs with ``max_tokens`` 1 (the request's latency is its prefill step) and checked against the
  server's ``usage.prompt_tokens``;
- per server, the difference ``Q(L) − Q(T − TP)`` of a latency quantile (``quantile``, default the median)
  over its rounds; the step effect of the split at length ``L`` is the treated server's difference minus
  the control server's (the cost of the extra ``L − (T − TP)`` tokens cancels), with a bootstrap interval
  over rounds; per layer it is divided by the model's layers (DeepSeek-V4.1: 40).

Negative effects are gains (the split shortens the step), as Δg and Δh are split − replicated.

The result document (``step-result.json``) keeps every request; the status section keeps the effects.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field, field_validator

from spx.api.base import CamelModel

STEP_RESULT_SCHEMA_VERSION: Final = "spx.dev/step-result/v1"

#: Which kernel regime the measured step effect matches (``spx.analysis.step``): ``gpu-bound`` (near Δg),
#: ``host-bound`` (near Δh), ``between`` (at the pivot: neither), ``undetermined`` (the interval covers both,
#: or no kernel Δ to compare with).
StepRegime = Literal["gpu-bound", "host-bound", "between", "undetermined"]
#: What the effect's interval says: ``gain`` (entirely below 0: the split shortens the step), ``loss``
#: (entirely above 0), ``indifferent`` (it straddles 0: within the noise).
StepOutcome = Literal["gain", "loss", "indifferent"]
#: The role of a request's length in a round.
StepLengthRole = Literal["base", "split", "pad"]
#: The role of a server in the design: ``treated`` splits at T, ``control`` never splits, ``positive-control``
#: never splits but has a chunk budget of T tokens (``--max-num-batched-tokens T``), so that T + 1 tokens take a
#: second prefill step: an effect the design must detect (``StepSpec.positive_control``).
StepServerRole = Literal["treated", "control", "positive-control"]


class StepSpec(CamelModel):
    """``spec.serving.step``: the within-server step A/B (module docstring).

    Runs on ``spec.serving``'s model and server settings, after the kernel bench: one control server
    (split off) and one treated server per threshold. ``thresholds`` adds thresholds to
    ``gate.thresholdTokens`` (always measured).
    """

    thresholds: list[Annotated[int, Field(gt=0, le=1 << 24)]] = Field(default_factory=list, max_length=8)
    """Thresholds T (tokens) to measure besides gate.thresholdTokens, each on its own treated server; each listed once."""
    rounds: int = Field(default=40, ge=8, le=10_000)
    """Rounds per server; each round sends one prompt of each length (T − TP, T, T + 1) in a shuffled order."""
    warmup_rounds: int = Field(default=3, ge=0, le=1_000)
    """Rounds sent and discarded first on every server (allocator, JIT and cache warm-up)."""
    pad: bool = True
    """Also send T + 1 tokens (sp_shard's pad path and a partial tile, as 7 of 8 real batch sizes pay)."""
    layers: int = Field(default=40, ge=1, le=1_000)
    """Layers running the projection once per step (DeepSeek-V4.1: 40): the per-layer effect is the step effect / layers."""
    request_timeout_seconds: int = Field(default=600, ge=1, le=24 * 3600)
    """Seconds one request may take."""
    seed: int = Field(default=0, ge=0)
    """Seed of the token IDs, of each round's order and of the bootstrap."""
    quantile: float = Field(default=0.5, gt=0, le=0.5)
    """The latency quantile compared per server and length (0.5: the median); lower it on a shared, noisy host, where interference only adds time (0.05 in the CPU test stage)."""
    positive_control: bool = False
    """Also run a server that never splits with a chunk budget of gate.thresholdTokens (--max-num-batched-tokens T): at T + 1 tokens it takes a second prefill step, an effect the design must detect on this deployment (status.step.positiveControls)."""


# --------------------------------------------------------------------------- result document

    @field_validator("thresholds")
    @classmethod
    def _listed_once(cls, v: list[int]) -> list[int]:
        """Refuse a repeated threshold (each is a server and a model load: the Job deadline counts them)."""
        dupes = sorted({t for t in v if v.count(t) > 1})
        if dupes:
            raise ValueError(f"serving.step.thresholds must list each threshold once, {dupes} repeat")
        return v


class StepRequest(CamelModel):
    """One request as sent and answered.

    ``latency_ms`` is the wall time from sending to the full answer (``max_tokens`` 1: the prefill step,
    sampling one token, and the HTTP round trip); ``prompt_tokens`` the server's ``usage.prompt_tokens``,
    which must equal ``length``.
    """

    threshold_tokens: int = Field(gt=0)
    """The T whose round this request belongs to (its lengths are T − TP, T and T + 1)."""
    round: int = Field(ge=0)
    order: int = Field(ge=0)
    role: StepLengthRole
    length: int = Field(gt=0)
    prompt_tokens: int | None = Field(default=None, ge=0)
    latency_ms: float | None = Field(default=None, ge=0)
    error: str | None = Field(default=None, max_length=1024)


class StepServerRun(CamelModel):
    """One server of the step A/B: its threshold, its life and every request it answered."""

    name: str = Field(min_length=1, max_length=64)
    role: StepServerRole
    threshold: str
    """SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS as given (off, or a count)."""
    threshold_tokens: int | None = Field(default=None, gt=0)
    """The T whose lengths this server measured (a control server measures every T's lengths)."""
    server_command: list[str] = Field(default_factory=list)
    server_log: str | None = None
    server_exit_code: int | None = None
    healthy_after_seconds: float | None = Field(default=None, ge=0)
    threshold_confirmed: bool | None = None
    wall_seconds: float | None = Field(default=None, ge=0)
    """Seconds from the first warm-up request to the last request."""
    requests: list[StepRequest] = Field(default_factory=list)
    error: str | None = None


class StepResult(CamelModel):
    """``step-result.json``: every request of every server, rewritten after each server."""

    schema_version: Literal["spx.dev/step-result/v1"] = STEP_RESULT_SCHEMA_VERSION
    experiment: str = "local"
    step: StepSpec
    tensor_parallel_size: int = Field(ge=1)
    thresholds: list[int] = Field(default_factory=list)
    device: str | None = None
    """cuda or cpu: where the servers ran (a CPU run never decides a verdict unless gate.allowCpuTimings)."""
    servers: list[StepServerRun] = Field(default_factory=list)
    complete: bool = False
    failures: list[str] = Field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None


# --------------------------------------------------------------------------- status


class StepEffect(CamelModel):
    """The split's measured effect on the step at one threshold and one length (``spx.analysis.step``).

    ``effect_ms`` is the difference in differences (treated − control) of ``Q(length) − Q(T − TP)``, ``Q`` the
    latency quantile of ``StepSpec.quantile`` (the median by default) over a server's rounds, in ms per step; negative: the split
    shortens the step. ``per_layer_us`` is ``effect_ms × 1000 / layers``. ``kernel_gpu_us`` and
    ``kernel_host_us`` are the kernel sweep's Δg and Δh at this length (µs per layer, interpolated), the
    figures the regime is judged against.
    """

    threshold_tokens: int = Field(gt=0)
    """T: the treated server splits batches of at least T tokens."""
    role: StepLengthRole
    """split (length T) or pad (length T + 1)."""
    length: int = Field(gt=0)
    """Prompt tokens of the measured request (T or T + 1); the base is T − TP."""
    base_length: int = Field(gt=0)
    """Prompt tokens of the base request (T − TP: replicated on both servers)."""
    rounds: int = Field(ge=0)
    """Rounds used (per server)."""
    effect_ms: float
    """Step effect of the split, ms per step (negative: a gain)."""
    effect_low_ms: float
    """Lower end of the effect's 95 % interval (bootstrap over rounds), ms."""
    effect_high_ms: float
    """Upper end of the effect's 95 % interval, ms."""
    layers: int = Field(ge=1)
    """Layers the effect is divided by."""
    per_layer_us: float
    """effectMs × 1000 / layers: µs per layer."""
    per_layer_low_us: float
    """Lower end of the per-layer interval, µs."""
    per_layer_high_us: float
    """Upper end of the per-layer interval, µs."""
    kernel_gpu_us: float | None = None
    """The kernel sweep's Δg at this length, µs per layer (split − replicated GPU span)."""
    kernel_host_us: float | None = None
    """The kernel sweep's Δh at this length, µs per layer (split − replicated host issue time)."""
    server: str = "treated"
    """The server measured against the control (its name in step-result.json)."""
    control_rounds: int = Field(default=0, ge=0)
    """Rounds of the control server used."""
    regime: StepRegime = "undetermined"
    """Which kernel regime the step effect matches."""
    outcome: StepOutcome = "indifferent"
    """gain, loss or indifferent (the interval straddles 0)."""


class StepStatus(CamelModel):
    """``status.step``: the step A/B's effects and what they say (``spx.analysis.step``)."""

    effects: list[StepEffect] = Field(default_factory=list)
    """One per threshold and length (T, and T + 1 with pad)."""
    positive_controls: list[StepEffect] = Field(default_factory=list)
    """The positive control's effects (StepSpec.positiveControl): at T + 1 a second prefill step, which must come out a loss."""
    complete: bool = False
    """True when every server answered every round."""
    statistic: str = "median"
    """The location compared per server and length: median, or the StepSpec.quantile (e.g. 0.05-quantile)."""
    cpu_timings: bool = False
    """The servers ran on CPU: the effects prove the machinery, they say nothing about GPUs."""
    failures: list[str] = Field(default_factory=list)
    """What failed (server: why)."""
    reasons: list[str] = Field(default_factory=list)
    """What the effects say, most important first."""
