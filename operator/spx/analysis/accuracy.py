"""GSM8K scoring and the accuracy gate. Pure: no I/O.

A reply's answer is the first number after its last ``####`` (GSM8K's answer marker, which the
few-shot turns teach), else the last number anywhere in the reply; no number means no answer
(scored wrong). Numbers are read as exact decimals: thousands separators (``1,234``), a currency
sign or unit around them (``$18``, ``18 dollars``, ``18%``), a leading minus (``-3``, also the
Unicode minus ``−``) and decimals (``3.50`` equals ``3.5``) are understood, so ``18.00`` scores
against a gold ``18``. A hyphen between two numbers (``3-5``) is not a minus sign.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from spx.api.accuracy import AccuracyResult, AccuracyRunStatus, AccuracySpec, AccuracyStatus
from spx.api.serving import ServingArmSpec
from spx.vocabulary import ARM_VARIANTS

ANSWER_MARKER = "####"

_NUMBER = re.compile(
    r"(?<![0-9A-Za-z_.])"  # not inside a word or another number
    r"([-−])?"  # minus (ASCII or Unicode), only where no digit/letter precedes it
    r"\$?"
    r"((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
)


def _to_decimal(match: re.Match[str]) -> Decimal | None:
    sign = "-" if match.group(1) else ""
    digits = match.group(2).replace(",", "")
    try:
        return Decimal(sign + digits)
    except InvalidOperation:  # pragma: no cover - the pattern only admits valid decimals
        return None


def numbers(text: str) -> list[Decimal]:
    """Every number in ``text``, in order, as exact decimals."""
    out = [_to_decimal(m) for m in _NUMBER.finditer(text)]
    return [d for d in out if d is not None]


def extract_answer(reply: str) -> Decimal | None:
    """The reply's answer: the first number after the last ``####``, else the last number; else ``None``."""
    idx = reply.rfind(ANSWER_MARKER)
    if idx >= 0:
        match = _NUMBER.search(reply, idx + len(ANSWER_MARKER))
        if match is not None:
            return _to_decimal(match)
    found = numbers(reply)
    return found[-1] if found else None


def parse_gold(answer: str) -> Decimal:
    """The gold number of a GSM8K ``answer`` field (``"... #### 72"``).

    Raises:
        ValueError: no ``####`` followed by a number.
    """
    idx = answer.rfind(ANSWER_MARKER)
    match = _NUMBER.search(answer, idx + len(ANSWER_MARKER)) if idx >= 0 else None
    value = _to_decimal(match) if match is not None else None
    if value is None:
        raise ValueError(f"GSM8K answer has no '#### <number>': {answer[-80:]!r}")
    return value


def is_correct(reply: str, gold: Decimal) -> bool:
    """Whether the reply's extracted answer equals the gold number exactly (``18.0 == 18``)."""
    got = extract_answer(reply)
    return got is not None and got == gold


def accuracy_pct(correct: int, total: int) -> float | None:
    """correct / total × 100, ``None`` when nothing was asked."""
    return correct / total * 100.0 if total else None


def accuracy_arm_names(arms: Sequence[ServingArmSpec], spec: AccuracySpec) -> list[str]:
    """The serving arms GSM8K runs on, in run order: ``spec.arms``, or the first main and the first
    split arm.

    Raises:
        ValueError: a name that is not a serving arm, or the chosen arms lack a main or a split arm.
    """
    names = [a.name for a in arms]
    if spec.arms is None:
        chosen = {next(a.name for a in arms if a.variant == v) for v in ARM_VARIANTS if any(a.variant == v for a in arms)}
    else:
        unknown = [n for n in spec.arms if n not in names]
        if unknown:
            raise ValueError(f"accuracy.arms {unknown} are not arms of serving.arms {names}")
        chosen = set(spec.arms)
    variants = {a.variant for a in arms if a.name in chosen}
    if variants != set(ARM_VARIANTS):
        raise ValueError(
            f"accuracy.arms must include a main and a split arm to compare (chosen: {sorted(chosen)}, "
            f"variants {sorted(variants)})"
        )
    return [n for n in names if n in chosen]


