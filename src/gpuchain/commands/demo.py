"""`gpuchain demo`: the whole device plugin path on a simulated H100 node, in a few seconds."""

from __future__ import annotations

import asyncio
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit_data, fail, output_option, records, say, show
from gpuchain.commands.dra_plugin import dra_demo
from gpuchain.kubelet.node import DEFAULT_PRESET
from gpuchain.sim.demo import DemoStep, run_demo


def _resources(data: dict[str, Any]) -> Table:
    table = Table(show_edge=False, box=None, padding=(0, 2))
    table.add_column("resource", style="bold")
    table.add_column("capacity", justify="right")
    table.add_column("allocatable", justify="right")
    for name, cap in data["capacity"].items():
        alloc = data["allocatable"].get(name, 0)
        style = "green" if alloc == cap else "yellow"
        table.add_row(name, str(cap), Text(str(alloc), style=style))
    return table


def _render(step: DemoStep) -> None:
    d = step.data
    took = f" ({step.elapsed_ms:.1f} ms)" if step.elapsed_ms is not None else ""
    say(Text.assemble((">", "bold cyan"), " ", (step.title, "bold"), (took, "dim")))
    if step.key == "node":
        say(f"  {d['node']}: {d['gpus']} x {d['model']}, driver {d['driver']} (simulated)")
        say(Text.assemble("  sockets: ", (d["socket_dir"], "dim")))
        for r in d["registered"]:
            say(
                Text.assemble("  registered ", (r["resource"], "bold"), f" as {r['endpoint']} ({r['devices']} devices)")
            )
    elif step.key in ("capacity", "recovery"):
        show(_resources(d))
    elif step.key == "pod":
        say(Text.assemble(f"  {d['pod']} got GPU {d['gpu_index']} (", (d["device"], "dim"), ")"))
        for k, v in d["env"].items():
            say(Text.assemble("  env ", (k, "bold"), f"={v}"))
    elif step.key == "pod-resources":
        for p in d["pods"]:
            say(f"  {p['pod']} (container {p['container']}) holds {p['resource']}:")
            for device in p["devices"]:
                say(f"    {device}")
    elif step.key == "xid":
        say(f"  XID {d['xid']}: {d['meaning']} (recommended action: {d['action']})")
        show(_resources(d))
        verdict = ("within the same second", "green") if d["within_same_second"] else ("slower than a second", "red")
        say(
            Text.assemble(
                "  allocatable dropped ", (f"{d['propagation_ms']:.2f} ms", "bold"), " after the XID: ", verdict
            )
        )
        say(
            Text.assemble(
                "  pod on the failed GPU: ", (d["pod_on_failed_gpu"], "yellow"), " (remediation would evict it)"
            )
        )
    elif step.key == "stop":
        say(f"  whole demo: {d['total_ms'] / 1000:.2f} s")
    say("")


def demo(
    preset: str = typer.Option(DEFAULT_PRESET, "--preset", help="Simulated topology preset."),
    *,
    quiet: float = typer.Option(0.5, "--quiet-seconds", min=0, help="Recovery quiet period after the GPU is back."),
    dra: bool = typer.Option(
        False, "--dra", help="Show the same node through DRA instead: its ResourceSlice and a claim being prepared."
    ),
    output: OutputFormat = output_option(),
) -> None:
    """Run the device plugin chain on a simulated H100 node: capacity, a pod, an XID 79, recovery.

    The plugin and a kubelet peer talk gRPC over real unix sockets in a temporary directory;
    nothing is installed and no GPU or cluster is needed. -o json prints the transcript.
    With --dra the node is shown through Dynamic Resource Allocation (same as `gpuchain dra-demo`).
    """
    if dra:
        dra_demo(preset, output)
        return
    people = output.for_people
    if people:
        say(Text("gpuchain demo: GPUs -> device plugin -> kubelet -> pod (simulated)", style="bold"))
    try:
        steps = asyncio.run(run_demo(_render if people else (lambda s: None), preset=preset, quiet_seconds=quiet))
    except (TimeoutError, OSError, ValueError) as exc:
        fail(f"demo failed: {exc or type(exc).__name__}", code=1)
    emit_data(records(steps), output)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
