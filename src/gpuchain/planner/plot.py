"""The plans as pictures, for people who would rather look than read: density and headroom per option
(`gpuchain plan`), hours a year against nodes for both routes (`gpuchain plan stack`).

Drawn on an explicit Agg canvas (no pyplot), so it works headless, in threads and in tests, and
never touches a global backend.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from gpuchain.planner.capacity import Isolation, Option, Plan
from gpuchain.planner.stack import StackPlan, StackRequest, costs

_COLOURS = {Isolation.EXCLUSIVE: "#4c72b0", Isolation.HARDWARE: "#55a868", Isolation.NONE: "#c44e52"}


def figure(plan: Plan) -> Figure:
    """A two-panel figure: QPS per GPU (density) and memory headroom per instance, one bar per option."""
    fig = Figure(figsize=(12, 0.55 * max(len(plan.fitting), 3) + 2.2), layout="constrained")
    FigureCanvasAgg(fig)
    title = f"{plan.gpu}: {plan.model_memory_mib / 1024:.3g} GiB model, {plan.qps_per_instance:g} QPS per instance"
    fig.suptitle(title)
    options = list(plan.fitting)
    if not options:
        ax = fig.add_subplot()
        ax.axis("off")
        ax.text(0.5, 0.5, plan.summary, ha="center", va="center", wrap=True)
        return fig
    chosen = plan.recommendation.label if plan.recommendation else None
    labels = [_label(o, chosen) for o in options]
    colours = [_COLOURS[o.isolation] for o in options]
    hatches = ["//" if o.qps_nominal else "" for o in options]
    density, headroom = fig.subplots(1, 2, sharey=True)
    rows = range(len(options))
    bars = density.barh(rows, [o.qps_per_gpu for o in options], color=colours)
    density.set_title("Density: QPS per GPU")
    density.set_yticks(list(rows), labels)
    density.invert_yaxis()
    density.bar_label(bars, fmt="%g", padding=3)
    gib = [o.headroom_mib / 1024 for o in options]
    hbars = headroom.barh(rows, gib, color=colours)
    headroom.set_title("Memory headroom per instance, GiB")
    headroom.bar_label(hbars, fmt="%.2f", padding=3)
    for bar_set in (bars, hbars):
        for bar, hatch in zip(bar_set, hatches, strict=True):
            bar.set_hatch(hatch)
    for ax in (density, headroom):
        ax.margins(x=0.15)
    handles = [Patch(color=_COLOURS[iso], label=iso.value) for iso in Isolation]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="nominal, not enforced"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), title="isolation")
    return fig


def stack_figure(result: StackPlan) -> Figure:
    """Hours in the first year against the node count, by hand and with an operator, at the request's
    upgrades a year; the request's node count and the crossover marked."""
    req = result.request
    fig = Figure(figsize=(9, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    upgrades = f"{req.driver_upgrades_per_year:g} driver upgrades a year"
    ax.set_title(f"{req.driver.value} driver, {upgrades}: recommended {result.recommendation.value}")
    last = max(10, 2 * req.nodes, 2 * (result.crossover.nodes or 0))
    nodes = list(range(last + 1))
    ax.plot(nodes, [_hours(req, n)[0] for n in nodes], color="#c44e52", label="by hand")
    ax.plot(nodes, [_hours(req, n)[1] for n in nodes], color="#4c72b0", label="with an operator")
    ax.axvline(req.nodes, color="grey", linestyle=":", label=f"your {req.nodes} nodes")
    if result.crossover.nodes is not None:
        at = result.crossover.nodes
        ax.scatter([at], [_hours(req, at)[1]], color="black", zorder=3, label=f"operator cheaper from {at} nodes")
    ax.set_xlabel("GPU nodes")
    ax.set_ylabel("hours in the first year (install + upgrades)")
    ax.set_xlim(0, last)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    return fig


def _hours(req: StackRequest, nodes: int) -> tuple[float, float]:
    hand, op = costs(req, nodes)
    return hand.yearly_hours, op.yearly_hours


def write_png(plan: Plan | StackPlan, path: Path) -> None:
    """Draw ``plan`` into a PNG at ``path`` (parent folder must exist)."""
    fig = figure(plan) if isinstance(plan, Plan) else stack_figure(plan)
    fig.savefig(path, format="png", dpi=100)


def _label(o: Option, chosen: str | None) -> str:
    name = f"{o.instances_per_gpu} x {o.label}" if o.profile else o.label
    return f"{name} (recommended)" if chosen is not None and name == chosen else name
