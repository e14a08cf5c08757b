"""The plan as a PNG: a real image file that matplotlib can read back."""

from __future__ import annotations

from pathlib import Path

from matplotlib.image import imread
from matplotlib.patches import Rectangle

from gpuchain.planner import Plan, PlanRequest, Workload, plan, resolve_gpu
from gpuchain.planner.plot import figure, write_png

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chapter_plan(memory_mib: float = 3 * 1024) -> Plan:
    return plan(PlanRequest(gpu=resolve_gpu("a100-40gb"), workload=Workload(memory_mib, 60)))


def test_plot_is_a_valid_png(tmp_path: Path) -> None:
    out = tmp_path / "plan.png"
    write_png(_chapter_plan(), out)
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    pixels = imread(out)
    height, width = pixels.shape[:2]
    assert width == 1200 and height > 300
    assert pixels.std() > 0  # not a blank canvas


def test_plot_has_a_bar_per_fitting_option_in_both_panels() -> None:
    p = _chapter_plan()
    fig = figure(p)
    density, headroom = fig.axes
    bars = [p for p in density.patches if isinstance(p, Rectangle)]
    hbars = [p for p in headroom.patches if isinstance(p, Rectangle)]
    assert [bar.get_width() for bar in bars] == [60, 420, 60, 240, 180, 120, 60, 60, 600]
    assert [round(bar.get_width(), 2) for bar in hbars][:2] == [37.0, 1.75]
    labels = [t.get_text() for t in density.get_yticklabels()]
    assert "7 x MIG 1g.5gb (recommended)" in labels
    assert density.patches[-1].get_hatch() == "//"  # time-slicing QPS is nominal


def test_nothing_fits_still_draws_the_answer(tmp_path: Path) -> None:
    out = tmp_path / "none.png"
    p = _chapter_plan(50 * 1024)
    write_png(p, out)
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    texts = [t.get_text() for ax in figure(p).axes for t in ax.texts]
    assert any(t.startswith("Nothing fits") for t in texts)
