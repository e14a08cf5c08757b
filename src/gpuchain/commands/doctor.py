"""`gpuchain doctor`: walk every GPU node's chain bottom-up and name the first broken link.

Runs on a live cluster (in-cluster config, ``$KUBECONFIG`` or ``~/.kube/config``; ``--kubeconfig``
and ``--context`` to choose) or on a simulated one (``--scenario NAME|FILE``). Also works as
``kubectl gpuchain doctor`` (the package installs the ``kubectl-gpuchain`` plugin binary).
Exit code: 0 nothing broken (warnings allowed), 1 something broken, 2 bad input or no cluster.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import typer
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from gpuchain.commands._backend import BackendKind, open_backend
from gpuchain.commands._cluster import SIMULATED, open_cluster, reads_a_whole_cluster
from gpuchain.commands._output import OutputFormat, emit, err_console, fail, output_option, plain
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.doctor import LINKS, LinkState, NodeChain, Report, Severity, run_doctor
from gpuchain.doctor.local import ask, local_chain
from gpuchain.doctor.snapshot import STEPS, LogReader
from gpuchain.kube import Cluster, KubeError
from gpuchain.sim import SimCluster, build, go_live, load_scenario

STYLE = {
    LinkState.OK: ("✔", "green"),
    LinkState.DEGRADED: ("!", "yellow"),
    LinkState.BROKEN: ("✘", "bold red"),
    LinkState.NOT_REACHED: ("…", "dim"),
    LinkState.SKIPPED: ("-", "dim"),
}
LEGEND = "✔ ok   ! degraded   ✘ broken (first broken link)   … not reached (waits for the broken link)   - skipped"
SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


@dataclass
class Target:
    """The cluster to examine, and how to read logs there (and the simulator, for --scenario)."""

    cluster: Cluster
    reader: LogReader | None
    sim: SimCluster | None = None
    where: str = ""


def scenario_option() -> Any:
    """``--scenario``: a built-in scenario name (gpuchain sim list) or a scenario file."""
    return typer.Option(None, "--scenario", "-s", help="Run on a simulated cluster: a scenario name or YAML file.")


def kubeconfig_option() -> Any:
    """``--kubeconfig``."""
    return typer.Option(
        None, "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)."
    )


def context_option() -> Any:
    """``--context``."""
    return typer.Option(None, "--context", help="kubeconfig context to use.")


def open_target(scenario: str | None, kubeconfig: str | None, context: str | None, live: bool = False) -> Target:
    """A simulated cluster for ``--scenario``, else the live one; exits 2 with a one-line error otherwise."""
    if scenario:
        try:
            sim = build(load_scenario(scenario))
        except ConfigFileError as exc:
            fail(str(exc))
        if live:
            asyncio.run(go_live(sim))
        return Target(sim.cluster, sim.read_log, sim, f"scenario {sim.scenario.name} (simulated)")
    from gpuchain.doctor.logs import cluster_log_reader

    cluster = open_cluster(kubeconfig, context, hint="pass --kubeconfig, or try --scenario friday-scale-out")
    return Target(cluster, cluster_log_reader(cluster), None, "live cluster")


@contextmanager
def reading_progress(enabled: bool, steps: int) -> Iterator[Callable[[str], None]]:
    """A transient progress bar on stderr (one step per list call) while the cluster is read."""
    if not enabled:
        yield lambda _name: None
        return
    progress = Progress(
        TextColumn("[bold]reading[/] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task("cluster", total=steps)

        def step(name: str) -> None:
            progress.update(task, advance=1, description=name)

        yield step


def _cell(chain: NodeChain, link: str) -> Text:
    state = chain.state(link)
    label, style = STYLE[state]
    return Text(label, style=style)


def _node_label(names: list[str]) -> str:
    if len(names) <= 3:
        return ", ".join(names)
    return f"{names[0]} … {names[-1]} ({len(names)})"


def chain_table(report: Report, all_nodes: bool) -> Table:
    """Per-node chain view; nodes with the same chain and findings share a row unless ``all_nodes``."""
    table = Table(
        title="chain per GPU node (bottom-up)",
        title_justify="left",
        caption=LEGEND,
        caption_justify="left",
        show_edge=False,
        padding=(0, 1),
    )
    table.add_column("node(s)", style="bold", no_wrap=True)
    for link in LINKS:
        table.add_column(link, justify="center", no_wrap=True, min_width=len(link))
    table.add_column("finding")
    rows: dict[tuple[Any, ...], list[NodeChain]] = {}
    for chain in report.chains:
        key = (
            (chain.node,) if all_nodes else (tuple(lk.state for lk in chain.links), tuple(f.id for f in chain.findings))
        )
        rows.setdefault(key, []).append(chain)
    for chains in rows.values():
        first = chains[0]
        ids = ", ".join(dict.fromkeys(f.id for f in first.findings)) or "-"
        table.add_row(_node_label([c.node for c in chains]), *(_cell(first, lk) for lk in LINKS), ids)
    return table


def findings_view(report: Report) -> RenderableType:
    """Root causes first (evidence, fix, consequences), then the rest."""
    parts: list[RenderableType] = []
    for group in report.groups():
        f = group.first
        tag = "ROOT CAUSE" if group.root else f.severity.value.upper()
        where = f" on {_node_label(list(group.nodes))}" if group.nodes else ""
        body = Text()
        body.append(f"{f.cause}\n")
        for line in f.evidence:
            body.append("  evidence  ", style="dim")
            body.append(f"{line}\n")
        for line in f.consequences[:8]:
            body.append("  waiting   ", style="dim")
            body.append(f"{line}\n")
        body.append("  fix       ", style="dim")
        body.append(f.fix, style="bold")
        parts.append(
            Panel(
                body,
                title=Text.assemble((tag, SEVERITY_STYLE[f.severity]), f" {group.id}{where}"),
                title_align="left",
                border_style=SEVERITY_STYLE[f.severity],
            )
        )
    return Group(*parts)


def render_report(report: Report, where: str, all_nodes: bool) -> RenderableType:
    """The terminal view: summary, findings, chain table."""
    calls = sum(report.api_calls.values())
    stack = report.stack
    found = f"stack: {stack.get('title', '?')}" + (
        f" in namespace {stack['namespace']}" if stack.get("namespace") else ""
    )
    head = Text.from_markup(
        f"[bold]gpuchain doctor[/]: {where}, {report.gpu_nodes} GPU node(s), "
        f"{calls} API call(s), {report.seconds:.2f} s\n{found}",
        emoji=False,
    )
    if not report.findings:
        verdict = Text("every link on every GPU node is healthy", style="bold green")
    elif report.broken:
        verdict = Text(f"broken: {', '.join(g.id for g in report.root_causes)}", style="bold red")
    else:
        verdict = Text("nothing broken; see the notes below", style="yellow")
    return Group(head, verdict, findings_view(report), chain_table(report, all_nodes))


def run_local(backend: BackendKind, output: OutputFormat) -> NoReturn:
    """``doctor --local``: nvidia-smi's question (does NVML answer here?) as a check; exits 0 or 1."""
    answer = ask(lambda: open_backend(backend))
    chain = local_chain(answer)
    report = Report([chain], list(chain.findings), 1, seconds=0.0)

    simulated = backend is BackendKind.sim

    def view() -> RenderableType:
        where = f"node {answer.node}, kernel {answer.kernel}" + (f" ({SIMULATED} GPUs)" if simulated else "")
        head = Text.assemble(("gpuchain doctor --local", "bold"), f": {where}")
        lines = [head, Text(chain.links[0].summary + (f" ({SIMULATED})" if simulated else ""))]
        lines += [Text(f"  {g}") for g in answer.gpus]
        return Group(*lines, findings_view(report))

    emit({**plain(report), SIMULATED: simulated}, output, view)
    raise typer.Exit(1 if report.broken else 0)


