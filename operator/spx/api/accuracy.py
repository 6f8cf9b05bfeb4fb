"""``spec.accuracy`` (optional): GSM8K through the patched vLLM, main vs split, and what it reports.

The questions are asked through ``/v1/chat/completions`` as a 5-shot multi-turn chat (the few-shot
examples as earlier user/assistant turns), greedy (temperature 0) with a fixed seed, up to
``max_tokens`` generated, ``concurrency`` requests in flight. A reply is scored by the number after
``####``, else its last number (:func:`spx.analysis.accuracy.extract_answer`).

The runs happen on the servers of ``spec.serving``'s arms (``arms``; by default the first main and
the first split arm in run order), after that arm's serving points, so the model is loaded once per
arm. ``spec.accuracy`` therefore needs ``spec.serving`` (its ``points`` may be empty).

The data set ships with spx (``spx/data/gsm8k/``, MIT licence there): openai/grade-school-math's
``test.jsonl`` (1,319 questions) and ``train.jsonl`` (the few-shot turns), one
``{"question": ..., "answer": "... #### 72"}`` object per line, checked against the SHA-256 published
with them before any server starts. ``datasetPath`` / ``fewshotPath`` point at other files instead.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from spx.api.base import CamelModel, FiniteFloat
from spx.api.serving import ArmVariant

ACCURACY_RESULT_SCHEMA_VERSION: Final = "spx.dev/accuracy-result/v1"

#: SHA-256 of GSM8K's ``test.jsonl`` (1,319 lines) and ``train.jsonl`` (7,473 lines) as published in
#: openai/grade-school-math ``grade_school_math/data/``; the copies shipped in ``spx/data/gsm8k/`` must match.
GSM8K_TEST_SHA256: Final = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
GSM8K_TRAIN_SHA256: Final = "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"
#: The seed's GSM8K settings (the seed PR's accuracy check: 5-shot chat, greedy, seed 123, 32 in flight).
SEED_GSM8K_SEED: Final = 123


def _thinking_off() -> dict[str, Any]:
    return {"thinking": False}


class AccuracySpec(CamelModel):
    """``spec.accuracy``: GSM8K on the main and split servers, and the bound on the split's drop.

    ``num_fewshot`` examples are the first lines of the few-shot file (deterministic); ``limit`` asks
    only the first N questions (``None``: all). Unset paths mean the GSM8K files shipped with spx,
    always checked against :data:`GSM8K_TEST_SHA256` / :data:`GSM8K_TRAIN_SHA256`; a file of one's
    own is checked against ``dataset_sha256`` / ``fewshot_sha256`` when they are set. The defaults are
    the seed's run: 5-shot, greedy, seed 123, ``max_tokens`` 1024, 32 in flight, thinking off.
    ``chat_template_kwargs`` go to the server's chat template (DeepSeek-V3.1+/V4 templates read
    ``thinking``; default off). ``max_request_errors``: more requests failing (HTTP error, timeout)
    than this makes the run fail instead of scoring them as wrong.

    Gate: the split arms' mean accuracy may be at most ``max_drop_points`` percentage points below
    the main arms' mean (default 1.0: three runs of main on H20 ranged 96.36–96.97 %, 0.6 points).
    """

    dataset_path: str | None = Field(default=None, min_length=1, max_length=1024)
    """GSM8K test file (JSON lines with question and answer, .xz allowed); unset: the full test set (1,319) shipped with spx."""
    fewshot_path: str | None = Field(default=None, min_length=1, max_length=1024)
    """File the few-shot examples are taken from (its first lines); unset: GSM8K's train set shipped with spx."""
    dataset_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of the (decompressed) test file; a file that differs is refused. Unset: the shipped file is checked against GSM8K's published hash."""
    fewshot_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of the (decompressed) few-shot file; a file that differs is refused."""
    num_fewshot: int = Field(default=5, ge=0, le=16)
    """Few-shot examples in each prompt."""
    limit: int | None = Field(default=None, gt=0)
    """Only the first N questions; unset: all."""
    max_tokens: int = Field(default=1024, gt=0, le=65536)
    """Largest number of tokens generated per answer."""
    temperature: FiniteFloat = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature (0: greedy)."""
    seed: int = Field(default=SEED_GSM8K_SEED, ge=0)
    """Sampling seed (default 123, the seed's)."""
    concurrency: int = Field(default=32, gt=0, le=1024)
    """Requests in flight per arm."""
    chat_template_kwargs: dict[str, Any] = Field(default_factory=_thinking_off)
    """Keyword arguments of the chat template (default: thinking off)."""
    system_prompt: str | None = Field(default=None, max_length=8192)
    """Optional system message."""
    request_timeout_seconds: FiniteFloat = Field(default=600.0, gt=0.0, le=24 * 3600.0)
    """Seconds one request may take."""
    max_request_errors: int = Field(default=0, ge=0)
    """Requests that may fail (HTTP error, timeout) before the arm's run counts as failed."""
    arms: list[str] | None = Field(default=None, min_length=1, max_length=16)
    """Names of the serving arms to score; unset: every arm."""
    max_drop_points: FiniteFloat = Field(default=1.0, ge=0.0, le=100.0)
    """Largest allowed drop of the split arms' mean accuracy below the main arms', in percentage points."""


