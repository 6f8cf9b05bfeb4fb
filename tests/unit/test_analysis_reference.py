"""spx.analysis.reference: the seed's published H20 kernel table."""

from __future__ import annotations

import pytest

from spx.analysis.reference import parse_kernel_table
from spx.api.sweep import SEED_TOKENS
from spx_testing.factories import H20_CSV

HEADER = "tokens,rows_per_rank,replicated_us,split_allgather_us,speedup\n"


def test_h20_table_parses_every_row() -> None:
    points = parse_kernel_table(H20_CSV)
    assert [p.tokens for p in points] == SEED_TOKENS
    assert [p.rows_per_rank for p in points] == [1, 2, 3, 6, 12, 48, 128, 256, 512, 1024, 2048]
    first, last = points[0], points[-1]
    assert (first.replicated_us, first.split_us) == (14.1, 23.2)
    assert (last.replicated_us, last.split_us) == (3570.8, 635.4)
    for p in points:
        assert p.speedup == pytest.approx(p.replicated_us / p.split_us, rel=1e-12)
        assert p.decided and p.gather_us is None and p.max_abs_error is None and p.iqr_pct == 0.0


def test_speedup_is_recomputed_not_copied() -> None:
    # The published 5.22 at 4096 tokens came from unrounded times; 903.6 / 173.3 = 5.2141.
    by_tokens = {p.tokens: p for p in parse_kernel_table(H20_CSV)}
    assert by_tokens[4096].speedup == pytest.approx(903.6 / 173.3)
    assert by_tokens[4096].speedup != pytest.approx(5.22, abs=1e-3)


def test_blank_lines_and_row_order_are_tolerated() -> None:
    text = HEADER + "\n48,6,25.9,20.3,1.28\n\n24,3,19.2,21.1,0.91\n"
    assert [p.tokens for p in parse_kernel_table(text)] == [24, 48]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        (HEADER, "no rows"),
        ("tokens,replicated_us,split_us\n6,1.0,2.0\n", "line 1: header"),
        (HEADER + "6,1,14.1,23.2\n", "line 2: expected 5 fields"),
        (HEADER + "6,1,fast,23.2,0.61\n", "line 2: not a number"),
        (HEADER + "6,1,-14.1,23.2,0.61\n", "must be > 0"),
        (HEADER + "6,1,14.1,23.2,0.70\n", "line 2: published speedup 0.7 disagrees"),
        (HEADER + "6,1,14.1,23.2,0.61\n6,1,14.1,23.2,0.61\n", "appear more than once"),
    ],
)
def test_malformed_tables_raise(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_kernel_table(text)
