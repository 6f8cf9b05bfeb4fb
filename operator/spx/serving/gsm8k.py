"""GSM8K client: ask a running vLLM server the GSM8K test questions and score the replies.

Method (``spec.accuracy``): each question is sent to ``/v1/chat/completions`` as a multi-turn chat
whose first ``num_fewshot`` (5) user/assistant turns are worked examples (the first lines of the
few-shot file, GSM8K's train split; calculator annotations ``<<48/2=24>>`` removed, each ending in
``#### <answer>``), then the question as the last user turn. Greedy (``temperature`` 0), fixed
``seed``, ``max_tokens`` 1024, ``chat_template_kwargs`` from the spec (``{"thinking": false}`` by
default), ``concurrency`` (32) requests in flight from a thread pool. Scoring:
:func:`spx.analysis.accuracy.extract_answer` (the number after ``####``, else the last number).

The dataset is a local file baked into the bench image (``docs/serving.md``): JSONL, one
``{"question", "answer"}`` per line (openai/grade-school-math's ``test.jsonl`` and ``train.jsonl``).
HTTP is stdlib ``urllib``; nothing here imports vLLM or torch.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from spx.analysis.accuracy import accuracy_pct, extract_answer, parse_gold
from spx.api.accuracy import AccuracyRun, AccuracySpec
from spx.api.serving import ArmVariant

Message = dict[str, str]
PostFn = Callable[[str, dict[str, Any], float], dict[str, Any]]

_CALCULATOR = re.compile(r"<<[^<>]*>>")


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


def _read_items(path: Path, limit: int | None = None) -> tuple[list[Gsm8kItem], str]:
    """Parse a GSM8K JSONL file; returns the items (first ``limit``) and the whole file's SHA-256.

    Raises:
        OSError: the file cannot be read.
        ValueError: a line is not ``{"question": str, "answer": "... #### n"}`` (naming the line).
    """
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
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
            raise ValueError(f"{path}:{lineno}: not a GSM8K record ({type(err).__name__}: {err})") from None
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise ValueError(f"{path}: no GSM8K records")
    return items, digest


def load_gsm8k(spec: AccuracySpec) -> Gsm8kData:
    """Read the test questions (``limit``) and ``num_fewshot`` examples; check ``dataset_sha256``.

    Raises:
        OSError: a file is missing (message says where the bench image keeps them).
        ValueError: malformed records, a SHA-256 mismatch, or fewer few-shot examples than asked.
    """
    test_path, shot_path = Path(spec.dataset_path), Path(spec.fewshot_path)
    for p in (test_path, shot_path) if spec.num_fewshot else (test_path,):
        if not p.is_file():
            raise OSError(
                f"GSM8K file {p} not found: the bench image bakes GSM8K under /opt/spx/data/gsm8k/ "
                f"(docs/serving.md); set spec.accuracy.datasetPath/fewshotPath to where it is"
            )
    items, digest = _read_items(test_path, spec.limit)
    if spec.dataset_sha256 is not None and digest != spec.dataset_sha256:
        raise ValueError(f"{test_path} has SHA-256 {digest}, spec.accuracy.datasetSha256 pins {spec.dataset_sha256}")
    fewshot: list[Gsm8kItem] = []
    if spec.num_fewshot:
        fewshot, _ = _read_items(shot_path, spec.num_fewshot)
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

    Never raises for request failures: they are counted (scored wrong) and, beyond
    ``max_request_errors``, make the run's ``error``.
    """
    url = base_url.rstrip("/") + "/v1/chat/completions"
    replies_path.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    correct = no_answer = errors = 0
    first_error: str | None = None
    total = len(data.items)
    t0 = time.monotonic()

    def ask(index: int, item: Gsm8kItem) -> dict[str, Any]:
        body = request_body(model, build_messages(item.question, data.fewshot, spec.system_prompt), spec)
        try:
            text = reply_text(post(url, body, spec.request_timeout_seconds))
        except (urllib.error.URLError, OSError, ValueError) as err:
            return {"index": index, "gold": str(item.gold), "error": f"{type(err).__name__}: {err}"}
        got = extract_answer(text)
        return {
            "index": index, "gold": str(item.gold), "extracted": None if got is None else str(got),
            "correct": got is not None and got == item.gold, "reply": text,
        }

    done = 0
    with open(replies_path, "w", encoding="utf-8") as out, ThreadPoolExecutor(max_workers=spec.concurrency) as pool:
        futures = [pool.submit(ask, i, item) for i, item in enumerate(data.items)]
        for fut in as_completed(futures):
            rec = fut.result()
            with lock:
                out.write(json.dumps(rec) + "\n")
                done += 1
                if "error" in rec:
                    errors += 1
                    first_error = first_error or rec["error"]
                elif rec["correct"]:
                    correct += 1
                elif rec["extracted"] is None:
                    no_answer += 1
                if done % max(1, total // 10) == 0 or done == total:
                    log(f"GSM8K on {arm}: {done}/{total} answered, {correct} correct, {errors} errors")
    run = AccuracyRun(
        arm=arm, variant=variant, threshold=threshold,
        correct=correct, total=total, no_answer=no_answer, request_errors=errors,
        accuracy_pct=accuracy_pct(correct, total), replies_file=str(replies_path),
        wall_seconds=time.monotonic() - t0,
    )
    if errors > spec.max_request_errors:
        run.error = (
            f"{errors} of {total} GSM8K requests failed (maxRequestErrors {spec.max_request_errors}); first: {first_error}"
        )
    return run
