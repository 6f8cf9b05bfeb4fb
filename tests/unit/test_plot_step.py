"""`spx report --plot` draws the step curve beside the kernel curves (issue #36 req 2): the step A/B's
effect per layer per arm, on the aligned and the pad path, with its interval, on the sweep's token axis."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from spx.api.status import KernelPoint, KernelStatus
from spx.cli.plot import plot_crossover, step_curves
from spx_testing.obslib import STEP_CURVE_STATUS, step_curve_contract

pytestmark = pytest.mark.skipif(not step_curve_contract(), reason="this tree's StepStatus has no one-server curve yet "
                                                                  "(issue #34's contract, branch contract)")


def _step() -> object:
    from spx.api.step import StepStatus

    return StepStatus.model_validate(STEP_CURVE_STATUS)


def test_the_curves_per_arm_and_path_with_their_intervals() -> None:
    curves = step_curves(_step())
    assert curves == {"split, aligned": ([2048], [47.5], [7.5], [7.5]),
                      "split, pad path": ([2047], [52.5], [10.0], [10.0])}  # the A/A is calibration: not drawn
    assert step_curves(None) == {}


def test_the_plot_has_a_step_panel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    panels: list[list[str]] = []
    close = plt.close

    def record(fig: object = None) -> None:  # the figure's y labels, before plot_crossover closes it
        panels.append([a.get_ylabel() for a in fig.axes])  # type: ignore[union-attr]
        close(fig)  # type: ignore[arg-type]

    monkeypatch.setattr(plt, "close", record)
    kernel = KernelStatus(points=[KernelPoint(tokens=t, rows_per_rank=t // 8, replicated_us=40.0 + t / 100,
                                              split_us=35.0 + t / 200, speedup=(40.0 + t / 100) / (35.0 + t / 200))
                                  for t in (1024, 2048, 4096)])
    out = plot_crossover(kernel, tmp_path / "p.png", title="t", step=_step())
    assert out.stat().st_size > 0
    assert panels and "step effect, µs per layer" in panels[0], panels
    plot_crossover(kernel, tmp_path / "q.png", title="t")
    assert "step effect, µs per layer" not in panels[-1]
