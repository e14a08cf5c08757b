"""`gpuchain plan`: whole GPU, MIG or time-slicing for one model; `gpuchain plan fleet`: failures a year;
`gpuchain plan stack`: the device plugin alone or an operator.

Thin shell over `gpuchain.planner`: parse the flags (or read a cluster through the doctor's
snapshot), call the pure planner, render or plot.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuchain.commands._cluster import reads_a_whole_cluster
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit, err_console, fail, output_option
from gpuchain.planner import (
    MIB,
    DriverOwner,
    FleetRisk,
    IsolationNeed,
    Need,
    Option,
    Plan,
    PlanInputError,
    PlanRequest,
    Reading,
    Sharing,
    StackPlan,
    Workload,
    fleet_risk,
    format_mib,
    parse_memory,
    parse_rate,
    plan,
    plan_stack,
    resolve,
    resolve_gpu,
)
from gpuchain.planner.capacity import DEFAULT_REPLICAS

plan_app = typer.Typer(name="plan", invoke_without_command=True)

_CAPTION = "* recommended; ≤ nominal (compute is time-shared); time-slicing memory is a fair share, not enforced"
_EXAMPLE = "gpuchain plan --gpu a100-40gb --model-memory 3GiB --qps-per-instance 60"


@plan_app.callback()
def plan_command(
    ctx: typer.Context,
    *,
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
    """Capacity planning: whole GPU vs MIG vs time-slicing for one model (and `plan fleet`, `plan stack`).

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
    emit(result, fmt=output, table=lambda: _plan_view(result))


def _write_plot(result: Plan | StackPlan, path: Path) -> None:
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
    *,
    gpus: int = typer.Option(..., "--gpus", help="GPUs in the fleet, e.g. 128 for 16 nodes x 8."),
    hours_per_failure: float = typer.Option(2.0, "--hours-per-failure", help="Hours one failure costs by hand."),
    output: OutputFormat = output_option(),
) -> None:
    """Expected GPU failures a year for a fleet and the interval between them.

    Example: gpuchain plan fleet --failure-rate 5% --gpus 128 (6.4 a year, one every 57 days).
    """
    try:
        risk = fleet_risk(
            gpus, annual_failure_rate=parse_rate(failure_rate, "--failure-rate"), hours_per_failure=hours_per_failure
        )
    except PlanInputError as exc:
        fail(str(exc))
    emit(risk, fmt=output, table=lambda: _fleet_view(risk))


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


@plan_app.command("stack")
def stack_command(
    nodes: int | None = typer.Option(None, "--nodes", help="GPU nodes in the cluster."),
    *,
    driver: DriverOwner | None = typer.Option(
        None,
        "--driver",
        help="Who owns the driver: cloud-image (the provider's node image: EKS, AKS, GKE) or self-managed "
        "(your team installs and upgrades it: bare metal, own images).",
    ),
    driver_upgrades_per_year: float | None = typer.Option(
        None, "--driver-upgrades-per-year", help="Driver upgrades a year (default 3: quarterly, after the install)."
    ),
    hours_per_node: float | None = typer.Option(
        None,
        "--hours-per-node",
        help="Hours one node costs by hand per install or upgrade (default 1 self-managed: driver, toolkit, a "
        "check; 0 cloud-image: the node image has them and the plugin DaemonSet covers every node).",
    ),
    operator_install_hours: float | None = typer.Option(
        None, "--operator-install-hours", help="Hours to install and tune an operator (default 2)."
    ),
    operator_hours_per_change: float | None = typer.Option(
        None,
        "--operator-hours-per-change",
        help="Hours per driver upgrade with an operator: bump the version, watch the roll-out (default 2).",
    ),
    need: list[Need] = typer.Option(
        [], "--need", help="What the cluster needs (repeatable): mig, rolling-driver-upgrades, gitops, dra."
    ),
    gpu_models: int | None = typer.Option(None, "--gpu-models", help="Distinct GPU models (default 1)."),
    driver_versions: int | None = typer.Option(
        None, "--driver-versions", help="Distinct driver versions across the nodes (default 1)."
    ),
    from_cluster: bool = typer.Option(
        False,
        "--from-cluster",
        help="Read GPU nodes, driver owner, GPU models, driver versions and MIG from the cluster "
        "(--kubeconfig, --context); flags given win over what is read.",
    ),
    scenario: str | None = typer.Option(
        None, "--scenario", "-s", help="Read a simulated cluster instead: a scenario name or YAML file."
    ),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)."
    ),
    context: str | None = typer.Option(None, "--context", help="kubeconfig context to use."),
    from_dump: str | None = typer.Option(
        None,
        "--from-dump",
        help="Read a directory written by kubectl cluster-info dump --all-namespaces --output-directory=DIR.",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Also draw hours a year against nodes for both routes to FILE.png."
    ),
    output: OutputFormat = output_option(),
) -> None:
    """The device plugin alone or an operator: hours a year of each route, the crossover, a recommendation.

    The deciding variable is who owns the driver's life cycle, not the node count. Example: gpuchain plan
    stack --nodes 100 --driver self-managed --driver-upgrades-per-year 3 (400 hours by hand against 8).
    """
    reading = _reading(from_cluster or bool(kubeconfig or context), scenario, kubeconfig, context, from_dump)
    given = {
        "nodes": nodes,
        "driver": driver,
        "driver_upgrades_per_year": driver_upgrades_per_year,
        "hours_per_node": hours_per_node,
        "operator_install_hours": operator_install_hours,
        "operator_hours_per_change": operator_hours_per_change,
        "needs": need,
        "gpu_models": gpu_models,
        "driver_versions": driver_versions,
    }
    try:
        req, inputs = resolve(given, reading)
        result = plan_stack(req, inputs=inputs, read_from=f"{reading.where}: {reading.stack}" if reading else "")
    except PlanInputError as exc:
        fail(str(exc))
    if plot is not None:
        _write_plot(result, plot)
    emit(result, fmt=output, table=lambda: _stack_view(result))


