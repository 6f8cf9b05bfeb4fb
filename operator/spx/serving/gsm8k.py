"""GSM8K client: ask a running vLLM server the GSM8K test questions and score the replies.

Method (``spec.accuracy``, the seed's): each question is sent to ``/v1/chat/completions`` as a
multi-turn chat whose first ``num_fewshot`` (5) user/assistant turns are worked examples (the first
lines of the few-shot file, GSM8K's train split; calculator annotations ``<<48/2=24>>`` removed, each
ending in ``#### <answer>``), then the question as the last user turn. Greedy (``temperature`` 0),
``seed`` 123, ``max_tokens`` 1024, ``chat_template_kwargs`` from the spec (``{"thinking": false}`` by
default), ``concurrency`` (32) requests in flight from a thread pool. Scoring:
:func:`spx.analysis.accuracy.extract_answer` (the number after ``####``, else the last number).

The data set ships with spx (``spx/data/gsm8k/``: openai/grade-school-math's ``test.jsonl`` (1,319
questions) and ``train.jsonl``, xz-compressed, MIT licence in ``LICENSE`` there), so a run needs no
route to a data hub. Every file is checked against its SHA-256 (of the decompressed JSONL, as
published with the data set) before any server starts; a file that differs is refused, naming both
hashes. Before the questions, the server's ``--max-model-len`` (``GET /v1/models``) and the first
question's answer are checked, so a ``maxTokens`` the server refuses for length is one clear error
naming both fields, not 1,319 failed requests.

HTTP is stdlib ``urllib``; nothing here imports vLLM or torch.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from spx.analysis.accuracy import accuracy_pct, extract_answer, length_refusal, max_tokens_error, parse_gold
from spx.api.accuracy import GSM8K_TEST_SHA256, GSM8K_TRAIN_SHA256, AccuracyRun, AccuracySpec
from spx.api.serving import ArmVariant
from spx.files import claim

Message = dict[str, str]
PostFn = Callable[[str, dict[str, Any], float], dict[str, Any]]

_CALCULATOR = re.compile(r"<<[^<>]*>>")
#: The GSM8K files shipped in the package (``pyproject.toml`` package-data).
DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "gsm8k"
SHIPPED_TEST = DATA_DIR / "test.jsonl.xz"
SHIPPED_TRAIN = DATA_DIR / "train.jsonl.xz"


class LengthError(ValueError):
    """The server refuses GSM8K's requests for length (``maxTokens`` vs ``--max-model-len``)."""


@dataclass(frozen=True)
class Gsm8kItem:
    """One GSM8K problem: question, reference solution (``... #### 72``) and its gold number."""

    question: str
    answer: str
    gold: Decimal


@dataclass(frozen=True)
class Gsm8kData:
    """The questions to ask, the few-shot examples, and the test file's SHA-256."""

    items: list[Gsm8kItem]
    fewshot: list[Gsm8kItem]
    sha256: str
    path: str


def read_bytes(path: Path) -> bytes:
    """A JSONL file's bytes, decompressed when its name ends in ``.xz``.

    Raises:
        OSError: unreadable; ``lzma.LZMAError``: a corrupt ``.xz``.
    """
    raw = path.read_bytes()
    return lzma.decompress(raw) if path.suffix == ".xz" else raw


def _read_items(path: Path, expected_sha256: str | None, field: str, limit: int | None = None) -> tuple[list[Gsm8kItem], str]:
    """Parse a GSM8K JSONL file; returns the items (first ``limit``) and the whole file's SHA-256.

    Raises:
        OSError: the file cannot be read.
        ValueError: its SHA-256 is not ``expected_sha256`` (naming both and ``field``), or a line is not
            ``{"question": str, "answer": "... #### n"}`` (naming the line).
    """
    try:
        raw = read_bytes(path)
    except lzma.LZMAError as err:
        raise ValueError(f"{path}: not a valid .xz file ({err})") from None
    digest = hashlib.sha256(raw).hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        raise ValueError(
            f"{path} has SHA-256 {digest}, but {field} is {expected_sha256}: refusing a GSM8K file that is not "
            f"the one the spec names (set {field} to the file's hash if you mean to use it)"
        )
    items: list[Gsm8kItem] = []
    for lineno, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            question, answer = obj["question"], obj["answer"]
            if not isinstance(question, str) or not isinstance(answer, str):
                raise TypeError("question and answer must be strings")
            items.append(Gsm8kItem(question=question, answer=answer, gold=parse_gold(answer)))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{lineno}: not a GSM8K record ({type(err).__name__}: {str(err)[:200]})") from None
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise ValueError(f"{path}: no GSM8K records")
    return items, digest


