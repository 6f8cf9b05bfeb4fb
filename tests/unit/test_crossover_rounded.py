"""``KernelStatus.crossover_tokens_rounded``: the crossover in whole tokens, rounded half up, that the
CRD's Crossover printer column reads (an "integer" column on the float would truncate 28.92 to 28)."""

from __future__ import annotations

import pytest

from spx.analysis.judge import cap_partial
from spx.api.crd import PRINTER_COLUMNS
from spx.api.status import KernelStatus
from spx_testing.factories import kernel_point


@pytest.mark.parametrize(("crossover", "rounded"), [
    (28.92182662508109, 29), (28.5, 29), (28.49, 28), (940.2, 940), (1619.5, 1620), (None, None),
    (float("inf"), None),
])
def test_rounded_half_up(crossover: float | None, rounded: int | None) -> None:
    kernel = KernelStatus(crossover_tokens=crossover)
    assert kernel.crossover_tokens_rounded == rounded
    assert kernel.to_wire().get("crossoverTokensRounded") == rounded


def test_read_back_derives_it_again() -> None:
    """A stale or hand-written value is replaced by the one derived from crossoverTokens."""
    read = KernelStatus.model_validate({"crossoverTokens": 28.92, "crossoverTokensRounded": 3})
    assert read.crossover_tokens_rounded == 29
    assert KernelStatus.model_validate({"crossoverTokensRounded": 3}).crossover_tokens_rounded is None


def test_a_capped_partial_run_drops_it_with_the_crossover() -> None:
    """A partial run whose points do not bracket a break-even publishes no crossover: nor its rounding."""
    kernel = KernelStatus(points=[kernel_point(384, 1.3), kernel_point(2048, 1.6)], crossover_tokens=28.9,
                          recommended_threshold_tokens=32)
    capped, reasons = cap_partial(kernel)
    assert reasons and capped.crossover_tokens is None and capped.crossover_tokens_rounded is None
    assert "crossoverTokensRounded" not in capped.to_wire()


def test_the_printer_column_reads_the_rounded_field() -> None:
    (column,) = [c for c in PRINTER_COLUMNS if c["name"] == "Crossover"]
    assert column["type"] == "integer" and column["jsonPath"] == ".status.kernel.crossoverTokensRounded"