def gate(main_pct: float | None, split_pct: float | None, max_drop_points: float) -> tuple[bool | None, float | None, str]:
    """``(passed, drop_points, reason)``: the split may be at most ``max_drop_points`` below main."""
    if main_pct is None or split_pct is None:
        missing = "main" if main_pct is None else "split"
        return None, None, f"GSM8K: no finished {missing} run; cannot compare"
    drop = main_pct - split_pct
    ok = drop <= max_drop_points
    return ok, drop, (
        f"GSM8K: split {split_pct:.2f}% vs main {main_pct:.2f}% (drop {drop:+.2f} points, "
        f"≤ {max_drop_points:.2f} allowed): {'ok' if ok else 'FAIL'}"
    )


def summarize(result: AccuracyResult) -> AccuracyStatus:
    """``status.accuracy`` from an accuracy result document (failed runs listed, not averaged)."""
    runs = [
        AccuracyRunStatus(
            arm=r.arm, variant=r.variant, correct=r.correct, total=r.total, accuracy_pct=r.accuracy_pct, error=r.error
        )
        for r in result.runs
    ]

    def variant_mean(variant: str) -> float | None:
        vals = [r.accuracy_pct for r in result.runs if r.variant == variant and r.error is None and r.accuracy_pct is not None]
        return sum(vals) / len(vals) if vals else None

    main_pct, split_pct = variant_mean("main"), variant_mean("split")
    passed, drop, reason = gate(main_pct, split_pct, result.accuracy.max_drop_points)
    reasons = [reason] + [f"GSM8K on {f}" for f in result.failures]
    return AccuracyStatus(
        runs=runs, main_pct=main_pct, split_pct=split_pct, drop_points=drop,
        max_drop_points=result.accuracy.max_drop_points, gate_passed=passed, reasons=reasons,
    )


def max_model_len_arg(server_args: Sequence[str]) -> int | None:
    """``--max-model-len`` from a ``vllm serve`` argv (``--max-model-len N`` or ``=N``); ``None`` if absent
    or not an integer (vLLM also accepts ``1k``-style values: those are read as ``k``=1000, ``K``=1024)."""
    raw: str | None = None
    for i, arg in enumerate(server_args):
        if arg == "--max-model-len" and i + 1 < len(server_args):
            raw = server_args[i + 1]
        elif arg.startswith("--max-model-len="):
            raw = arg.split("=", 1)[1]
    if raw is None:
        return None
    raw = raw.strip()
    scale = {"k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}.get(raw[-1:], 1)
    digits = raw[:-1] if scale != 1 else raw
    try:
        return int(float(digits) * scale)
    except ValueError:
        return None


def max_tokens_error(max_tokens: int, max_model_len: int | None, where: str) -> str | None:
    """Why every GSM8K request would be refused for length, or ``None``.

    A request needs its prompt plus ``max_tokens`` within the server's ``--max-model-len``
    (vLLM refuses it with HTTP 400 otherwise, ``vllm/entrypoints/openai/serving_engine.py``), so
    ``max_tokens ≥ max_model_len`` can never fit. ``where`` names where ``max_model_len`` came from.
    """
    if max_model_len is None or max_tokens < max_model_len:
        return None
    return (
        f"spec.accuracy.maxTokens is {max_tokens} but {where} is {max_model_len}: every GSM8K request (prompt + "
        f"maxTokens) would be refused for length; lower spec.accuracy.maxTokens well below {max_model_len} (the "
        f"few-shot prompt needs room too) or raise --max-model-len in spec.serving.extraArgs"
    )


_LENGTH_REFUSAL = ("maximum context length", "max_model_len", "max-model-len", "maximum model length", "too long")


def length_refusal(error: str) -> bool:
    """Whether a request error is the server refusing the request for its length (HTTP 400 with vLLM's
    "This model's maximum context length is …" message or a mention of ``max_model_len``)."""
    low = error.lower()
    return "400" in low and any(m in low for m in _LENGTH_REFUSAL)