doctor_app = typer.Typer(
    name="doctor",
    help="Walk each GPU node's chain bottom-up and name the first broken link, its evidence and the fix.",
)


def run_from_dump(directory: str, namespace: str | None, output: OutputFormat, all_nodes: bool) -> NoReturn:
    """``doctor --from-dump DIR``: diagnose a ``kubectl cluster-info dump`` directory, no API access."""
    import time

    from gpuchain.doctor import diagnose
    from gpuchain.doctor.dump import DumpError, read_dump

    started = time.perf_counter()
    try:
        snapshot = read_dump(directory, namespace)
    except (DumpError, OSError) as exc:
        fail(str(exc))
    report = diagnose(snapshot)
    report.seconds = time.perf_counter() - started
    emit(report, output, lambda: render_report(report, f"dump {directory}", all_nodes))
    raise typer.Exit(1 if report.broken else 0)


@doctor_app.callback(invoke_without_command=True)
@reads_a_whole_cluster
def doctor(
    ctx: typer.Context,
    scenario: str | None = scenario_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    namespace: str | None = typer.Option(
        None,
        "--namespace",
        "-n",
        help="The GPU stack's namespace (default: found from the stack, e.g. gpu-operator or kube-system).",
    ),
    from_dump: str | None = typer.Option(
        None,
        "--from-dump",
        help="Diagnose a directory written by kubectl cluster-info dump --all-namespaces --output-directory=DIR "
        "(or gpuchain doctor dump DIR); no API access.",
    ),
    live: bool = typer.Option(
        False, "--live", help="With --scenario: run the device plugin + kubelet peer over gRPC first."
    ),
    all_nodes: bool = typer.Option(False, "--all-nodes", help="One row per node instead of grouping identical chains."),
    local: bool = typer.Option(False, "--local", help="Check only this node's driver link: does NVML answer here?"),
    backend: BackendKind = typer.Option(
        BackendKind.nvml, "--backend", "-b", help="With --local: nvml (this node's GPUs) or sim."
    ),
    output: OutputFormat = output_option(),
) -> None:
    """Walk each GPU node's chain bottom-up and name the first broken link, its evidence and the fix.

    Links: driver, toolkit, device plugin, then feature discovery, exporter and MIG. Works on the
    NVIDIA GPU Operator, NVIDIA's device plugin chart, GKE/EKS/AKS and gpuchain's own chart.
    """
    if ctx.invoked_subcommand is not None:
        return
    if local:
        run_local(backend, output)
    if from_dump:
        run_from_dump(from_dump, namespace, output, all_nodes)
    target = open_target(scenario, kubeconfig, context, live)
    show = output is OutputFormat.table and sys.stderr.isatty()
    try:
        with reading_progress(show, len(STEPS)) as step:
            report = run_doctor(target.cluster, namespace, target.reader, step)
    except KubeError as exc:
        fail(f"reading the cluster failed: {exc}")
    emit(report, output, lambda: render_report(report, target.where, all_nodes))
    if report.broken:
        raise typer.Exit(1)


@doctor_app.command("dump")
@reads_a_whole_cluster
def dump(
    directory: str = typer.Argument(..., help="Directory to write (created if missing)."),
    scenario: str | None = scenario_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
) -> None:
    """Write what the doctor reads, in kubectl cluster-info dump's layout plus the GPU extras
    (ClusterPolicies, NVIDIADrivers, RuntimeClasses, the stack's ConfigMaps), for a ticket."""
    from gpuchain.doctor.dump import write_dump

    target = open_target(scenario, kubeconfig, context)
    try:
        counts = write_dump(target.cluster, directory)
    except KubeError as exc:
        fail(f"reading the cluster failed: {exc}")
    except OSError as exc:
        fail(f"cannot write {directory}: {exc}")
    err_console.print(
        f"wrote {directory}: {counts['nodes']} node(s), {counts['namespaces']} namespace(s), "
        f"{counts['pods']} pod(s), logs of {counts['podLogs']}; read it with gpuchain doctor --from-dump {directory}",
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    """Add `gpuchain doctor` (and `gpuchain doctor dump`)."""
    app.add_typer(doctor_app)
