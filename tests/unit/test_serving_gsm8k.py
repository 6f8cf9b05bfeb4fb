"""GSM8K as the seed ran it (spx.serving.gsm8k, spx.analysis.accuracy): the full test set shipped with
spx and its hash, the scorer on the data set's own answers, and length errors up front."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from spx.analysis.accuracy import extract_answer, length_refusal, max_model_len_arg, max_tokens_error
from spx.api.accuracy import GSM8K_TEST_SHA256, GSM8K_TRAIN_SHA256, AccuracySpec
from spx.api.spec import ExperimentSpec
from spx.serving.ab import run_vllm_benchmarks
from spx.serving.gsm8k import DATA_DIR, SHIPPED_TEST, SHIPPED_TRAIN, load_gsm8k, run_gsm8k


def test_the_full_test_set_ships_with_its_licence_and_hashes() -> None:
    assert sorted(p.name for p in DATA_DIR.iterdir()) == ["LICENSE", "test.jsonl.xz", "train.jsonl.xz"]
    assert "MIT License" in (DATA_DIR / "LICENSE").read_text() and "OpenAI" in (DATA_DIR / "LICENSE").read_text()
    test = lzma.decompress(SHIPPED_TEST.read_bytes())
    assert hashlib.sha256(test).hexdigest() == GSM8K_TEST_SHA256
    assert hashlib.sha256(lzma.decompress(SHIPPED_TRAIN.read_bytes())).hexdigest() == GSM8K_TRAIN_SHA256
    assert len(test.decode().splitlines()) == 1319


def test_default_spec_loads_all_1319_questions_and_5_shots_from_the_shipped_files() -> None:
    data = load_gsm8k(AccuracySpec())
    assert len(data.items) == 1319 and len(data.fewshot) == 5
    assert data.sha256 == GSM8K_TEST_SHA256 and data.path == str(SHIPPED_TEST)
    # the first test problem (Janet's ducks) and its gold answer
    assert data.items[0].question.startswith("Janet’s ducks lay 16 eggs per day.") and data.items[0].gold == 18


def test_the_data_sets_own_answers_score_100_percent() -> None:
    data = load_gsm8k(AccuracySpec(num_fewshot=0))
    correct = sum(extract_answer(item.answer) == item.gold for item in data.items)
    assert correct == 1319
    train = load_gsm8k(AccuracySpec(num_fewshot=0, dataset_path=str(SHIPPED_TRAIN)))
    assert sum(extract_answer(i.answer) == i.gold for i in train.items) == 7473


@pytest.mark.parametrize(
    ("reply_of", "expected"),
    [
        (lambda a: a.split("####")[0] + "#### " + a.split("####")[1].strip() + ".00", 1319),  # 18.00 scores as 18
        (lambda a: a.split("####")[0].rstrip() + "\nThe answer is " + a.split("####")[1].strip() + ".", 1319),
        (lambda a: "I do not know.", 0),
    ],
)
def test_scorer_on_rewritten_reference_answers(reply_of: Any, expected: int) -> None:
    data = load_gsm8k(AccuracySpec(num_fewshot=0))
    assert sum(extract_answer(reply_of(i.answer)) == i.gold for i in data.items) == expected


def test_a_file_whose_hash_differs_is_refused_naming_both(tmp_path: Path) -> None:
    lines = lzma.decompress(SHIPPED_TEST.read_bytes()).decode().splitlines()
    edited = tmp_path / "test.jsonl"
    edited.write_text("\n".join(lines[:-1]) + "\n")  # one question dropped
    digest = hashlib.sha256(edited.read_bytes()).hexdigest()
    with pytest.raises(ValueError) as err:
        load_gsm8k(AccuracySpec(dataset_path=str(edited), dataset_sha256=GSM8K_TEST_SHA256))
    assert digest in str(err.value) and GSM8K_TEST_SHA256 in str(err.value) and "datasetSha256" in str(err.value)
    # the shipped file pinned to another hash is refused too
    with pytest.raises(ValueError, match=GSM8K_TEST_SHA256):
        load_gsm8k(AccuracySpec(dataset_sha256="0" * 64))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], None), (["--max-model-len", "512"], 512), (["--max-model-len=4096", "-O0"], 4096),
        (["--max-model-len", "32k"], 32000), (["--max-model-len", "1K"], 1024), (["--max-model-len", "x"], None),
    ],
)
def test_max_model_len_arg(args: list[str], expected: int | None) -> None:
    assert max_model_len_arg(args) == expected


def test_max_tokens_error_names_both_fields() -> None:
    assert max_tokens_error(1024, None, "x") is None and max_tokens_error(256, 512, "x") is None
    msg = max_tokens_error(1024, 512, "--max-model-len in spec.serving.extraArgs")
    assert msg is not None and "spec.accuracy.maxTokens is 1024" in msg and "--max-model-len" in msg and "512" in msg


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("HTTPError: HTTP Error 400: Bad Request: {\"error\": {\"message\": \"This model's maximum context length is 512 "
         "tokens. However, you requested 1024 output tokens\"}}", True),
        ("HTTPError: HTTP Error 400: Bad Request: max_tokens must be at most max_model_len", True),
        ("HTTPError: HTTP Error 500: Internal Server Error", False),
        ("URLError: <urlopen error [Errno 111] Connection refused>", False),
    ],
)
def test_length_refusal(error: str, expected: bool) -> None:
    assert length_refusal(error) is expected


def test_max_tokens_beyond_the_servers_max_model_len_fails_before_any_server(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate({
        "serving": {"model": "m", "points": [], "extraArgs": ["--max-model-len", "512"]},
        "accuracy": {"maxTokens": 1024}, "timeoutSeconds": 14400,
    })
    with pytest.raises(ValueError, match=r"maxTokens is 1024 but --max-model-len in spec.serving.extraArgs is 512"):
        run_vllm_benchmarks(spec, tmp_path / "out")
    assert not (tmp_path / "out" / "arms").exists()


def test_a_length_refusal_of_the_first_question_ends_the_run_at_once(tmp_path: Path) -> None:
    """``post`` stands in for vLLM's reply to an over-long request (the real server's refusal needs the
    real-server stage, tests/vllm_server); the body is vLLM's message for it."""
    asked: list[int] = []

    def post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        asked.append(len(body["messages"]))
        msg = json.dumps({"error": {"message": "This model's maximum context length is 512 tokens. However, you "
                                               "requested 1024 output tokens and your prompt contains at least 1 input tokens"}})
        raise urllib.error.HTTPError(url, 400, "Bad Request", {}, io.BytesIO(msg.encode()))  # type: ignore[arg-type]

    spec = AccuracySpec(limit=50)
    data = load_gsm8k(spec)
    run = run_gsm8k("http://127.0.0.1:1", "m", spec, data, tmp_path / "r.jsonl", arm="A1", variant="main",
                    threshold="off", log=lambda _: None, post=post)
    assert len(asked) == 1  # not 50 silent failures
    assert run.error is not None and "maxTokens 1024" in run.error and "--max-model-len" in run.error
    assert "maximum context length is 512" in run.error and run.total == 50 and run.correct == 0
