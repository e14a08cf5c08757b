"""`gpuchain node-agent`: the node side of the chain in one process, its roles chosen by --roles.

Parses flags (and the environment variables NVIDIA's components read) into the agent layer's
settings, opens the one GPU backend, and runs the roles under the agent's supervisor
(``gpuchain.agent``). Everything a role does is the same code its separate command runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from pathlib import Path

import typer

from gpuchain.agent.build import ROLES, build, follow_release
from gpuchain.agent.node import Node
from gpuchain.agent.runtime import stop_early, stop_on_signals
from gpuchain.agent.settings import (
    DevicePluginSettings,
    DraPluginSettings,
    ExporterSettings,
    GfdSettings,
    GpuHealthSettings,
    MigManagerSettings,
    NodeSettings,
    RoleSettings,
    ValidatorSettings,
)
from gpuchain.commands._agent import nvml_release_dir_option
from gpuchain.commands._backend import BACKEND_ERRORS, BackendKind, open_backend, preset_option, topology_option
from gpuchain.commands._cluster import mark, node_backend_option, open_cluster, refuse_implicit_sim, resolve_backend
from gpuchain.commands._output import LogFormat, configure_logging, fail, log_format_option
from gpuchain.kube.port import Cluster

log = logging.getLogger("gpuchain.node-agent")

DEFAULT_ROLES = ("device-plugin", "gpu-health", "exporter", "gfd", "mig-manager", "validator")
"""Every role but the DRA plugin: the device plugin and the DRA driver never serve the same GPU."""
METRICS_PORT = 9400
"""The exporter's port (DCGM's): the node agent serves every role's metrics there."""


def _roles(text: str) -> list[str]:
    """The roles named, in the agent's start order (the device plugin first); exit 2 on an unknown one."""
    named = [r.strip() for r in text.split(",") if r.strip()]
    unknown = [r for r in named if r not in ROLES]
    if unknown or not named:
        fail(f"--roles: unknown role(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(ROLES)}")
    return [r for r in ROLES if r in named]


def _pod_resources(given: str | None) -> str | None:
    """The pod-resources socket given, else the kubelet's when it exists (else none: no pod attribution)."""
    if given:
        return given
    from gpuchain.exporter.podresources import DEFAULT_SOCKET

    return DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None


def _memory_cluster(node_name: str) -> Cluster:
    """An in-process API holding this Node: a simulated node that reaches no cluster."""
    from gpuchain.kube.memory import MemoryCluster
    from gpuchain.kube.objects import Obj

    node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "labels": {}}}
    return MemoryCluster([node])


