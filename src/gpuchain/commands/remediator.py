"""`gpuchain remediator` (the controller) and `gpuchain gpu-health` (the node-side publisher).

Both are thin: parse options, build the remediation layer's objects, run, render the report.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpuchain.agent.build import serve_alone
from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.roles import gpu_health as gpu_health_role
from gpuchain.agent.settings import GpuHealthSettings, NodeSettings
from gpuchain.commands._agent import nvml_release_dir_option
from gpuchain.commands._backend import (
    BACKEND_ERRORS,
    BackendKind,
    backend_or_fail,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import (
    SIMULATED,
    BackendChoice,
    mark,
    node_backend_option,
    open_cluster,
    open_node_cluster,
    refuse_implicit_sim,
    resolve_backend,
)
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import LogFormat, configure_logging, emit, fail, log_format_option, output_option, plain
from gpuchain.discovery.service import parse_interval
from gpuchain.exporter.podresources import DEFAULT_SOCKET
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.errors import KubeError
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.port import Cluster
from gpuchain.remediation.controller import Remediator, Report
from gpuchain.remediation.decide import DEFAULT_NAMESPACE, SYSTEM_NAMESPACES, NodeAction, Policy
from gpuchain.remediation.publisher import PublishResult

if TYPE_CHECKING:  # rich: when a table is shown; the loop: when gpu-health runs the repair loop
    from rich.console import RenderableType

    from gpuchain.gpu.burnin import BurnInConfig


DEFAULT_METRICS_PORT = 9401
"""gpu-health's metrics port: next to the exporter's 9400 (DCGM's), so a node's GPU metrics and its
repair loop's are found together."""


def _seconds(option: str, value: str) -> float:
    try:
        return parse_interval(value)
    except ValueError:
        fail(f"{option}: {value!r} is not a positive duration; use e.g. 30s, 10m or 1h")


def _report_table(report: Report, title: str = "") -> RenderableType:
    """The report for people; ``title`` leads the first line (a simulated scenario says so there)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    b = report.breaker
    head = Text(
        title + ("DRY RUN: nothing changed. " if report.dry_run else "") + b.message,
        style="bold red" if b.tripped else "",
    )
    actions = Table(title="Actions", title_justify="left")
    for col in ("Result", "Action", "Node", "Pod", "Why"):
        actions.add_column(col)
    for o in report.outcomes:
        a = o.action
        actions.add_row(o.result, a.kind.value, a.node, a.pod or "", o.detail or a.cause)
    held = Table(title="Left alone", title_justify="left")
    for col in ("Node", "Pod", "Why", "Detail"):
        held.add_column(col)
    for h in report.held:
        held.add_row(h.node, h.pod or "", h.why.value, h.detail)
    parts: list[RenderableType] = [head]
    parts.append(actions if report.outcomes else Text("No actions."))
    if report.held:
        parts.append(held)
    return Group(*parts)


class NodeWrites(enum.StrEnum):
    """Whose GPU health the remediator acts on."""

    ADMISSION = "admission"
    ANY = "any"


def remediator(
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and report; change nothing."),
    *,
    once: bool = typer.Option(False, "--once", help="Run one pass, print the report and exit."),
    breaker_share: float = typer.Option(
        0.3, "--breaker-share", help="Pause when more than this share of GPU nodes is affected within the window."
    ),
    breaker_min_nodes: int = typer.Option(
        2, "--breaker-min-nodes", help="...and at least this many nodes (so one failure in a small cluster acts)."
    ),
    window: str = typer.Option("10m", "--window", help="How far back the breaker counts affected nodes."),
    interval: str = typer.Option("10s", "--interval", help="Time between passes when running continuously."),
    node_action: NodeAction = typer.Option(
        NodeAction.TAINT,
        "--node-action",
        help="For faults needing a GPU reset or reboot: taint (gpuchain.io/gpu-reset-required), cordon, both, none.",
    ),
    no_evict: bool = typer.Option(False, "--no-evict", help="Never evict pods (only taint/cordon)."),
    namespace: str = typer.Option(
        DEFAULT_NAMESPACE,
        "--namespace",
        "-n",
        envvar="POD_NAMESPACE",
        help="Where the status ConfigMap lives (protected).",
    ),
    protect: list[str] = typer.Option(
        [], "--protect-namespace", help="Another namespace never touched (repeatable); system namespaces always are."
    ),
    scenario: str | None = typer.Option(
        None,
        "--scenario",
        help="Run on a simulated 4-node cluster instead: xid79, pdb, pdb-spread, storm, app-xid, healthy.",
    ),
    node_writes: NodeWrites = typer.Option(
        NodeWrites.ADMISSION,
        "--node-writes",
        help="admission: act only on GPU health that the chart's ValidatingAdmissionPolicy vouches for "
        "(gpuchain-gpu-health-writes, Kubernetes >= 1.30); any: trust every Node's annotations "
        "(clusters older than 1.30, where the policy cannot exist).",
    ),
    output: OutputFormat = output_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Move workloads off failed GPUs: evict the pods on them (PDBs respected), taint the node.

    Reads what `gpuchain gpu-health` publishes on each Node. Try: gpuchain remediator --scenario xid79.
    """
    window_s = _seconds("--window", window)
    interval_s = _seconds("--interval", interval)
    try:
        policy = Policy(
            protected_namespaces=SYSTEM_NAMESPACES | {namespace, "gpu-operator", *protect},
            node_action=node_action,
            evict=not no_evict,
            breaker_share=breaker_share,
            breaker_min_nodes=breaker_min_nodes,
            window_s=window_s,
        )
    except ValueError as exc:
        fail(str(exc).replace("breaker_share", "--breaker-share").replace("breaker_min_nodes", "--breaker-min-nodes"))
    if scenario is not None:
        from gpuchain.sim.remediation import run_scenario  # the simulator loads only for --scenario

        try:
            cluster: Cluster = run_scenario(scenario).cluster
        except KeyError as exc:
            fail(f"--scenario: {exc.args[0]}")
        once = True
    else:
        cluster = open_cluster(hint="or try --scenario xid79")
    controller = Remediator(
        cluster,
        policy=policy,
        namespace=namespace,
        dry_run=dry_run,
        verify_node_writes=node_writes is NodeWrites.ADMISSION,
    )
    if once:
        try:
            report = controller.run_once()
        except KubeError as exc:
            fail(str(exc), code=1)
        title = f"scenario {scenario} ({SIMULATED}): " if scenario is not None else ""
        emit({**plain(report), SIMULATED: scenario is not None}, fmt=output, table=lambda: _report_table(report, title))
        return
    configure_logging(logging.INFO, log_format)
    logging.getLogger("gpuchain.remediator").info(
        "remediating every %gs%s; Ctrl-C to stop", interval_s, " (dry run)" if dry_run else ""
    )
    _run_until_signal(lambda stop: controller.run(interval_s, stop))


def _run_until_signal(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``main(stop)`` until SIGTERM or Ctrl-C sets ``stop``."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(runner())


def _publish_table(result: PublishResult, choice: BackendChoice) -> RenderableType:
    from rich.table import Table

    title = mark(f"GPUHealthy={'False' if result.faults else 'True'}", choice)
    table = Table(title=title, title_justify="left")
    for col in ("Device", "Fault", "Pods"):
        table.add_column(col)
    for uuid, fault in sorted(result.faults.items()):
        pods = sorted({p for d in fault.covers for p in result.pods.get(d, ())})
        table.add_row(uuid, fault.summary().partition(": ")[2], "\n".join(pods))
    return table


def gpu_health(
    node: str | None = typer.Option(
        None, "--node", envvar="NODE_NAME", help="This Node's name (required on a cluster)."
    ),
    *,
    backend: BackendKind | None = node_backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    config_file: str | None = typer.Option(
        None, "--config-file", envvar="CONFIG_FILE", help="Device plugin config file: its health section is the policy."
    ),
    pod_resources_socket: str = typer.Option(
        DEFAULT_SOCKET, "--pod-resources-socket", help="Kubelet pod-resources socket (which pod holds which GPU)."
    ),
    resync: str = typer.Option("30s", "--resync", help="Republish the pod map at least this often."),
    namespace: str = typer.Option(
        DEFAULT_NAMESPACE,
        "--namespace",
        "-n",
        envvar="POD_NAMESPACE",
        help="With --repair: where the remediator keeps its status ConfigMap (its breaker holds resets).",
    ),
    repair: bool = typer.Option(
        False,
        "--repair",
        help="Also run the per-GPU repair loop: drain a failed GPU, reset it, burn it in and give it back; "
        "request a node reboot when that fails (see docs/remediation.md).",
    ),
    xid_resolution: str = typer.Option(
        "",
        "--xid-resolution",
        help="Override the XID table per XID: what one occurrence needs (109=none, 92=reset, 74=reboot) "
        "or a count-in-window threshold (13=reset@5/1h); see docs/remediation.md.",
    ),
    metrics_port: int = typer.Option(
        DEFAULT_METRICS_PORT,
        "--metrics-port",
        min=0,
        help="With --repair: serve the loop's Prometheus metrics (per-stage histograms, outcome counters) "
        "on this port at /metrics, its last pass at /health; 0 serves nothing.",
    ),
    metrics_address: str = typer.Option(
        "0.0.0.0", "--metrics-address", help="With --repair and --metrics-port: the address to listen on."
    ),
    gate_startup: bool = typer.Option(
        False,
        "--gate-startup",
        help="Remove the startup taint gpuchain.io/gpu-not-ready once the chain is up on this node, and keep "
        "condition GPUReady naming the missing link (see docs/remediation.md).",
    ),
    gate_burn_in: bool = typer.Option(False, "--gate-burn-in", help="With --gate-startup: burn in every GPU first."),
    startup_taint: str = typer.Option(
        "gpuchain.io/gpu-not-ready",
        "--startup-taint",
        help="With --gate-startup: the taint key to remove (e.g. one under cluster-autoscaler's "
        "startup-taint.cluster-autoscaler.kubernetes.io/ prefix).",
    ),
    validations_dir: str | None = typer.Option(
        None, "--validations-dir", help="With --gate-startup: the validator's ready files (checks toolkit-ready)."
    ),
    burn_in_cuda: bool | None = typer.Option(
        None,
        "--burn-in-cuda/--no-burn-in-cuda",
        help="Burn-in (repair loop and --gate-burn-in, --backend nvml): run gpuchain's CUDA kernel and "
        "memory test [default: on].",
    ),
    burn_in_memory_fraction: float | None = typer.Option(
        None, "--burn-in-memory-fraction", help="Burn-in: share of the free GPU memory tested, (0, 0.9] [default: 0.5]."
    ),
    burn_in_memory_cap_mib: int | None = typer.Option(
        None, "--burn-in-memory-cap-mib", help="Burn-in: test at most this many MiB, whatever the fraction."
    ),
    burn_in_time_budget: str | None = typer.Option(
        None,
        "--burn-in-time-budget",
        help="Burn-in: the memory test starts no new pattern after this long [default: 60s].",
    ),
    burn_in_cuda_timeout: str | None = typer.Option(
        None,
        "--burn-in-cuda-timeout",
        help="Burn-in: kill the CUDA check after this long and fail it; above the time budget [default: 5m].",
    ),
    burn_in_dcgm: bool | None = typer.Option(
        None,
        "--burn-in-dcgm/--no-burn-in-dcgm",
        help="Burn-in: run DCGM's diagnostic where dcgmi is installed [default: on].",
    ),
    burn_in_dcgm_level: int | None = typer.Option(
        None, "--burn-in-dcgm-level", help="Burn-in: dcgmi diag -r level, 1 (quick) to 4 (extended) [default: 1]."
    ),
    burn_in_dcgm_host: str | None = typer.Option(
        None,
        "--burn-in-dcgm-host",
        help="Burn-in: dcgmi --host, a DCGM host engine such as the GPU operator's service.",
    ),
    burn_in_dcgm_timeout: str | None = typer.Option(
        None,
        "--burn-in-dcgm-timeout",
        help="Burn-in: stop dcgmi after this long (the diagnostic is then skipped) [default: 5m].",
    ),
    burn_in_fabric_wait: str | None = typer.Option(
        None,
        "--burn-in-fabric-wait",
        help="Burn-in: wait this long for a reset GPU to rejoin the NVLink fabric; 0 looks once [default: 1m].",
    ),
    release_dir: str = nvml_release_dir_option(),
    once: bool = typer.Option(False, "--once", help="Publish once, print what was published and exit."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Publish to an in-memory API instead of the cluster (implies --once)."
    ),
    output: OutputFormat = output_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Publish this node's GPU health for the remediator: condition GPUHealthy, Events, GPU/pod annotations.

    Uses the device plugin's XID policy (config file health section, DP_*_HEALTHCHECKS variables).
    """
    resync_s = _seconds("--resync", resync)
    from gpuchain.gpu.xid import parse_overrides

    try:
        overrides = parse_overrides(xid_resolution)
    except ValueError as exc:
        fail(f"--xid-resolution: {exc}")
    burn_in = _burn_in_config(
        cuda=burn_in_cuda,
        memory_fraction=burn_in_memory_fraction,
        memory_cap_mib=burn_in_memory_cap_mib,
        cuda_budget_s=burn_in_time_budget,
        cuda_deadline_s=burn_in_cuda_timeout,
        dcgm=burn_in_dcgm,
        dcgm_level=burn_in_dcgm_level,
        dcgm_host=burn_in_dcgm_host,
        dcgm_deadline_s=burn_in_dcgm_timeout,
        fabric_wait_s=burn_in_fabric_wait,
    )
    settings = GpuHealthSettings(
        config_file=Path(config_file) if config_file else None,
        resync=resync_s,
        namespace=namespace,
        repair=repair,
        xid_overrides=overrides,
        burn_in=burn_in,
        gate_startup=gate_startup,
        gate_burn_in=gate_burn_in,
        startup_taint=startup_taint,
        validations_dir=validations_dir,
    )
    choice = resolve_backend(backend)
    try:
        gpu_health_role.policy_of(settings)
    except RoleError as exc:
        fail(str(exc), code=exc.code)
    gpus = backend_or_fail(choice.kind, preset=preset, topology=topology)
    name = node
    if name is None and dry_run and isinstance(gpus, SimBackend):
        name = gpus.topology.node
    if not name:
        fail("--node (or $NODE_NAME) is required: the Node to publish on")
    if dry_run:
        from gpuchain.sim.remediation import node_object  # the simulator loads only for --dry-run

        memory: Cluster = MemoryCluster([node_object(name)])
        once = True
        cluster: Callable[[], Cluster] = lambda: memory  # noqa: E731
    else:
        refuse_implicit_sim(choice, target=f"node {name} of the live cluster (GPUHealthy)", elsewhere="pass --dry-run")
        live = open_node_cluster(hint="or pass --dry-run")
        cluster = lambda: live  # noqa: E731
    serves = repair and metrics_port and not once
    node_settings = NodeSettings(
        node_name=name,
        release_dir=release_dir,
        pod_resources_socket=pod_resources_socket if os.path.exists(pod_resources_socket) else "",
        metrics_address=metrics_address,
        metrics_port=metrics_port if serves else None,
    )
    health = Node(gpus, settings=node_settings, cluster=cluster)
    health.in_process_reset = True  # this is the process that resets: it follows no release board
    try:
        try:
            prepared = gpu_health_role.prepare(settings, health)
        except RoleError as exc:
            fail(str(exc), code=exc.code)
        if once:
            try:
                result = prepared.publisher.publish()
            except (KubeError, *BACKEND_ERRORS) as exc:
                fail(str(exc), code=1)
            data = {
                "node": name,
                "published": health.cluster().get(NODE, name=name)["metadata"].get("annotations", {}),
                **_plain(result),
                SIMULATED: choice.simulated,
            }
            emit(data, fmt=output, table=lambda: _publish_table(result, choice))
            return
        configure_logging(logging.INFO, log_format)
        try:
            health.serve_metrics()
        except OSError as exc:
            fail(
                f"--metrics-port: cannot listen on {metrics_address}:{metrics_port}: {exc.strerror or exc}; "
                "pick another port",
                code=1,
            )

        async def role(stop: asyncio.Event, started: Callable[[], None]) -> None:
            await gpu_health_role.serve(settings, node=health, prepared=prepared, stop=stop, started=started)

        asyncio.run(serve_alone(role, node=health, component="gpu-health"))
    finally:
        asyncio.run(health.close())


_BURN_IN_FLAGS = {
    "cuda": "--burn-in-cuda",
    "memory_fraction": "--burn-in-memory-fraction",
    "memory_cap_mib": "--burn-in-memory-cap-mib",
    "cuda_budget_s": "--burn-in-time-budget",
    "cuda_deadline_s": "--burn-in-cuda-timeout",
    "dcgm": "--burn-in-dcgm",
    "dcgm_level": "--burn-in-dcgm-level",
    "dcgm_host": "--burn-in-dcgm-host",
    "dcgm_deadline_s": "--burn-in-dcgm-timeout",
    "fabric_wait_s": "--burn-in-fabric-wait",
}
"""``BurnInConfig``'s fields and the gpu-health flags that set them (errors name the flag)."""


def _burn_in_config(**given: object) -> BurnInConfig:
    """The burn-in settings from the ``--burn-in-*`` flags given (None: gpuchain's default); durations
    as ``--resync`` takes them (``--burn-in-fabric-wait`` also 0). A bad value is one line naming
    its flag, exit 2."""
    from gpuchain.gpu.burnin import BurnInConfig

    settings: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        if name.endswith("_s"):
            flag = _BURN_IN_FLAGS[name]
            zero = name == "fabric_wait_s" and str(value).strip() in ("0", "0s")
            value = 0.0 if zero else _seconds(flag, str(value))
        settings[name] = value
    try:
        return BurnInConfig(**settings)
    except ValueError as exc:
        fields = re.compile(r"\b(" + "|".join(_BURN_IN_FLAGS) + r")\b")
        fail(fields.sub(lambda m: _BURN_IN_FLAGS[m.group(1)], str(exc)))


def _plain(result: PublishResult) -> dict[str, Any]:
    return {
        "healthy": not result.faults,
        "faults": {u: f.to_json() for u, f in sorted(result.faults.items())},
        "pods": {u: list(p) for u, p in sorted(result.pods.items())},
        "event": result.event,
    }


def register(app: typer.Typer) -> None:
    app.command("remediator")(remediator)
    app.command("gpu-health")(gpu_health)
