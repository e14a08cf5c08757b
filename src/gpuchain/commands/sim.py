"""`gpuchain sim run SCENARIO`: build a simulated cluster and show what was built; `gpuchain sim list`."""

from __future__ import annotations

import asyncio
from typing import Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit, fail, output_option
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.sim import SimCluster, build, go_live, load_scenario, scenario_names
from gpuchain.sim.build import LiveNode
from gpuchain.sim.chain import NodePlan

sim_app = typer.Typer(
    name="sim", help="Simulated clusters built from scenario YAML (no GPU, no cluster needed).", no_args_is_help=True
)


def _plan_dict(p: NodePlan) -> dict[str, Any]:
    return {
        "node": p.name,
        "gpu": p.gpu,
        "preset": p.group.preset,
        "kernel": p.group.kernel,
        "driver": p.driver,
        "driverVersion": p.driver_version,
        "toolkit": p.toolkit,
        "devicePlugin": p.plugin,
        "gfd": p.gfd,
        "exporter": p.exporter,
        "migManager": p.mig_manager,
        "capacity": p.capacity,
        "allocatable": p.allocatable,
    }


def _live_dict(n: LiveNode) -> dict[str, Any]:
    return {
        "node": n.node,
        "endpoints": n.endpoints,
        "capacity": n.capacity,
        "allocatable": n.allocatable,
        "agreesWithRendered": n.agrees,
        "admitted": {k: list(v) for k, v in n.admitted.items()},
    }


def summary(sim: SimCluster) -> dict[str, Any]:
    """What was built, as data (``-o json``)."""
    kinds = {k.kind: sim.cluster.count(k) for k in sim.cluster.kinds()}
    return {
        "scenario": sim.scenario.name,
        "stack": sim.scenario.stack,
        "source": sim.scenario.origin,
        "baseline": sim.scenario.baseline,
        "description": sim.scenario.description.strip(),
        "symptom": sim.scenario.symptom,
        "expect": sim.scenario.expect,
        "buildSeconds": round(sim.build_seconds, 4),
        "objects": kinds,
        "nodes": [_plan_dict(p) for p in sim.plans],
        "live": [_live_dict(n) for n in sim.live],
        "rendered": "driver, toolkit, operand pod states, Events; labels and capacity from the plugin's and GFD's code",
        "liveParts": "device plugin + kubelet peer over unix-socket gRPC on the nodes listed under live",
    }


def _state(value: str) -> Text:
    style = {"ok": "green", "off": "dim", "paused": "yellow", "blocked": "dim", "host": "green"}.get(value, "bold red")
    return Text(value, style=style)


def _render(sim: SimCluster, data: dict[str, Any]) -> RenderableType:
    head = Text.from_markup(
        f"[bold]scenario {sim.scenario.name}[/]: {len(sim.plans)} node(s) built in {sim.build_seconds * 1000:.0f} ms\n"
        f"{data['description']}\n[dim]symptom:[/] {data['symptom'] or '-'}"
    )
    table = Table(show_edge=False, padding=(0, 1), title="nodes (rendered)", title_justify="left")
    for col in ("node", "kernel", "driver", "toolkit", "device plugin", "gfd", "exporter", "allocatable / capacity"):
        table.add_column(col, no_wrap=col == "node")
    rows: dict[tuple[Any, ...], list[NodePlan]] = {}
    for p in sim.plans:
        key = (
            p.group.name,
            p.driver,
            p.toolkit,
            p.plugin,
            p.gfd,
            p.exporter,
            tuple(p.capacity.items()),
            tuple(p.allocatable.items()),
        )
        rows.setdefault(key, []).append(p)
    for plans in rows.values():
        p = plans[0]
        names = p.name if len(plans) == 1 else f"{plans[0].name} … {plans[-1].name} ({len(plans)})"
        numbers = ", ".join(f"{k.removeprefix('nvidia.com/')} {v}/{p.capacity[k]}" for k, v in p.allocatable.items())
        table.add_row(
            names,
            p.group.kernel,
            _state(p.driver),
            _state(p.toolkit),
            _state(p.plugin),
            _state(p.gfd),
            _state(p.exporter),
            numbers or "-",
        )
    parts: list[RenderableType] = [head, table]
    if sim.live:
        live = Table(
            show_edge=False,
            padding=(0, 1),
            title="live device-plugin link (gRPC over unix sockets)",
            title_justify="left",
        )
        for col in ("node", "registered endpoints", "allocatable / capacity (kubelet)", "= rendered"):
            live.add_column(col)
        for n in sim.live:
            numbers = ", ".join(
                f"{k.removeprefix('nvidia.com/')} {n.allocatable.get(k, 0)}/{v}" for k, v in n.capacity.items()
            )
            live.add_row(
                n.node,
                ", ".join(n.endpoints.values()),
                numbers,
                Text("yes", style="green") if n.agrees else Text("NO", style="bold red"),
            )
        parts.append(live)
    parts.append(Text.from_markup(f"[dim]next:[/] gpuchain doctor --scenario {sim.scenario.name}"))
    return Group(*parts)


