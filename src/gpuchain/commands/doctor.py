"""`gpuchain doctor`: walk every GPU node's chain bottom-up and name the first broken link.

Runs on a live cluster (in-cluster config, ``$KUBECONFIG`` or ``~/.kube/config``; ``--kubeconfig``
and ``--context`` to choose) or on a simulated one (``--scenario NAME|FILE``). Also works as
``kubectl gpuchain doctor`` (the package installs the ``kubectl-gpuchain`` plugin binary).
Exit code: 0 nothing broken (warnings allowed), 1 something broken, 2 bad input or no cluster, 3 no GPU
node found (nothing was walked: often the wrong context; the output names the context and server, or
the dump directory, it looked at).

The report for people is plain lines, not boxes: a fix is one line that pastes into a shell as it
is (the terminal, not gpuchain, wraps a long one), and finding ids and node names are never cut.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import typer
from rich.progress import BarColumn, Progress, TextColumn
from rich.text import Text

from gpuchain.commands._backend import BackendKind, open_backend
from gpuchain.commands._cluster import SIMULATED, _server_of, open_cluster, reads_a_whole_cluster
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit_data, err_console, fail, output_option, plain
from gpuchain.common import fastexit
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.doctor import LINKS, LinkState, NodeChain, Report, Severity, run_doctor
from gpuchain.doctor.local import ask, local_chain
from gpuchain.doctor.logs import cluster_scraper
from gpuchain.doctor.snapshot import STEPS, LogReader
from gpuchain.kube import Cluster, KubeError
from gpuchain.sim import SimCluster, build, go_live, load_scenario

STYLE = {
    LinkState.OK: ("✔", "green"),
    LinkState.DEGRADED: ("!", "yellow"),
    LinkState.BROKEN: ("✘", "bold red"),
    LinkState.NOT_REACHED: ("…", "dim"),
    LinkState.SKIPPED: ("-", "dim"),
    LinkState.NOT_JUDGED: ("?", "yellow"),
}
LEGEND = (
    "✔ ok   ! degraded   ✘ broken (first broken link)   … not reached (waits for the broken link)   - skipped"
    "   ? not judged (the source lacks what the check reads)"
)
SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


@dataclass(kw_only=True)
class Target:
    """The cluster to examine, and how to read logs there (and the simulator, for --scenario)."""

    cluster: Cluster
    reader: LogReader | None
    sim: SimCluster | None
    target: dict[str, str]  #: `Report.target`: what was examined (said in the report and in -o json)

    @property
    def where(self) -> str:
        """What was examined, in words, for the report's first line."""
        return describe_target(self.target)


def live_target(cluster: Cluster) -> dict[str, str]:
    """The kubeconfig context and API server a live cluster was opened with (in-cluster config has
    no context name), so a report of no GPU node says which cluster it looked at."""
    return {"kind": "live", "context": str(getattr(cluster, "context_name", "")), "server": _server_of(cluster)}


def describe_target(target: dict[str, str]) -> str:
    """``context C (server S)``, ``dump DIR`` or ``scenario N (simulated)`` for the report's first line."""
    if target.get("kind") == "live":
        context = f"context {target['context']} " if target.get("context") else "in-cluster config "
        return f"{context}(server {target.get('server', '?')})"
    if target.get("kind") == "dump":
        return f"dump {target.get('directory', '?')}"
    return f"scenario {target.get('name', '?')} (simulated)"


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


def open_target(scenario: str | None, *, kubeconfig: str | None, context: str | None, live: bool = False) -> Target:
    """A simulated cluster for ``--scenario``, else the live one; exits 2 with a one-line error otherwise."""
    if scenario:
        try:
            sim = build(load_scenario(scenario))
        except ConfigFileError as exc:
            fail(str(exc))
        if live:
            asyncio.run(go_live(sim))
        target = {"kind": "scenario", "name": sim.scenario.name}
        return Target(cluster=sim.cluster, reader=sim.read_log, sim=sim, target=target)
    from gpuchain.doctor.logs import cluster_log_reader

    cluster = open_cluster(kubeconfig, context=context, hint="pass --kubeconfig, or try --scenario friday-scale-out")
    target = live_target(cluster)
    return Target(cluster=cluster, reader=cluster_log_reader(cluster), sim=None, target=target)


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


def _node_label(names: list[str]) -> str:
    if len(names) <= 3:
        return ", ".join(names)
    return f"{names[0]} … {names[-1]} ({len(names)})"