def load_gsm8k(spec: AccuracySpec) -> Gsm8kData:
    """Read the test questions (``limit``) and ``num_fewshot`` examples, each checked against its SHA-256.

    ``datasetPath`` / ``fewshotPath`` unset: the files shipped with spx, checked against GSM8K's
    published hashes. Set: checked against ``datasetSha256`` / ``fewshotSha256`` when those are set.

    Raises:
        OSError: a file is missing (naming the field to set).
        ValueError: a SHA-256 mismatch (naming both hashes), malformed records, or fewer few-shot
            examples than asked.
    """
    test_path = Path(spec.dataset_path) if spec.dataset_path else SHIPPED_TEST
    shot_path = Path(spec.fewshot_path) if spec.fewshot_path else SHIPPED_TRAIN
    test_sha = spec.dataset_sha256 if spec.dataset_path else (spec.dataset_sha256 or GSM8K_TEST_SHA256)
    shot_sha = spec.fewshot_sha256 if spec.fewshot_path else (spec.fewshot_sha256 or GSM8K_TRAIN_SHA256)
    for p, field in ((test_path, "datasetPath"), (shot_path, "fewshotPath"))[: 2 if spec.num_fewshot else 1]:
        if not p.is_file():
            raise OSError(
                f"GSM8K file {p} not found: set spec.accuracy.{field} to where it is, or leave it unset for the "
                f"GSM8K files shipped with spx ({DATA_DIR})"
            )
    items, digest = _read_items(test_path, test_sha, "spec.accuracy.datasetSha256", spec.limit)
    fewshot: list[Gsm8kItem] = []
    if spec.num_fewshot:
        fewshot, _ = _read_items(shot_path, shot_sha, "spec.accuracy.fewshotSha256", spec.num_fewshot)
        if len(fewshot) < spec.num_fewshot:
            raise ValueError(f"{shot_path} has {len(fewshot)} examples, numFewshot is {spec.num_fewshot}")
    return Gsm8kData(items=items, fewshot=fewshot, sha256=digest, path=str(test_path))


def clean_solution(answer: str) -> str:
    """A GSM8K solution as an assistant turn: calculator annotations removed, ``#### n`` kept."""
    return _CALCULATOR.sub("", answer).strip()


def build_messages(question: str, fewshot: list[Gsm8kItem], system_prompt: str | None = None) -> list[Message]:
    """The multi-turn chat for one question: optional system turn, then per example a user turn
    (its question) and an assistant turn (its cleaned solution), then the question."""
    messages: list[Message] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    for shot in fewshot:
        messages.append({"role": "user", "content": shot.question.strip()})
        messages.append({"role": "assistant", "content": clean_solution(shot.answer)})
    messages.append({"role": "user", "content": question.strip()})
    return messages


def request_body(model: str, messages: list[Message], spec: AccuracySpec) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body: greedy, seeded, ``max_tokens``, ``chat_template_kwargs``."""
    return {
        "model": model,
        "messages": messages,
        "temperature": spec.temperature,
        "seed": spec.seed,
        "max_tokens": spec.max_tokens,
        "chat_template_kwargs": dict(spec.chat_template_kwargs),
        "stream": False,
    }


def post_json(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST JSON, return the decoded JSON reply.

    Raises:
        urllib.error.URLError / OSError / ValueError: transport errors, non-2xx, non-JSON.
    """
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        reply: dict[str, Any] = json.loads(resp.read())
    return reply


def http_error_text(err: BaseException) -> str:
    """An HTTP error with the server's own message (the body of a 4xx), bounded to 500 characters."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, urllib.error.HTTPError):
        try:
            body = err.read().decode(errors="replace")
        except OSError:
            body = ""
        if body:
            text += f": {body[:500]}"
    return text


def server_max_model_len(base_url: str, model: str, timeout: float = 30.0) -> int | None:
    """``max_model_len`` of ``model`` as the server's ``GET /v1/models`` reports it (vLLM's
    ``ModelCard``); ``None`` when the server does not say."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/v1/models", timeout=timeout) as resp:
            listing = json.loads(resp.read())
        for card in listing.get("data", []):
            if card.get("id") == model and isinstance(card.get("max_model_len"), int):
                return int(card["max_model_len"])
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return None