def node_agent(
    roles: str = typer.Option(
        ",".join(DEFAULT_ROLES),
        "--roles",
        envvar="GPUCHAIN_ROLES",
        help=f"The roles this process serves, comma-separated, of: {', '.join(ROLES)}. The device plugin "
        "starts first; a role that fails is restarted alone while the others keep serving.",
    ),
    backend: BackendKind | None = node_backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    node_name: str | None = typer.Option(
        None, "--node-name", envvar="NODE_NAME", help="This node (downward API spec.nodeName)."
    ),
    memory_cluster: bool = typer.Option(
        False,
        "--memory-cluster",
        help="Keep every Kubernetes object in this process (a simulated node reaching no cluster), with --backend sim.",
    ),
    socket_dir: Path | None = typer.Option(
        None,
        "--socket-dir",
        envvar="DP_SOCKET_DIR",
        help="device-plugin: the kubelet's device plugin socket directory [default: /var/lib/kubelet/device-plugins].",
    ),
    config_file: Path | None = typer.Option(
        None,
        "--config-file",
        envvar="CONFIG_FILE",
        help="device-plugin, gfd, gpu-health: NVIDIA device plugin config v1 (gpu-health reads its health section).",
    ),
    config_dir: Path | None = typer.Option(
        None,
        "--config-dir",
        help="device-plugin, gfd: a mounted ConfigMap with several configs, picked by the node's "
        "nvidia.com/device-plugin.config label, else --config-key.",
    ),
    config_key: str | None = typer.Option(
        None, "--config-key", envvar="NODE_CONFIG_KEY", help="device-plugin, gfd: the default key of --config-dir."
    ),
    config_naming: bool = typer.Option(
        False,
        "--config-resource-naming",
        envvar="GPUCHAIN_CONFIG_RESOURCE_NAMING",
        help="device-plugin, gfd: apply the config's resources, sharing rename and devices.",
    ),
    cdi_dir: Path | None = typer.Option(
        None, "--cdi-dir", envvar="CDI_DIR", help="device-plugin, dra-plugin: the container runtime's CDI directory."
    ),
    metrics_port: int = typer.Option(
        METRICS_PORT,
        "--metrics-port",
        "--port",
        min=0,
        max=65535,
        help="Every role's metrics on this port at /metrics (the exporter's DCGM metrics, the repair loop's, "
        "each role's state), /health; 0 picks a free port.",
    ),
    metrics_address: str = typer.Option("0.0.0.0", "--metrics-address", "--address", help="Address to listen on."),
    pod_resources_socket: str | None = typer.Option(
        None,
        "--pod-resources-socket",
        help="exporter, gpu-health: the kubelet's pod-resources socket "
        "[default: /var/lib/kubelet/pod-resources/kubelet.sock, used when it exists].",
    ),
    collect_interval: float = typer.Option(30.0, "--collect-interval", help="exporter: seconds between collections."),
    collectors: Path | None = typer.Option(
        None, "--collectors", help="exporter: metric set as a dcgm-exporter collectors CSV (default: the packaged set)."
    ),
    output_file: str | None = typer.Option(
        None, "--output-file", help="gfd: the NFD feature file (default: flags.gfd.outputFile); '' writes none."
    ),
    sleep_interval: str | None = typer.Option(
        None, "--sleep-interval", help="gfd: time between passes as a Go duration (default: flags.gfd.sleepInterval)."
    ),
    resync: float = typer.Option(30.0, "--resync", help="gpu-health: republish the pod map at least this often (s)."),
    repair: bool = typer.Option(False, "--repair", help="gpu-health: also run the per-GPU repair loop."),
    gate_startup: bool = typer.Option(
        False, "--gate-startup", help="gpu-health: remove the startup taint once the chain is up on this node."
    ),
    xid_resolution: str = typer.Option("", "--xid-resolution", help="gpu-health: per-XID overrides (109=none)."),
    namespace: str | None = typer.Option(
        None, "--namespace", envvar="POD_NAMESPACE", help="gpu-health: where the remediator keeps its status."
    ),
    mig_config_file: str | None = typer.Option(
        None, "--mig-config-file", help="mig-manager: mig-parted v1 config (default: built-in layouts)."
    ),
    default_mig_config: str | None = typer.Option(
        None, "--default-mig-config", envvar="DEFAULT_MIG_CONFIG", help="mig-manager: layout for an unlabelled node."
    ),
    evict: bool = typer.Option(False, "--evict", help="mig-manager: evict pods that still use GPUs."),
    registry_dir: Path | None = typer.Option(
        None, "--registry-dir", help="dra-plugin: the kubelet's plugins_registry."
    ),
    plugin_dir: Path | None = typer.Option(None, "--plugin-dir", help="dra-plugin: where its endpoint socket goes."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="dra-plugin: the prepared-claims checkpoint."),
    dra_resync: float = typer.Option(
        30.0, "--dra-resync-seconds", min=0.1, help="dra-plugin: republish interval (catches MIG re-layouts)."
    ),
    validations_dir: Path | None = typer.Option(
        None, "--validations-dir", help="validator, gpu-health --gate-startup: the ready files' directory."
    ),
    release_dir: str = nvml_release_dir_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Serve the node side of the chain (device plugin, GFD, exporter, GPU health, MIG manager, DRA
    plugin, validator) from one process sharing one GPU backend.

    One NVML session with one health event stream fanned out to the roles, one watch on the Node,
    one pod-resources client and one metrics endpoint (the exporter's port). A role that fails is
    logged and restarted alone with backoff; gpuchain_node_agent_role_failing says which fail
    repeatedly. SIGHUP reloads the device plugin's config; SIGTERM stops every role cleanly.
    """
    configure_logging(logging.INFO, log_format)
    early = stop_early()
    names = _roles(roles)
    choice = resolve_backend(backend)
    refuse_implicit_sim(choice, "this node (the kubelet's sockets, the node's files, the cluster)")
    if memory_cluster and not choice.simulated:
        fail("--memory-cluster runs a simulated node: give it with --backend sim")
    from gpuchain.gpu.xid import parse_overrides

    try:
        overrides = parse_overrides(xid_resolution)
    except ValueError as exc:
        fail(f"--xid-resolution: {exc}")
    wanted: dict[str, RoleSettings] = {
        "device-plugin": DevicePluginSettings(socket_dir, config_file, config_dir, config_key, config_naming, cdi_dir),
        "gpu-health": GpuHealthSettings(
            config_file,
            resync,
            namespace,
            repair,
            overrides,
            gate_startup=gate_startup,
            validations_dir=str(validations_dir) if validations_dir else None,
        ),
        "exporter": ExporterSettings(collectors, collect_interval),
        "gfd": GfdSettings(
            config_file, config_dir, config_key, config_naming, sleep_interval=sleep_interval, output_file=output_file
        ),
        "mig-manager": MigManagerSettings(mig_config_file, evict, default_config=default_mig_config),
        "dra-plugin": DraPluginSettings(registry_dir, plugin_dir, cdi_dir, state_dir, dra_resync),
        "validator": ValidatorSettings(validations_dir),
    }
    if memory_cluster:
        node_name = node_name or "sim-node"
    settings = NodeSettings(
        node_name=node_name,
        release_dir=release_dir,
        pod_resources_socket=_pod_resources(pod_resources_socket),
        metrics_address=metrics_address,
        metrics_port=metrics_port,
    )
    if memory_cluster:
        name = node_name or "sim-node"
        cluster_of = lambda: _memory_cluster(name)  # noqa: E731
    else:
        cluster_of = lambda: open_cluster(hint="or run a simulated node with --backend sim --memory-cluster")  # noqa: E731
    try:
        gpus = open_backend(choice.kind, preset, topology)
    except BACKEND_ERRORS as exc:
        fail(str(exc), code=1)
    node = Node(gpus, settings, cluster_of)
    node.in_process_reset = "gpu-health" in names
    try:
        node.serve_metrics()
    except OSError as exc:
        gpus.close()
        fail(f"cannot listen on {metrics_address}:{metrics_port}: {exc.strerror or exc}; pick another --metrics-port")
    log.info(mark(f"node agent: roles {', '.join(names)} on the {gpus.name} backend", choice))
    asyncio.run(_serve(node, [(n, wanted[n]) for n in names], early))
    log.info("node agent stopped")


async def _serve(node: Node, roles: list[tuple[str, RoleSettings]], early: threading.Event) -> None:
    """Share the node's resources, supervise the roles until SIGTERM/SIGINT (``early``: one that
    came while starting), then let go of everything."""
    from gpuchain.agent.supervisor import RoleMetrics, Supervisor

    stop = asyncio.Event()
    stop_on_signals(stop.set)
    if early.is_set():
        stop.set()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, node.reload, "SIGHUP")
    node.share(loop)
    supervisor = Supervisor([(name, lambda s=s: build(s, node)) for name, s in roles])  # type: ignore[misc]
    node.metrics.add("node-agent", RoleMetrics(supervisor))
    releasing = follow_release(node, "node-agent")
    try:
        await supervisor.run(stop)
    finally:
        if releasing is not None:
            releasing.cancel()
        await node.close()


def register(app: typer.Typer) -> None:
    app.command("node-agent")(node_agent)