# --------------------------------------------------------------------------- result document


class AccuracyRun(CamelModel):
    """GSM8K on one arm's server.

    ``accuracy_pct`` = correct / total × 100 over the questions asked; ``no_answer`` replies held no
    number; ``request_errors`` requests failed (scored wrong). ``replies_file`` (JSONL) keeps every
    question's reply, extracted answer and score.
    """

    arm: str
    variant: ArmVariant
    threshold: str
    correct: int = Field(default=0, ge=0)
    total: int = Field(default=0, ge=0)
    no_answer: int = Field(default=0, ge=0)
    request_errors: int = Field(default=0, ge=0)
    accuracy_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    replies_file: str | None = None
    wall_seconds: float | None = Field(default=None, ge=0)
    error: str | None = None


class AccuracyResult(CamelModel):
    """The accuracy bench's output (``accuracy-result.json``), rewritten after every run."""

    schema_version: Literal["spx.dev/accuracy-result/v1"] = ACCURACY_RESULT_SCHEMA_VERSION
    experiment: str = "local"
    """metadata.name of the experiment it belongs to."""
    spec_hash: str | None = None
    """Hash of the experiment's spec (``spx.api.spec.spec_hash``): a bench document of another spec is refused."""
    run_id: str | None = None
    """The run it belongs to (a run folder's or a Job's id)."""
    accuracy: AccuracySpec
    dataset_sha256: str | None = None
    runs: list[AccuracyRun] = Field(default_factory=list)
    complete: bool = False
    failures: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- status


class AccuracyRunStatus(CamelModel):
    """One arm's GSM8K score in the status."""

    arm: str
    """Arm name."""
    variant: ArmVariant
    """main or split."""
    correct: int = Field(ge=0)
    """Questions answered correctly."""
    total: int = Field(ge=0)
    """Questions asked."""
    accuracy_pct: float | None = None
    """correct / total in percent."""
    error: str | None = None
    """Why the run failed."""


class AccuracyStatus(CamelModel):
    """``status.accuracy``: per-arm scores, the variants' means, the split's drop and its gate.

    ``drop_points`` = main mean − split mean (positive: the split is worse), bounded by the gate's
    ``max_drop_points`` (``spec.accuracy.maxDropPoints``); ``gate_passed`` is unset (inconclusive)
    when a variant has no finished run.
    """

    runs: list[AccuracyRunStatus] = Field(default_factory=list)
    """Each scored arm's result."""
    main_pct: float | None = None
    """Mean accuracy of the main arms, percent."""
    split_pct: float | None = None
    """Mean accuracy of the split arms, percent."""
    drop_points: float | None = None
    """mainPct − splitPct in percentage points (positive: the split is worse)."""
    max_drop_points: float | None = None
    """The gate's bound on dropPoints (spec.accuracy.maxDropPoints)."""
    gate_passed: bool | None = None
    """The accuracy gate's result; unset: inconclusive."""
    reasons: list[str] = Field(default_factory=list)
    """Why the gate passed, failed or could not decide."""
