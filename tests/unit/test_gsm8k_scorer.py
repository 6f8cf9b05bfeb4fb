"""GSM8K scoring (spx.analysis.accuracy), prompt construction and dataset loading (spx.serving.gsm8k)."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from pathlib import Path

import pytest

from spx.analysis.accuracy import (
    accuracy_arm_names,
    accuracy_pct,
    extract_answer,
    gate,
    is_correct,
    numbers,
    parse_gold,
    summarize,
)
from spx.api.accuracy import AccuracyResult, AccuracyRun, AccuracySpec
from spx.api.serving import ServingArmSpec, default_arms
from spx.serving.gsm8k import Gsm8kItem, build_messages, clean_solution, load_gsm8k, reply_text, request_body

D = Decimal


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Janet sells 16 - 3 - 4 = 9 eggs.\n#### 18", D(18)),
        ("#### 72", D(72)),
        ("####72", D(72)),
        ("The answer is 1,234 dollars.", D(1234)),
        ("#### 1,000,000", D(1000000)),
        ("#### $1,234.50", D("1234.50")),
        ("It costs $18.00.", D(18)),
        ("She needs 3.5 hours in all.", D("3.5")),
        ("Half of it is .5", D("0.5")),
        ("The temperature dropped to -3 degrees.\n#### -3", D(-3)),
        ("#### −7", D(-7)),
        ("Between 3-5 items, so 5 is the most.", D(5)),
        ("The growth was 18%.", D(18)),
        ("#### 18% of the class", D(18)),
        ("He drives 60 mph for 2 hours: 120 miles.", D(120)),
        ("First 12, then 15.\n#### 12", D(12)),  # the number after ####, not the last one
        ("#### 5\nWait, recheck.\n#### 6", D(6)),  # the last marker wins
        ("We found 4 apples.\n####", D(4)),  # a marker without a number: fall back to the last number
        ("**Final answer: 42**", D(42)),
        ("\\boxed{42}", D(42)),
        ("x2 plus 3", D(3)),  # a digit inside a word is not a number
        ("3, 4, and 5 are the sides", D(5)),
        ("no number here", None),
        ("", None),
        ("#### none", None),
    ],
)
def test_extract_answer(reply: str, expected: Decimal | None) -> None:
    assert extract_answer(reply) == expected


def test_numbers_keeps_order_and_signs() -> None:
    assert numbers("from -2 to 3,000.5 then 7") == [D(-2), D("3000.5"), D(7)]


def test_decimal_equality_scores_trailing_zeros_as_correct() -> None:
    assert is_correct("#### 18.00", D(18))
    assert is_correct("so she pays $1,080.", D(1080))
    assert not is_correct("#### 17", D(18))
    assert not is_correct("I cannot tell.", D(18))
    assert not is_correct("#### 18.5", D(18))


def test_parse_gold() -> None:
    assert parse_gold("She eats 3 <<3=3>> and bakes 4.\n#### 9") == D(9)
    assert parse_gold("#### -12") == D(-12)
    assert parse_gold("#### 1,000") == D(1000)
    with pytest.raises(ValueError, match="####"):
        parse_gold("no marker 12")


def test_seed_gsm8k_percentages() -> None:
    """README: main 96.59 % (1274 of 1,319), split 96.97 % (1279)."""
    assert round(accuracy_pct(1274, 1319) or 0, 2) == 96.59
    assert round(accuracy_pct(1279, 1319) or 0, 2) == 96.97
    assert accuracy_pct(0, 0) is None


def test_gate() -> None:
    ok, drop, reason = gate(96.59, 96.97, 1.0)
    assert ok is True and drop == pytest.approx(-0.38) and "ok" in reason
    ok, drop, reason = gate(96.59, 95.0, 1.0)
    assert ok is False and drop == pytest.approx(1.59) and "FAIL" in reason
    assert gate(None, 96.0, 1.0)[0] is None
    assert gate(96.0, None, 1.0)[0] is None


def test_summarize_averages_finished_runs_per_variant() -> None:
    spec = AccuracySpec(max_drop_points=0.5)
    result = AccuracyResult(
        accuracy=spec,
        runs=[
            AccuracyRun(arm="A1", variant="main", threshold="off", correct=96, total=100, accuracy_pct=96.0),
            AccuracyRun(arm="A2", variant="main", threshold="off", correct=97, total=100, accuracy_pct=97.0),
            AccuracyRun(arm="B1", variant="split", threshold="2048", correct=95, total=100, accuracy_pct=95.0),
            AccuracyRun(arm="B2", variant="split", threshold="2048", error="server died"),
        ],
        failures=["B2: server died"],
    )
    status = summarize(result)
    assert status.main_pct == pytest.approx(96.5)
    assert status.split_pct == pytest.approx(95.0)
    assert status.drop_points == pytest.approx(1.5)
    assert status.gate_passed is False
    assert any("B2: server died" in r for r in status.reasons)


def test_accuracy_arm_names() -> None:
    arms = default_arms()
    assert accuracy_arm_names(arms, AccuracySpec()) == ["B1", "A1"]  # first split and first main, run order
    assert accuracy_arm_names(arms, AccuracySpec(arms=["B2", "A2"])) == ["A2", "B2"]
    with pytest.raises(ValueError, match="not arms"):
        accuracy_arm_names(arms, AccuracySpec(arms=["C1"]))
    with pytest.raises(ValueError, match="main and a split"):
        accuracy_arm_names(arms, AccuracySpec(arms=["A1", "A2"]))
    only = [ServingArmSpec(name="M", variant="main"), ServingArmSpec(name="S", variant="split")]
    assert accuracy_arm_names(only, AccuracySpec()) == ["M", "S"]


# --------------------------------------------------------------------------- prompt construction


SHOTS = [
    Gsm8kItem("Tom has 2 apples and buys 3. How many?", "2 + 3 = <<2+3=5>>5 apples.\n#### 5", D(5)),
    Gsm8kItem("A box holds 4 pens; 2 boxes?", "4 * 2 = <<4*2=8>>8\n#### 8", D(8)),
]


def test_clean_solution_drops_calculator_annotations() -> None:
    assert clean_solution("2 + 3 = <<2+3=5>>5 apples.\n#### 5") == "2 + 3 = 5 apples.\n#### 5"


def test_build_messages_is_multi_turn_fewshot_chat() -> None:
    msgs = build_messages("  What is 7 plus 8? ", SHOTS)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[0]["content"] == SHOTS[0].question
    assert msgs[1]["content"].endswith("#### 5") and "<<" not in msgs[1]["content"]
    assert msgs[-1] == {"role": "user", "content": "What is 7 plus 8?"}
    with_system = build_messages("q", SHOTS[:1], system_prompt="Solve it.")
    assert with_system[0] == {"role": "system", "content": "Solve it."}
    assert len(with_system) == 4


def test_request_body_defaults() -> None:
    body = request_body("deepseek", [{"role": "user", "content": "q"}], AccuracySpec())
    assert body == {
        "model": "deepseek",
        "messages": [{"role": "user", "content": "q"}],
        "temperature": 0.0,
        "seed": 123,  # the seed's
        "max_tokens": 1024,
        "chat_template_kwargs": {"thinking": False},
        "stream": False,
    }
    spec = AccuracySpec(seed=7, chat_template_kwargs={"enable_thinking": False, "thinking": False})
    assert request_body("m", [], spec)["chat_template_kwargs"] == {"enable_thinking": False, "thinking": False}
    assert AccuracySpec().concurrency == 32


def test_reply_text() -> None:
    assert reply_text({"choices": [{"message": {"role": "assistant", "content": "#### 3"}}]}) == "#### 3"
    assert reply_text({"choices": [{"message": {"role": "assistant", "content": None}}]}) == ""
    with pytest.raises(ValueError, match="not a chat completion"):
        reply_text({"error": "boom"})


def _write_jsonl(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"question": f"What is {i} plus 1?", "answer": f"<<{i}+1={i + 1}>>\n#### {i + 1}"}) + "\n" for i in range(n)))


def test_load_gsm8k(tmp_path: Path) -> None:
    test, train = tmp_path / "test.jsonl", tmp_path / "train.jsonl"
    _write_jsonl(test, 10)
    _write_jsonl(train, 7)
    data = load_gsm8k(AccuracySpec(dataset_path=str(test), fewshot_path=str(train), limit=4))
    assert [i.gold for i in data.items] == [D(1), D(2), D(3), D(4)]
    assert len(data.fewshot) == 5
    assert data.sha256 == hashlib.sha256(test.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="SHA-256"):
        load_gsm8k(AccuracySpec(dataset_path=str(test), fewshot_path=str(train), dataset_sha256="0" * 64))
    with pytest.raises(ValueError, match="numFewshot"):
        load_gsm8k(AccuracySpec(dataset_path=str(test), fewshot_path=str(train), num_fewshot=8))
    with pytest.raises(OSError, match="spec.accuracy.datasetPath"):
        load_gsm8k(AccuracySpec(dataset_path=str(tmp_path / "missing.jsonl"), fewshot_path=str(train)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_gsm8k(AccuracySpec(dataset_path=str(bad), num_fewshot=0))
