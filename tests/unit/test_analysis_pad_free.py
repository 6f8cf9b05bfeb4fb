"""spx.analysis.pad_free: what the pad-free shard saves per layer and per chunk, and the threshold it allows."""

from __future__ import annotations

import pytest

from spx.analysis.pad_free import describe_pad_free, markdown_pad_free, pad_free_row, pad_free_summary
from spx.api import ExperimentSpec, KernelResult
from spx.api.result import CandidateStats, PointResult


def _stats(median):
    return CandidateStats(samples_us=[median] * 3, median_us=median, q1_us=median, q3_us=median, iqr_pct=0.0)


def _point(tokens, rep, split, pad_free, tp=8):
    padded = -(-tokens // tp) * tp
    return PointResult(tokens=tokens, padded_tokens=padded, rows_per_rank=padded // tp, replicated=_stats(rep),
                       split=_stats(split), gather_source="modelled", max_abs_error=0.0,
                       pad_free=None if pad_free is None else _stats(pad_free))


def _result(points):
    return KernelResult(spec=ExperimentSpec(), world_size=1, gemm_backend="humming", gather_backend="none",
                        gather_source="modelled", timer="cupti", device="cuda", cuda_graphs=True, points=points)


def test_rows_and_thresholds():
    # the split loses at 2049 only through its pad; pad-free wins there: it allows 2049 where the split needs 4096
    pts = [_point(1024, 50.0, 60.0, 60.0), _point(2048, 64.0, 60.0, 60.0), _point(2049, 64.0, 80.0, 58.0),
           _point(4096, 120.0, 70.0, 68.0)]
    s = pad_free_summary(_result(pts), layers=40)
    by = {r.tokens: r for r in s.rows}
    assert by[2049].saved_us == pytest.approx(22.0) and by[2049].saved_chunk_us == pytest.approx(880.0)
    assert by[2049].pad_rows == 7 and by[2048].pad_rows == 0 and by[2048].saved_us == 0.0
    assert s.split_threshold_tokens == 4096 and s.pad_free_threshold_tokens == 2048
    assert 2049 < s.split_break_even_tokens < 4096 and 1024 < s.pad_free_break_even_tokens < 2048
    text = "\n".join(describe_pad_free(s) + markdown_pad_free(s))
    assert "split wins from 4,096" in text and "pad-free from 2,048 (break-even 1," in text and "**+22.0**" in text
    everywhere = pad_free_summary(_result(pts[1:]))
    assert everywhere.pad_free_wins_everywhere and not everywhere.split_wins_everywhere
    assert "pad-free from ≤ 2,048 (break-even ≤ 2,048)" in describe_pad_free(everywhere)[-1]


def test_no_crossover_and_older_documents():
    assert pad_free_summary(_result([_point(2048, 60.0, 64.0, None)])) is None  # written before pad-free
    s = pad_free_summary(_result([_point(2048, 60.0, 64.0, 63.0)]))
    assert s.split_threshold_tokens is None and s.pad_free_break_even_tokens is None
    assert "none measured" in describe_pad_free(s)[-1]
    with pytest.raises(ValueError, match="layers must be >= 1"):
        pad_free_row(_point(2048, 60.0, 64.0, 63.0), layers=0)
