"""Reader of the seed PR's published kernel table (``operator/spx/data/h20_tp8_fused_wqa_wkv.csv``, docs/seed.md).

Format: a header ``tokens,rows_per_rank,replicated_us,split_allgather_us,speedup`` then one row per
token count; times are µs per call (median of 50 samples, each the max over the TP ranks), the split
time is the shard GEMM plus the all-gather, and ``speedup`` is the published ``replicated / split``
rounded to two decimals (computed by the author from unrounded times). Pure: takes the text.
"""

from __future__ import annotations

import csv
import io
import math

from spx.analysis.crossover import median_point, sorted_points, speedup
from spx.api.status import KernelPoint

KERNEL_TABLE_COLUMNS = ("tokens", "rows_per_rank", "replicated_us", "split_allgather_us", "speedup")


def _half_unit(text: str) -> float:
    """Half a unit in the last written decimal place of a number (the rounding error of its text)."""
    _, _, frac = text.strip().partition(".")
    return 0.5 * 10.0 ** -len(frac)


def parse_kernel_table(csv_text: str) -> list[KernelPoint]:
    """Parse the seed's kernel table into points sorted by tokens.

    ``speedup`` is recomputed as ``replicated_us / split_allgather_us`` (the :class:`KernelPoint`
    contract) and the published column is only checked against it: they must agree within the
    rounding of the written numbers (half a unit of the speedup's last decimal plus the first-order
    propagation of the times' rounding), which all rows of the H20 table do. The table publishes
    medians only: the IQR fields are 0, ``gather_us`` and ``max_abs_error`` are ``None``, and every
    point is marked ``decided`` (the spread is unknown, not zero — say so when quoting a confidence).

    Raises:
        ValueError: on a wrong header, a row with the wrong number of fields, a non-numeric or
            non-positive value, a published speedup that disagrees with the times, a repeated token
            count, or a table with no rows. Messages name the line.
    """
    reader = csv.reader(io.StringIO(csv_text))
    rows = [(n, row) for n, row in enumerate(reader, start=1) if row and any(c.strip() for c in row)]
    if not rows:
        raise ValueError("empty kernel table: expected a header and at least one row")
    header_line, header = rows[0]
    if tuple(c.strip() for c in header) != KERNEL_TABLE_COLUMNS:
        raise ValueError(
            f"line {header_line}: header {header} is not {','.join(KERNEL_TABLE_COLUMNS)}"
        )
    if len(rows) == 1:
        raise ValueError("kernel table has a header but no rows")
    points: list[KernelPoint] = []
    for line, row in rows[1:]:
        if len(row) != len(KERNEL_TABLE_COLUMNS):
            raise ValueError(f"line {line}: expected {len(KERNEL_TABLE_COLUMNS)} fields, got {len(row)}: {row}")
        try:
            tokens, rows_per_rank = int(row[0]), int(row[1])
            rep, split, published = float(row[2]), float(row[3]), float(row[4])
        except ValueError as exc:
            raise ValueError(f"line {line}: not a number in {row}: {exc}") from None
        if tokens <= 0 or rows_per_rank < 0 or not all(math.isfinite(v) and v > 0 for v in (rep, split, published)):
            raise ValueError(f"line {line}: tokens and times must be > 0 (rows_per_rank >= 0), got {row}")
        ratio = speedup(rep, split)
        tolerance = _half_unit(row[4]) + ratio * (_half_unit(row[2]) / rep + _half_unit(row[3]) / split)
        if abs(ratio - published) > tolerance * (1 + 1e-9):
            raise ValueError(
                f"line {line}: published speedup {published} disagrees with {rep} / {split} = {ratio:.4f} "
                f"beyond the rounding of the written numbers (±{tolerance:.4f})"
            )
        points.append(median_point(tokens, rows_per_rank, rep, split))
    return sorted_points(points)