def chain_lines(report: Report, all_nodes: bool) -> list[Text]:
    """Per-node chain view as lines: one narrow column per link, then the node(s) and finding ids at
    the end of the line, whole (nodes with the same chain and findings share a line unless ``all_nodes``)."""
    head = Text("  ".join(LINKS) + "   node(s): finding(s)", style="bold")
    lines = [Text("chain per GPU node (bottom-up)", style="bold"), head]
    rows: dict[tuple[Any, ...], list[NodeChain]] = {}
    for chain in report.chains:
        key = (
            (chain.node,) if all_nodes else (tuple(lk.state for lk in chain.links), tuple(f.id for f in chain.findings))
        )
        rows.setdefault(key, []).append(chain)
    for chains in rows.values():
        first = chains[0]
        line = Text()
        for link in LINKS:
            label, style = STYLE[first.state(link)]
            line.append(label.center(len(link)), style=style)
            line.append("  ")
        ids = ", ".join(dict.fromkeys(f.id for f in first.findings)) or "-"
        line.append(f" {_node_label([c.node for c in chains])}: ", style="bold")
        line.append(ids)
        lines.append(line)
    lines.append(Text(LEGEND, style="dim"))
    return lines


def finding_lines(report: Report) -> list[Text]:
    """Root causes first (evidence, what waits on them, the fix), then the rest; each fix on a line
    of its own, indented by spaces only, so it pastes into a shell as it is."""
    lines: list[Text] = []
    for group in report.groups():
        f = group.first
        tag = "ROOT CAUSE" if group.root else f.severity.value.upper()
        where = f" on {_node_label(list(group.nodes))}" if group.nodes else ""
        lines.append(Text())
        lines.append(Text.assemble((tag, SEVERITY_STYLE[f.severity]), (f" {group.id}{where}", "bold")))
        lines.append(Text(f"  {f.cause}"))
        lines += [Text.assemble(("  evidence  ", "dim"), line) for line in f.evidence]
        lines += [Text.assemble(("  waiting   ", "dim"), line) for line in f.consequences[:8]]
        lines.append(Text("  fix:", style="dim"))
        lines.append(Text(f"    {f.fix}", style="bold", no_wrap=True))  # one line to paste: see print_report
    return lines


def verdict_line(report: Report, where: str) -> Text:
    """One line: broken (the root causes), no GPU node (and where it looked), or healthy."""
    if report.broken:
        return Text(f"broken: {', '.join(g.id for g in report.root_causes)}", style="bold red")
    if not report.gpu_nodes:
        return Text(
            f"no GPU node found in {where}: {report.cluster_nodes} node(s), none with an NVIDIA GPU label or "
            "nvidia.com/gpu capacity, so no chain was walked and nothing is called healthy; check that this is the "
            "cluster you meant (exit 3)",
            style="bold yellow",
        )
    judged = not report.not_judged and all(
        lk.state is not LinkState.NOT_JUDGED for c in report.chains for lk in c.links
    )
    if not report.findings and judged:
        return Text("every link on every GPU node is healthy", style="bold green")
    if not report.findings:
        return Text("nothing broken in what the source holds; see what was not judged", style="yellow")
    return Text("nothing broken; see the notes below", style="yellow")


def report_lines(report: Report, *, where: str, all_nodes: bool) -> list[Text]:
    """The view for people: summary, verdict, what was not judged, findings, chain view."""
    calls = sum(report.api_calls.values())
    stack = report.stack
    found = f"stack: {stack.get('title', '?')}" + (
        f" in namespace {stack['namespace']}" if stack.get("namespace") else ""
    )
    head = Text.assemble(
        ("gpuchain doctor", "bold"),
        f": {where}, {report.gpu_nodes} GPU node(s), {calls} API call(s), {report.seconds:.2f} s",
    )
    lines = [head, Text(found), verdict_line(report, where)]
    lines += [Text.assemble(("not judged: ", "yellow"), line) for line in report.not_judged]
    lines += finding_lines(report)
    if report.chains:
        lines += [Text(), *chain_lines(report, all_nodes)]
    return lines


def print_report(report: Report, *, output: OutputFormat, lines: Callable[[], list[Text]]) -> None:
    """JSON/YAML for scripts; for people, plain lines. A line marked ``no_wrap`` (a fix) is printed
    with soft wrap: rich neither wraps nor cuts it, the terminal folds it, and copying it gives the
    one line back. Other lines wrap at spaces, so a finding id or a node name is never split."""
    if not output.for_people:
        emit_data(report, output)
        return
    from gpuchain.commands._output import console

    for line in lines():
        console.print(line, soft_wrap=bool(line.no_wrap))