@reads_a_whole_cluster
def _reading(
    live: bool, scenario: str | None, kubeconfig: str | None, context: str | None, from_dump: str | None
) -> Reading | None:
    """The inputs a cluster, a simulated one or a dump says (None: none named), through the doctor's snapshot."""
    from gpuchain.kube import KubeError
    from gpuchain.planner.observed import read_snapshot

    if from_dump and (live or scenario):
        fail("--from-dump reads a dump, --from-cluster and --scenario a cluster: pass one of them")
    if from_dump:
        from gpuchain.doctor.dump import DumpError, read_dump

        try:
            return read_snapshot(read_dump(from_dump), f"dump {from_dump}")
        except (DumpError, OSError) as exc:
            fail(str(exc))
    if not (live or scenario):
        return None
    from gpuchain.commands.doctor import open_target
    from gpuchain.doctor import gather

    target = open_target(scenario, kubeconfig=kubeconfig, context=context)
    try:
        return read_snapshot(gather(target.cluster), target.where)
    except KubeError as exc:
        fail(f"reading the cluster failed: {exc}")


def _stack_view(result: StackPlan) -> RenderableType:
    req = result.request
    title = (
        f"Device plugin or operator: {req.nodes} GPU nodes, {req.driver.value} driver, "
        f"{req.driver_upgrades_per_year:g} driver upgrades a year"
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption="first year: install + upgrades")
    for col in ("Route", "Install", "Per upgrade", "First year"):
        table.add_column(col, justify="left" if col == "Route" else "right", no_wrap=True)
    for name, cost in (("by hand", result.by_hand), ("operator", result.operator)):
        hours = (cost.install_hours, cost.hours_per_upgrade, cost.yearly_hours)
        table.add_row(name, *(f"{h:.4g} h" for h in hours))
    parts: list[RenderableType] = []
    if result.read_from:
        parts.append(Text(f"Read from {result.read_from}"))
    parts.append(table)
    if result.ratio is not None:
        which = "" if result.ratio > 1 else " (a tie)" if result.ratio == 1 else " (by hand costs fewer hours)"
        parts.append(Text(f"By hand / operator: {result.ratio:.3g}x{which}"))
    parts.append(Text(_crossover_line(result)))
    unsaid = [i for i in result.inputs if i.source != "given"]
    if unsaid:
        inputs = Table(title="Inputs read or assumed", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("Flag", "Value", "Source", "Evidence"):
            inputs.add_column(col, no_wrap=col != "Evidence")
        for i in unsaid:
            inputs.add_row(i.flag, i.value, i.source, i.evidence)
        parts.append(inputs)
    parts.append(Text(f"Recommended: {result.label}.", style="bold"))
    parts.append(Text(f"Why: {result.reason}"))
    parts.append(Text(f"Set up: {result.setup}"))
    return Group(*parts)


def _crossover_line(result: StackPlan) -> str:
    req, cross = result.request, result.crossover
    if cross.nodes is None:
        return (
            f"Crossover: none at any node count: a node costs {req.node_hours:g} hours by hand "
            "(--hours-per-node), so only a need (--need) makes the operator worth it"
        )
    line = f"Crossover: the operator costs fewer hours from {cross.nodes} nodes at {req.driver_upgrades_per_year:g} "
    line += "driver upgrades a year"
    if cross.upgrades_per_year == 0:
        line += f"; at {req.nodes} nodes it pays even with no upgrade"
    elif cross.upgrades_per_year is not None:
        line += f"; at {req.nodes} nodes, from {cross.upgrades_per_year} upgrades a year"
    return line


def register(app: typer.Typer) -> None:
    app.add_typer(plan_app, name="plan")
