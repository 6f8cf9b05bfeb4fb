"""``spec.sweep``: the token counts M to measure and the opt-in adaptive sweep (``sweep.refine``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from spx.api.base import CamelModel

#: The seed PR's token sweep (docs/seed.md; ``operator/spx/data/h20_tp8_fused_wqa_wkv.csv``).
SEED_TOKENS = [6, 12, 24, 48, 96, 384, 1024, 2048, 4096, 8192, 16384]


class RefineSpec(CamelModel):
    """The adaptive sweep (opt-in): after the listed counts, add counts where the decision is.

    Planner: ``spx.analysis.refine`` (counts are multiples of TP, each recorded with why it was added):
    gate.thresholdTokens itself when not listed, then where a crossover is not bracketed — every speedup
    curve's, and the host-bound regime's when eager host times were measured (where the regimes
    disagree). It stops when every bracket is within ``±bracketRelative`` of its break-even or no wider
    than ``floorTokens``, or after ``maxAddedPoints`` / ``maxRounds``.
    """

    bracket_relative: float = Field(default=0.10, gt=0.0, le=1.0)
    """The bracket is narrow enough within ± this fraction of the break-even (0.10: ±10 %)."""
    floor_tokens: int | None = Field(default=None, ge=1, le=1 << 20)
    """A bracket no wider than this many tokens is narrow enough (default: the TP size; e.g. the GEMM's tile step)."""
    max_added_points: int = Field(default=8, ge=1, le=48)
    """At most this many counts are added to the listed ones."""
    max_rounds: int = Field(default=4, ge=1, le=16)
    """At most this many planning rounds."""
    points_per_round: int = Field(default=2, ge=1, le=8)
    """At most this many counts measured per round."""
    bounds: bool = True
    """Also bracket where the ends of the speedup's intervals (samples, gather prior) and the gather priors cross 1.0, not only the point estimate."""


class SweepSpec(CamelModel):
    """Token counts (M, tokens in the batch) to measure, strictly increasing."""

    tokens: list[Annotated[int, Field(gt=0, le=1 << 24)]] = Field(
        default_factory=lambda: list(SEED_TOKENS), min_length=1, max_length=64
    )
    """Token counts M to measure, strictly increasing, each at most 16,777,216."""
    off_alignment: bool = True
    """Also measure the off-alignment counts of gate.thresholdTokens T: T + 1 and 2T + 1 (the split's pad copy and a partial tile, which 7 of 8 real batch sizes pay), each up to the largest listed count and recorded with addedBecause."""
    refine: RefineSpec | None = None
    """Opt-in adaptive sweep: after these counts, add the gate threshold and counts around each regime's crossover until it is bracketed."""

    @field_validator("tokens")
    @classmethod
    def _sorted_positive_unique(cls, v: list[int]) -> list[int]:
        bad = [t for t in v if t <= 0]
        if bad:
            raise ValueError(f"token counts must be > 0, got {bad}")
        dupes = sorted({t for t in v if v.count(t) > 1})
        if dupes:
            raise ValueError(f"token counts must be unique, {dupes} repeat; list each count once")
        if v != sorted(v):
            raise ValueError(f"token counts must be in increasing order, got {v}; use {sorted(v)}")
        return v