def run_local(backend: BackendKind, output: OutputFormat) -> NoReturn:
    """``doctor --local``: nvidia-smi's question (does NVML answer here?) as a check; exits 0 or 1."""
    answer = ask(lambda: open_backend(backend))
    chain = local_chain(answer)
    report = Report(chains=[chain], findings=list(chain.findings), gpu_nodes=1, seconds=0.0)

    simulated = backend is BackendKind.sim

    def view() -> list[Text]:
        where = f"node {answer.node}, kernel {answer.kernel}" + (f" ({SIMULATED} GPUs)" if simulated else "")
        head = Text.assemble(("gpuchain doctor --local", "bold"), f": {where}")
        lines = [head, Text(chain.links[0].summary + (f" ({SIMULATED})" if simulated else ""))]
        lines += [Text(f"  {g}") for g in answer.gpus]
        return lines + finding_lines(report)

    if output.for_people:
        print_report(report, output=output, lines=view)
    else:
        emit_data({**plain(report), SIMULATED: simulated}, output)
    raise typer.Exit(1 if report.broken else 0)


doctor_app = typer.Typer(
    name="doctor",
    help="Walk each GPU node's chain bottom-up and name the first broken link, its evidence and the fix.",
    epilog="Exit codes: 0 nothing broken, 1 something broken, 2 bad input or no reachable cluster, 3 no GPU node "
    "found (the report names the kubeconfig context and server, or the dump directory, it looked at).",
)


def run_from_dump(directory: str, *, namespace: str | None, output: OutputFormat, all_nodes: bool) -> NoReturn:
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
    report.target = {"kind": "dump", "directory": directory}
    print_report(
        report,
        output=output,
        lines=lambda: report_lines(report, where=describe_target(report.target), all_nodes=all_nodes),
    )
    raise typer.Exit(report.exit_code)


@doctor_app.callback(invoke_without_command=True)
@reads_a_whole_cluster
def doctor(
    ctx: typer.Context,
    *,
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

    Exit codes: see the epilog of ``doctor_app`` (shown by --help).
    """
    if ctx.invoked_subcommand is not None:
        return
    if local:
        run_local(backend, output)
    if from_dump:
        run_from_dump(from_dump, namespace=namespace, output=output, all_nodes=all_nodes)
    target = open_target(scenario, kubeconfig=kubeconfig, context=context, live=live)
    show = output is OutputFormat.table and sys.stderr.isatty()
    try:
        with reading_progress(show, len(STEPS)) as step:
            # The exporters' scrapes are read on a live cluster (a scenario's pods serve nothing).
            scraper = cluster_scraper(target.cluster) if target.sim is None else None
            report = run_doctor(
                target.cluster,
                namespace=namespace,
                reader=target.reader,
                progress=step,
                scraper=scraper,
                # A live cluster's snapshot (millions of objects at 10,000 nodes) is left to the OS at exit.
                keep=fastexit.hold if target.sim is None else None,
            )
    except KubeError as exc:
        fail(f"reading the cluster failed: {exc}")
    report.target = target.target
    print_report(report, output=output, lines=lambda: report_lines(report, where=target.where, all_nodes=all_nodes))
    if report.exit_code:
        raise typer.Exit(report.exit_code)


@doctor_app.command("dump")
@reads_a_whole_cluster
def dump(
    directory: str = typer.Argument(..., help="Directory to write (created if missing)."),
    *,
    scenario: str | None = scenario_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
) -> None:
    """Write what the doctor reads, in kubectl cluster-info dump's layout plus the GPU extras
    (ClusterPolicies, NVIDIADrivers, RuntimeClasses, the stack's ConfigMaps), for a ticket."""
    from gpuchain.common.files import output_problem
    from gpuchain.doctor.dump import write_dump

    if (problem := output_problem(directory, directory=True)) is not None:
        fail(f"{directory}: {problem}")
    target = open_target(scenario, kubeconfig=kubeconfig, context=context)
    try:
        counts = write_dump(target.cluster, directory)
    except KubeError as exc:
        fail(f"reading the cluster failed: {exc}")
    except OSError as exc:
        fail(f"cannot write {exc.filename or directory}: {exc.strerror or exc}")
    err_console.print(
        f"wrote {directory}: {counts['nodes']} node(s), {counts['namespaces']} namespace(s), "
        f"{counts['pods']} pod(s), logs of {counts['podLogs']}, {counts['scrapes']} exporter scrape(s); "
        f"read it with gpuchain doctor --from-dump {directory}",
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    """Add `gpuchain doctor` (and `gpuchain doctor dump`)."""
    app.add_typer(doctor_app)
