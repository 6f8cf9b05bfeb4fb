"""spx.analysis.threshold: rounding a break-even up to a threshold vLLM can use."""

from __future__ import annotations

import math

import pytest

from spx.analysis.threshold import next_multiple, next_power_of_two, recommended_threshold_tokens


@pytest.mark.parametrize(
    ("break_even", "rounding", "tp", "expected"),
    [
        (29.124366966983736, "next-power-of-two", 8, 32),  # H20 table
        (1266.23, "next-power-of-two", 8, 2048),  # H200 what-if (log-log)
        (1455.25, "next-power-of-two", 8, 2048),  # H200 what-if (linear), the seed's 2048
        (1024.0, "next-power-of-two", 8, 1024),  # already a power of two
        (1024.0001, "next-power-of-two", 8, 2048),
        (0.3, "next-power-of-two", 8, 1),
        (29.12, "next-multiple-of-tp", 8, 32),
        (33.0, "next-multiple-of-tp", 8, 40),
        (1450.0, "next-multiple-of-tp", 8, 1456),
        (1450.0, "next-multiple-of-tp", 1, 1450),
        (29.12, "next-multiple-of-tp", 6, 30),
        (1450.2, "none", 8, 1451),
        (1450.0, "none", 8, 1450),
    ],
)
def test_recommended_threshold(break_even: float, rounding: str, tp: int, expected: int) -> None:
    assert recommended_threshold_tokens(break_even, rounding, tp) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "expected"), [(1, 1), (2, 2), (3, 4), (1025, 2048), (2048, 2048)])
def test_next_power_of_two(n: int, expected: int) -> None:
    assert next_power_of_two(n) == expected


@pytest.mark.parametrize(("n", "k", "expected"), [(1, 8, 8), (8, 8, 8), (9, 8, 16), (7, 1, 7)])
def test_next_multiple(n: int, k: int, expected: int) -> None:
    assert next_multiple(n, k) == expected


@pytest.mark.parametrize(
    ("break_even", "rounding", "tp"),
    [(0.0, "none", 8), (-3.0, "none", 8), (math.nan, "none", 8), (math.inf, "none", 8),
     (10.0, "next-multiple-of-tp", 0), (10.0, "nearest", 8)],
)
def test_invalid_inputs_raise(break_even: float, rounding: str, tp: int) -> None:
    with pytest.raises(ValueError):
        recommended_threshold_tokens(break_even, rounding, tp)  # type: ignore[arg-type]


def test_helpers_reject_non_positive() -> None:
    with pytest.raises(ValueError):
        next_power_of_two(0)
    with pytest.raises(ValueError):
        next_multiple(5, 0)