def reply_text(reply: dict[str, Any]) -> str:
    """The assistant message of a chat completion (``""`` when it has no content).

    Raises:
        ValueError: not a chat completion.
    """
    try:
        content = reply["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError) as err:
        raise ValueError(f"not a chat completion: {str(reply)[:200]}") from err
    return content if isinstance(content, str) else ""


def _with_first(first: dict[str, Any], futures: list[Any]) -> Any:
    """The first question's record, then the others' as they complete."""
    yield first
    for fut in as_completed(futures):
        yield fut.result()


@dataclass
class _Tally:
    """The replies counted so far (the main thread's, as futures complete)."""

    correct: int = 0
    no_answer: int = 0
    errors: int = 0
    done: int = 0
    first_error: str | None = None

    def add(self, rec: dict[str, Any]) -> None:
        self.done += 1
        if "error" in rec:
            self.errors += 1
            self.first_error = self.first_error or rec["error"]
        elif rec["correct"]:
            self.correct += 1
        elif rec["extracted"] is None:
            self.no_answer += 1


def _asker(url: str, model: str, spec: AccuracySpec, data: Gsm8kData, post: PostFn) -> Callable[[int, Gsm8kItem], dict[str, Any]]:
    """``ask(index, item)``: one question's reply record (``error`` instead of a reply when the request failed)."""

    def ask(index: int, item: Gsm8kItem) -> dict[str, Any]:
        body = request_body(model, build_messages(item.question, data.fewshot, spec.system_prompt), spec)
        try:
            text = reply_text(post(url, body, spec.request_timeout_seconds))
        except (urllib.error.URLError, OSError, ValueError) as err:
            return {"index": index, "gold": str(item.gold), "error": http_error_text(err)}
        got = extract_answer(text)
        return {
            "index": index, "gold": str(item.gold), "extracted": None if got is None else str(got),
            "correct": got is not None and got == item.gold, "reply": text,
        }

    return ask


def _first_refused(spec: AccuracySpec, data: Gsm8kData, max_len: int | None, first: dict[str, Any]) -> str | None:
    """Why the run ends after its first question: refused for length (naming both fields); None if it was not."""
    if "error" in first and length_refusal(first["error"]):
        return (
            f"the server refused the first GSM8K question for length: spec.accuracy.maxTokens {spec.max_tokens} "
            f"plus the {len(data.fewshot)}-shot prompt exceeds the server's --max-model-len"
            f"{'' if max_len is None else f' {max_len}'}; lower spec.accuracy.maxTokens or numFewshot, or raise "
            f"--max-model-len in spec.serving.extraArgs. The server said: {first['error'][:400]}"
        )
    return None


def run_gsm8k(
    base_url: str,
    model: str,
    spec: AccuracySpec,
    data: Gsm8kData,
    replies_path: Path,
    *,
    arm: str,
    variant: ArmVariant,
    threshold: str,
    log: Callable[[str], None] = print,
    post: PostFn = post_json,
) -> AccuracyRun:
    """Ask every question of ``data`` against ``base_url``; score; keep each reply in ``replies_path``.

    First the server's ``--max-model-len`` against ``maxTokens`` and the first question alone: a
    length refusal ends the run at once with an ``error`` naming both fields. Then the other
    questions, ``concurrency`` in flight. Never raises for request failures: they are counted
    (scored wrong) and, beyond ``max_request_errors``, make the run's ``error``.
    """
    replies_path.parent.mkdir(parents=True, exist_ok=True)
    total, t0 = len(data.items), time.monotonic()
    ask = _asker(base_url.rstrip("/") + "/v1/chat/completions", model, spec, data, post)
    # Up front: a maxTokens the server's context cannot hold is one error naming both fields.
    max_len = server_max_model_len(base_url, model)
    why = max_tokens_error(spec.max_tokens, max_len, "the server's --max-model-len (GET /v1/models)")
    first: dict[str, Any] = {}
    if why is None:
        first = ask(0, data.items[0])
        why = _first_refused(spec, data, max_len, first)
    if why is not None:
        log(f"GSM8K on {arm}: {why}")
        return AccuracyRun(arm=arm, variant=variant, threshold=threshold, total=total, error=why,
                           wall_seconds=time.monotonic() - t0)
    tally = _Tally()
    with open(claim(replies_path), "w", encoding="utf-8") as out, ThreadPoolExecutor(max_workers=spec.concurrency) as pool:
        futures = [pool.submit(ask, i, item) for i, item in enumerate(data.items) if i > 0]
        for rec in _with_first(first, futures):
            out.write(json.dumps(rec) + "\n")
            tally.add(rec)
            if tally.done % max(1, total // 10) == 0 or tally.done == total:
                log(f"GSM8K on {arm}: {tally.done}/{total} answered, {tally.correct} correct, {tally.errors} errors")
    run = AccuracyRun(
        arm=arm, variant=variant, threshold=threshold,
        correct=tally.correct, total=total, no_answer=tally.no_answer, request_errors=tally.errors,
        accuracy_pct=accuracy_pct(tally.correct, total), replies_file=str(replies_path),
        wall_seconds=time.monotonic() - t0,
    )
    if tally.errors > spec.max_request_errors:
        run.error = (f"{tally.errors} of {total} GSM8K requests failed (maxRequestErrors {spec.max_request_errors}); "
                     f"first: {tally.first_error}")
    return run
