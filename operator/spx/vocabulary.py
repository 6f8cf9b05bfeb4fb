"""spx's vocabularies, each defined once: everything else (the status and spec models, the CRD's
descriptions, the CLI's help, the metrics' label values, the gate's exit codes, the docs' tables) is
derived from or tested against these definitions.

Pure and standard library only, the lowest layer, below :mod:`spx.api`: the vLLM plugin loads it in
every vLLM process, and importing ``spx.api`` builds all its pydantic models (2.3 s measured with
``python -X importtime``). Names, one ``Literal`` type per vocabulary, the tuple of its values derived
from that type (``typing.get_args``, so the two cannot drift) and, where users choose a value, a
one-line meaning per value. The pattern follows kopf's ``causes.Reason`` (an enum with derived tuples "to prevent a direct
usage of strings, and typos"), written as ``Literal`` types so the published schema stays a plain
string ``enum``.

- verdicts and the reasons of the terminal ``Decided`` condition (:data:`VERDICTS`,
  :data:`FAILURE_REASONS`, :data:`DECIDED_REASONS`), what decided a verdict (:data:`DECIDED_BY`) and
  the kernel's regimes (:data:`KERNEL_REGIMES`);
- phases, waiting and terminal (:data:`PHASES`, :data:`WAITING_PHASES`, :data:`TERMINAL_PHASES`);
- GEMM and all-gather backends of the kernel microbenchmark (:data:`GEMM_BACKENDS`,
  :data:`GATHER_BACKENDS`, with :data:`GEMM_BACKEND_MEANINGS` / :data:`GATHER_BACKEND_MEANINGS`);
- the spx vLLM plugin's environment variables and the marker of the line it logs
  (:data:`PLUGIN_ENV_THRESHOLD`, :data:`PLUGIN_ENV_TARGET`, :data:`PLUGIN_LOG_MARKER`, :data:`ARM_ENV`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeVar, get_args

# --- verdicts and decided reasons ------------------------------------------------------------------

#: The gate's verdict (``status.verdict``; the reason of ``Decided`` True when a verdict was reached).
Verdict = Literal["Pass", "Fail", "Inconclusive"]
#: The reason of ``Decided`` True when the run ended without a verdict.
FailureReason = Literal["InvalidSpec", "BenchmarkFailed", "InfraFailed"]
#: Every reason of the terminal ``Decided`` condition: the verdict, or why there is none.
DecidedReason = Literal[Verdict, FailureReason]

VERDICTS: Final[tuple[Verdict, ...]] = get_args(Verdict)
FAILURE_REASONS: Final[tuple[FailureReason, ...]] = get_args(FailureReason)
DECIDED_REASONS: Final[tuple[DecidedReason, ...]] = VERDICTS + FAILURE_REASONS

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

#: The two regimes of an eagerly run step (docs/kernel-benchmark.md, "Regimes"; :mod:`spx.analysis.queue`):
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

# --- the spx vLLM plugin (spx.bench.vllm_plugin) --------------------------------------------------

#: The threshold the plugin sets in every vLLM process: ``off`` or a token count.
PLUGIN_ENV_THRESHOLD: Final = "SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS"
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
