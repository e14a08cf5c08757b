"""`gpuchain plan`: whole GPU, MIG or time-slicing for one model; `gpuchain plan fleet`: failures a year.

Thin shell over `gpuchain.planner`: parse the flags, call the pure planner, render or plot.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuchain.commands._output import OutputFormat, emit, err_console, fail, output_option
from gpuchain.planner import (
    MIB,
    FleetRisk,
    IsolationNeed,
    Option,
    Plan,
    PlanInputError,
    PlanRequest,
    Sharing,
    Workload,
    fleet_risk,
    format_mib,
    parse_memory,
    parse_rate,
    plan,
    resolve_gpu,
)
from gpuchain.planner.capacity import DEFAULT_REPLICAS

plan_app = typer.Typer(name="plan", invoke_without_command=True)

_CAPTION = "* recommended; ≤ nominal (compute is time-shared); time-slicing memory is a fair share, not enforced"
_EXAMPLE = "gpuchain plan --gpu a100-40gb --model-memory 3GiB --qps-per-instance 60"


@plan_app.callback()
def plan_command(
    ctx: typer.Context,
    gpu: str | None = typer.Option(None, "--gpu", help="GPU model: a100-40gb, a100-80gb, h100-80gb, h200-141gb, l4."),
    model_memory: str | None = typer.Option(
        None, "--model-memory", help="GPU memory one model instance needs, with a unit: 3GiB, 3GB, 512MiB."
    ),
    qps_per_instance: float | None = typer.Option(None, "--qps-per-instance", help="QPS one instance serves."),
    isolation: IsolationNeed = typer.Option(
        IsolationNeed.HARD,
        "--isolation",
        help="hard: tenants must not affect each other (external, multi-tenant); soft: internal work may share.",
    ),
    gpus: int = typer.Option(1, "--gpus", help="GPUs in the pool; totals are per GPU times this."),
    replicas: int = typer.Option(DEFAULT_REPLICAS, "--replicas", help="Time-slicing replicas per GPU."),
    min_headroom: str | None = typer.Option(
        None, "--min-headroom", help="Memory each instance must keep free for bursts, e.g. 1GiB (default none)."
    ),
    plot: Path | None = typer.Option(None, "--plot", help="Also draw density and headroom per option to FILE.png."),
    output: OutputFormat = output_option(),
) -> None:
    """Capacity planning: whole GPU vs MIG vs time-slicing for one model (and `plan fleet`).

    How many instances of one model a GPU serves as a whole GPU, per MIG profile and time-sliced.
    Shows instances and QPS per GPU, memory headroom per instance, isolation and risk, and a
    recommendation with its reason. Example: gpuchain plan --gpu a100-40gb --model-memory 3GiB
    --qps-per-instance 60. See also: gpuchain plan fleet.
    """
    if ctx.invoked_subcommand is not None:
        return
    missing = [
        flag
        for flag, value in (("--gpu", gpu), ("--model-memory", model_memory), ("--qps-per-instance", qps_per_instance))
        if value is None
    ]
    if missing:
        fail(f"{', '.join(missing)} required, e.g. {_EXAMPLE}")
    assert gpu is not None and model_memory is not None and qps_per_instance is not None
    try:
        req = PlanRequest(
            gpu=resolve_gpu(gpu),
            workload=Workload(parse_memory(model_memory, "--model-memory") / MIB, qps_per_instance),
            isolation=isolation,
            gpus=gpus,
            replicas=replicas,
            min_headroom_mib=parse_memory(min_headroom, "--min-headroom") / MIB if min_headroom else 0.0,
        )
        result = plan(req)
    except PlanInputError as exc:
        fail(str(exc))
    if plot is not None:
        _write_plot(result, plot)
    emit(result, output, lambda: _plan_view(result))


def _write_plot(result: Plan, path: Path) -> None:
    from gpuchain.planner.plot import write_png

    if path.suffix.lower() != ".png":
        fail(f"--plot: {str(path)!r} must end in .png")
    try:
        write_png(result, path)
    except OSError as exc:
        fail(f"--plot: cannot write {str(path)!r}: {exc.strerror or exc}")
    err_console.print(f"wrote {path}", highlight=False)


def _plan_view(result: Plan) -> RenderableType:
    title = (
        f"{result.gpu} ({format_mib(result.gpu_memory_mib)}), {format_mib(result.model_memory_mib)} model, "
        f"{result.qps_per_instance:g} QPS per instance, isolation {result.isolation_need.value}"
    )
    parts: list[RenderableType] = []
    fitting = result.fitting
    if fitting:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=_CAPTION)
        columns = ["Option", "QPS/GPU", "Memory", "Headroom", "Isolation", "Risk"]
        for col in columns:
            table.add_column(col, no_wrap=col not in ("Isolation", "Risk"))
        chosen = result.recommendation.label if result.recommendation else None
        for o in fitting:
            table.add_row(*_row(o, chosen))
        parts.append(table)
    else:
        parts.append(Text(title, style="bold"))
    left_out = [o for o in result.options if not o.fits]
    if left_out and fitting:
        parts.append(Text("Does not fit: " + "; ".join(f"{o.label} ({o.why_not})" for o in left_out)))
    details: dict[Sharing, str] = {}
    for o in fitting:
        details.setdefault(o.sharing, o.risk_detail)
    parts.extend(Text(f"Risk, {kind.value}: {detail}") for kind, detail in details.items())
    parts.extend(Text(n) for n in result.notes)
    parts.append(Text(result.summary, style="bold"))
    if result.recommendation is not None:
        parts.append(Text(f"Why: {result.recommendation.reason}"))
        parts.append(Text(f"Set up: {result.recommendation.setup}"))
    return Group(*parts)


def _row(o: Option, chosen: str | None) -> list[str]:
    name = f"{o.instances_per_gpu} x {o.label}" if o.sharing is Sharing.MIG else o.label
    nominal = "≤" if o.qps_nominal else ""
    return [
        f"{name} *" if name == chosen else name,
        f"{nominal}{o.qps_per_gpu:g}",
        format_mib(o.memory_per_instance_mib),
        format_mib(o.headroom_mib),
        o.isolation.value,
        o.risk,
    ]


@plan_app.command("fleet")
def fleet_command(
    failure_rate: str = typer.Option(..., "--failure-rate", help="Annual failure rate per GPU: 5% or 0.05."),
    gpus: int = typer.Option(..., "--gpus", help="GPUs in the fleet, e.g. 128 for 16 nodes x 8."),
    hours_per_failure: float = typer.Option(2.0, "--hours-per-failure", help="Hours one failure costs by hand."),
    output: OutputFormat = output_option(),
) -> None:
    """Expected GPU failures a year for a fleet and the interval between them.

    Example: gpuchain plan fleet --failure-rate 5% --gpus 128 (6.4 a year, one every 57 days).
    """
    try:
        risk = fleet_risk(gpus, parse_rate(failure_rate, "--failure-rate"), hours_per_failure)
    except PlanInputError as exc:
        fail(str(exc))
    emit(risk, output, lambda: _fleet_view(risk))


def _fleet_view(risk: FleetRisk) -> RenderableType:
    table = Table(title="Fleet GPU failures", title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    interval = "never" if risk.days_between_failures is None else f"{risk.days_between_failures:.1f} days"
    rows = [
        ("GPUs", str(risk.gpus)),
        ("Annual failure rate per GPU", f"{risk.annual_failure_rate:.2%}"),
        ("Expected failures a year", f"{risk.expected_failures_per_year:.3g}"),
        ("Mean interval between failures", interval),
        (f"Chance of at least one in {risk.window_days} days", f"{risk.p_failure_in_window:.0%}"),
        (f"Handled by hand ({risk.hours_per_failure:g} h each)", f"{risk.manual_hours_per_year:.3g} h a year"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return Group(table, Text(risk.summary, style="bold"))


def register(app: typer.Typer) -> None:
    app.add_typer(plan_app, name="plan")