@sim_app.command("run")
def run(
    scenario: str = typer.Argument(
        ...,
        help="A built-in scenario name (gpuchain sim list), a scenario YAML file, or a GPU repair/readiness "
        "scenario: gpu-reset, gpu-reset-fails, gpu-reset-storm, gpu-row-remap-pending, gpu-retired-pages, "
        "gpu-nvlink-errors, gpu-not-ready-scale-up.",
    ),
    *,
    live: bool = typer.Option(True, "--live/--no-live", help="Also run the device plugin + kubelet peer over gRPC."),
    live_nodes: int = typer.Option(4, "--live-nodes", min=0, help="At most this many nodes run live."),
    output: OutputFormat = output_option(),
) -> None:
    """Build SCENARIO on an in-memory API server and print what was built."""
    from gpuchain.sim.repair import SCENARIO_NAMES

    if scenario in SCENARIO_NAMES:  # the GPU repair loop's scenarios play out over simulated time
        _run_repair(scenario, output)
        return
    try:
        sim = build(load_scenario(scenario))
    except ConfigFileError as exc:
        fail(str(exc))
    if live and live_nodes:
        asyncio.run(go_live(sim, limit=live_nodes))
    data = summary(sim)
    emit(data, fmt=output, table=lambda: _render(sim, data))


def _run_repair(scenario: str, output: OutputFormat) -> None:
    """Play a repair-loop or readiness scenario and print each GPU's stage timeline (or the gate's)."""
    from gpuchain.sim.repair import play

    data = play(scenario)

    def table() -> RenderableType:
        if "readiness" in data:
            t = Table(title=f"{scenario}: node {data['node']} readiness", title_justify="left")
            for col in ("At", "GPUReady", "Startup taint", "Why"):
                t.add_column(col)
            for step in data["readiness"]:
                tainted = "held" if step["tainted"] else "removed"
                t.add_row(f"{step['seconds']:g}s", step["reason"], tainted, step["message"])
            return t
        t = Table(title=f"{scenario}: GPU stage timeline (seconds after the fault)", title_justify="left")
        for col in ("Node", "GPU", "Stage", "At", "Note"):
            t.add_column(col)
        for gpu in data["gpus"]:
            for step in gpu["timeline"]:
                t.add_row(gpu["node"], str(gpu["index"]), step["stage"], f"{step['seconds']:g}s", step["note"])
        waiting = [f"{g['node']} GPU {g['index']}: {g['waiting']}" for g in data["gpus"] if g["waiting"]]
        return Group(t, Text(f"taints on the node: {', '.join(data['taints']) or 'none'}"), *map(Text, waiting))

    emit(data, fmt=output, table=table)


@sim_app.command("list")
def list_scenarios(output: OutputFormat = output_option()) -> None:
    """The built-in scenarios (cluster states for the doctor, then the GPU repair loop's), each with
    its stack and the public report it comes from."""
    from gpuchain.sim.repair import LISTING
    from gpuchain.sim.scenario import source_url

    rows: list[dict[str, Any]] = []
    for sc in (load_scenario(name) for name in scenario_names()):
        rows.append(
            {
                "name": sc.name,
                "kind": "cluster",
                "stack": sc.stack,
                "source": sc.origin,
                "url": source_url(sc.source),
                "baseline": sc.baseline,
                "nodes": sc.node_count,
                "expect": sc.expect,
                "symptom": sc.symptom,
            }
        )
    for name, listed in LISTING.items():
        rows.append(
            {
                "name": name,
                "kind": "repair",
                "stack": "gpuchain",
                "source": listed.source,
                "url": source_url(listed.source),
                "baseline": False,
                "nodes": listed.nodes,
                "expect": [],
                "symptom": listed.symptom,
            }
        )

    def table() -> Table:
        t = Table(show_edge=False, padding=(0, 1))
        for col in ("scenario", "stack", "source", "nodes", "doctor names", "symptom"):
            t.add_column(col)
        for row in rows:
            names = ", ".join(row["expect"]) or ("(repair loop: sim run)" if row["kind"] == "repair" else "(nothing)")
            t.add_row(row["name"], row["stack"], row["source"] or "-", str(row["nodes"]), names, row["symptom"])
        return t

    emit(rows, fmt=output, table=table)


def register(app: typer.Typer) -> None:
    """Add `gpuchain sim`."""
    app.add_typer(sim_app)
