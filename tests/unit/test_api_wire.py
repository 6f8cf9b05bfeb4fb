"""spx.api.wire: the bench → operator messages round-trip, bounded, standard JSON only."""

from __future__ import annotations

import io
import json
import math

import pytest

from spx.api import wire
from spx.api.result import SUMMARY_MAX_BYTES


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_the_writer_never_emits_non_standard_json(value: float) -> None:
    text = wire.line("point", {"tokens": 8, "medianUs": value, "nested": [1.5, value, {"x": value}]})
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda t: pytest.fail(f"non-standard token {t}"))  # strict parse
    (record,) = wire.parse_log(text).records
    assert record == ("point", {"tokens": 8, "medianUs": None, "nested": [1.5, None, {"x": None}]})


def test_lines_round_trip_in_order_and_garbage_is_skipped() -> None:
    out = io.StringIO()
    wire.write_line(out, "point", {"tokens": 8, "µs": 1.25, "name": "ünïcode"})
    out.write("W1201 NCCL INFO ring 0 : 0 -> 1\n{not ours}\n[rank1]: Traceback …\n")
    out.write('{"kind": "other", "x": 1}\n')
    wire.write_line(out, "result", {"points": [], "complete": True})
    wire.write_line(out, "serving", {"arms": []})
    records = wire.parse_log(out.getvalue())
    assert records.records == [("point", {"tokens": 8, "µs": 1.25, "name": "ünïcode"}),
                               ("result", {"points": [], "complete": True}), ("serving", {"arms": []})]
    assert records.problems == []


def test_broken_lines_of_ours_are_problems_naming_the_kind() -> None:
    legacy_nan = json.dumps({"kind": "result", "result": {"medianUs": math.nan}})  # what json.dumps writes
    truncated = wire.line("point", {"tokens": 8, "samples": list(range(50))})[:40]
    records = wire.parse_log(f"{legacy_nan}\n{truncated}\n")
    assert records.records == [] and records.bad == {"result": 1, "point": 1}
    assert "not standard JSON" in records.problems[0] and "NaN" in records.problems[0]
    assert "not valid JSON (truncated?)" in records.problems[1]
    assert all(len(p) < 300 for p in records.problems)  # bounded excerpts


def test_summaries_fit_4096_bytes_or_are_cut_to_it() -> None:
    small = {"schemaVersion": "v1", "points": [1, 2, 3]}
    big = {"schemaVersion": "v1", "points": ["ü" * 100] * 100}
    assert wire.fit_summary([big, small]) == wire.dumps(small)  # the first that fits
    cut = wire.fit_summary([big])
    assert len(cut.encode()) <= SUMMARY_MAX_BYTES
    doc, problem = wire.parse_summary(cut)
    assert doc is None and problem is not None and "the kubelet truncated it" in problem
    doc, problem = wire.parse_summary(wire.fit_summary([small]))
    assert doc == small and problem is None


@pytest.mark.parametrize(("message", "fragment"), [
    (None, "empty"), ("  ", "empty"), ("Traceback (most recent call last)", "not JSON"),
    ('{"speedup": Infinity}', "Infinity is not a JSON number"), ("[1, 2]", "expected a JSON object"),
])
def test_bad_summaries_say_why(message: str | None, fragment: str) -> None:
    doc, problem = wire.parse_summary(message)
    assert doc is None and problem is not None and fragment in problem


def test_unknown_kinds_are_refused_by_the_writer() -> None:
    with pytest.raises(ValueError, match="not one of point, result, serving, accuracy"):
        wire.line("results", {})
