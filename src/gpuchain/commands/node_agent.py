"""`gpuchain node-agent`: the node side of the chain in one process, its roles chosen by --roles.

Parses flags (and the environment variables NVIDIA's components read) into the agent layer's
settings, opens the one GPU backend, and runs the roles under the agent's supervisor
(``gpuchain.agent``). Everything a role does is the same code its separate command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from gpuchain.agent.build import ROLES, build, follow_release
from gpuchain.agent.node import Node
from gpuchain.agent.runtime import first_served, stop_early, stop_on_signals
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
from gpuchain.commands._backend import BACKEND_ERRORS, BackendKind, backend_problem, open_backend
from gpuchain.commands._cluster import mark, open_node_cluster, refuse_implicit_sim, resolve_backend
from gpuchain.commands._output import LogFormat, configure_logging, fail
from gpuchain.common.numbers import positive_seconds
from gpuchain.exporter import COLLECT_INTERVAL
from gpuchain.kube.port import Cluster

if TYPE_CHECKING:
    import typer

log = logging.getLogger("gpuchain.node-agent")

DEFAULT_ROLES = ("device-plugin", "gpu-health", "exporter", "gfd", "mig-manager", "validator")
"""Every role but the DRA plugin: the device plugin and the DRA driver never serve the same GPU."""
METRICS_PORT = 9400
"""The exporter's port (DCGM's): the node agent serves every role's metrics there."""
HELP = """Serve the node side of the chain (device plugin, GFD, exporter, GPU health, MIG manager, DRA
plugin, validator) from one process sharing one GPU backend."""
DETAILS = """One NVML session with one health event stream fanned out to the roles, one watch on the
Node, one pod-resources client and one metrics endpoint (the exporter's port). A role that fails is
logged and restarted alone with backoff; gpuchain_node_agent_role_failing says which fail
repeatedly. SIGHUP reloads the device plugin's config; SIGTERM stops every role cleanly. Flags
are parsed without pydantic (argparse), so the agent never loads it."""


def _roles(text: str) -> list[str]:
    """The roles named, in the agent's start order (the device plugin first); exit 2 on an unknown one."""
    named = [r.strip() for r in text.split(",") if r.strip()]
    unknown = [r for r in named if r not in ROLES]
    if unknown or not named:
        fail(f"--roles: unknown role(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(ROLES)}")
    return [r for r in ROLES if r in named]


def _memory_cluster(node_name: str) -> Cluster:
    """An in-process API holding this Node: a simulated node that reaches no cluster."""
    from gpuchain.kube.memory import MemoryCluster
    from gpuchain.kube.objects import Obj

    node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "labels": {}}}
    return MemoryCluster([node])


class _Parser(argparse.ArgumentParser):
    """argparse with gpuchain's usage errors: one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {self.prog}: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def parser() -> argparse.ArgumentParser:
    """The node agent's flags; a flag's environment variable (in brackets) is its default."""
    env = os.environ.get
    ap = _Parser(
        prog="gpuchain node-agent",
        description=" ".join(HELP.split()),
        epilog=" ".join(DETAILS.split()),
    )
    add = ap.add_argument
    add(
        "--roles",
        default=env("GPUCHAIN_ROLES", ",".join(DEFAULT_ROLES)),
        help=f"The roles this process serves, comma-separated, of: {', '.join(ROLES)} [GPUCHAIN_ROLES]. The "
        "device plugin starts first; a role that fails is restarted alone while the others keep serving.",
    )
    add(
        "--backend",
        "-b",
        choices=[k.value for k in BackendKind],
        default=None,
        help="nvml: this node's GPUs; sim: simulated GPUs (given explicitly: nothing simulated reaches a node by "
        "default).",
    )
    add("--preset", default=None, help="Simulated topology preset (default h100-80gb-x8).")
    add("--topology", default=None, help="Simulated topology from a YAML file instead of a preset.")
    add("--node-name", default=env("NODE_NAME"), help="This node (downward API spec.nodeName) [NODE_NAME].")
    add(
        "--memory-cluster",
        action="store_true",
        help="Keep every Kubernetes object in this process (a simulated node reaching no cluster), with --backend sim.",
    )
    add(
        "--socket-dir",
        type=Path,
        default=_path(env("DP_SOCKET_DIR")),
        help="device-plugin: the kubelet's device plugin directory [DP_SOCKET_DIR; /var/lib/kubelet/device-plugins].",
    )
    add(
        "--config-file",
        type=Path,
        default=_path(env("CONFIG_FILE")),
        help="device-plugin, gfd, gpu-health: NVIDIA device plugin config v1 (gpu-health reads its health "
        "section) [CONFIG_FILE].",
    )
    add(
        "--config-dir",
        type=Path,
        default=None,
        help="device-plugin, gfd: a mounted ConfigMap with several configs, picked by the node's "
        "nvidia.com/device-plugin.config label, else --config-key.",
    )
    add(
        "--config-key",
        default=env("NODE_CONFIG_KEY"),
        help="device-plugin, gfd: the default key of --config-dir [NODE_CONFIG_KEY].",
    )
    add(
        "--config-resource-naming",
        action="store_true",
        default=_env_flag("GPUCHAIN_CONFIG_RESOURCE_NAMING"),
        help="device-plugin, gfd: apply the config's resources, sharing rename and devices "
        "[GPUCHAIN_CONFIG_RESOURCE_NAMING].",
    )
    add(
        "--cdi-dir",
        type=Path,
        default=_path(env("CDI_DIR")),
        help="device-plugin, dra-plugin: the container runtime's CDI directory [CDI_DIR].",
    )
    add(
        "--metrics-port",
        "--port",
        type=_port,
        default=METRICS_PORT,
        help="Every role's metrics on this port at /metrics (the exporter's DCGM metrics, the repair loop's, each "
        f"role's state), /health; 0 picks a free port (default {METRICS_PORT}).",
    )
    add("--metrics-address", "--address", default="0.0.0.0", help="Address to listen on.")
    add(
        "--pod-resources-socket",
        default=None,
        help="exporter, gpu-health: the kubelet's pod-resources socket (default "
        "/var/lib/kubelet/pod-resources/kubelet.sock, used when it exists).",
    )
    add("--collect-interval", type=_seconds, default=COLLECT_INTERVAL, help="exporter: seconds between collections.")
    add(
        "--per-process",
        action="store_true",
        default=_env_flag("KUBERNETES_VIRTUAL_GPUS"),
        help="exporter: per-pod memory and SM share on shared GPUs from the GPUs' processes (needs hostPID), "
        "as dcgm-exporter's --kubernetes-virtual-gpus [KUBERNETES_VIRTUAL_GPUS].",
    )
    add(
        "--pods-from-api",
        action="store_true",
        help="exporter, with --per-process: name pods by UID from this node's Pod objects (needs RBAC to list pods).",
    )
    add(
        "--collectors",
        type=Path,
        default=None,
        help="exporter: metric set as a dcgm-exporter collectors CSV (default: the packaged set).",
    )
    add("--output-file", default=None, help="gfd: the NFD feature file (default: flags.gfd.outputFile); '' none.")
    add(
        "--sleep-interval",
        default=None,
        help="gfd: time between passes as a Go duration (default: flags.gfd.sleepInterval).",
    )
    add("--resync", type=_seconds, default=30.0, help="gpu-health: republish the pod map at least this often (s).")
    add("--repair", action="store_true", help="gpu-health: also run the per-GPU repair loop.")
    add(
        "--gate-startup",
        action="store_true",
        help="gpu-health: remove the startup taint once the chain is up on this node.",
    )
    add("--xid-resolution", default="", help="gpu-health: per-XID overrides (109=none, 13=reset@5/1h).")
    add(
        "--namespace",
        default=env("POD_NAMESPACE"),
        help="gpu-health: where the remediator keeps its status [POD_NAMESPACE].",
    )
    add("--mig-config-file", default=None, help="mig-manager: mig-parted v1 config (default: built-in layouts).")
    add(
        "--default-mig-config",
        default=env("DEFAULT_MIG_CONFIG"),
        help="mig-manager: the layout for a node without a nvidia.com/mig.config label [DEFAULT_MIG_CONFIG].",
    )
    add("--evict", action="store_true", help="mig-manager: evict pods that still use GPUs.")
    add("--registry-dir", type=Path, default=None, help="dra-plugin: the kubelet's plugins_registry.")
    add("--plugin-dir", type=Path, default=None, help="dra-plugin: where its endpoint socket goes.")
    add("--state-dir", type=Path, default=None, help="dra-plugin: the prepared-claims checkpoint.")
    add(
        "--dra-resync-seconds",
        type=_seconds,
        default=30.0,
        help="dra-plugin: republish interval (catches MIG re-layouts).",
    )
    add(
        "--gpu-shares",
        action="store_true",
        help="dra-plugin: publish each whole GPU for several claims to share, each with the memory and SMs it "
        "asks for (as gpuchain dra-plugin --gpu-shares).",
    )
    add(
        "--mps-root",
        type=Path,
        default=None,
        help="dra-plugin, with --gpu-shares: run an MPS control daemon per GPU while claims hold part of it, its "
        "directories under this host directory, which is the same path in the agent's pod and whose shm "
        "directory is the pod's /dev/shm (as gpuchain dra-plugin --mps-root).",
    )
    add(
        "--validations-dir",
        type=Path,
        default=None,
        help="validator, gpu-health --gate-startup: the ready files' directory.",
    )
    add(
        "--nvml-release-dir",
        default=env("GPUCHAIN_NVML_RELEASE_DIR"),
        help="The node's NVML release board, for gpuchain agents in other processes ('' for none; default "
        "/run/gpuchain/nvml) [GPUCHAIN_NVML_RELEASE_DIR].",
    )
    add(
        "--log-format",
        choices=[f.value for f in LogFormat],
        default=env("GPUCHAIN_LOG_FORMAT", "text"),
        help="Log lines as text or json [GPUCHAIN_LOG_FORMAT].",
    )
    return ap


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def _seconds(text: str) -> float:
    try:
        return positive_seconds("seconds", float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str]) -> int:
    """``gpuchain node-agent ARGS``: parse with argparse and run; the exit status."""
    args = parser().parse_args(list(argv))
    try:
        node_agent(args)
    except Exception as exc:
        from typer import Exit  # fail() ends a command with it, so only a failing agent loads typer

        if not isinstance(exc, Exit):
            raise
        return int(exc.exit_code)
    return 0


def settings_of(args: argparse.Namespace) -> dict[str, RoleSettings]:
    """Each role's settings from the parsed flags (exit 2 on a bad --xid-resolution)."""
    from gpuchain.gpu.xid import parse_overrides

    try:
        overrides = parse_overrides(args.xid_resolution)
    except ValueError as exc:
        fail(f"--xid-resolution: {exc}")
    if args.mps_root is not None and not args.gpu_shares:
        fail("--mps-root runs MPS daemons for GPU shares: it needs --gpu-shares")
    validations = args.validations_dir
    return {
        "device-plugin": DevicePluginSettings(
            socket_dir=args.socket_dir,
            config_file=args.config_file,
            config_dir=args.config_dir,
            config_key=args.config_key,
            config_naming=args.config_resource_naming,
            cdi_dir=args.cdi_dir,
        ),
        "gpu-health": GpuHealthSettings(
            config_file=args.config_file,
            resync=args.resync,
            namespace=args.namespace,
            repair=args.repair,
            xid_overrides=overrides,
            gate_startup=args.gate_startup,
            validations_dir=str(validations) if validations else None,
        ),
        "exporter": ExporterSettings(
            collectors=args.collectors,
            interval=args.collect_interval,
            per_process=args.per_process,
            pods_from_api=args.pods_from_api,
        ),
        "gfd": GfdSettings(
            config_file=args.config_file,
            config_dir=args.config_dir,
            config_key=args.config_key,
            config_naming=args.config_resource_naming,
            sleep_interval=args.sleep_interval,
            output_file=args.output_file,
        ),
        "mig-manager": MigManagerSettings(
            config_file=args.mig_config_file, evict=args.evict, default_config=args.default_mig_config
        ),
        "dra-plugin": DraPluginSettings(
            registry_dir=args.registry_dir,
            plugin_dir=args.plugin_dir,
            cdi_dir=args.cdi_dir,
            state_dir=args.state_dir,
            resync=args.dra_resync_seconds,
            gpu_shares=args.gpu_shares,
            mps_root=args.mps_root,
        ),
        "validator": ValidatorSettings(directory=validations),
    }


def node_agent(args: argparse.Namespace) -> None:
    """Run the roles ``args`` name until SIGTERM/SIGINT."""
    configure_logging(logging.INFO, LogFormat(args.log_format))
    early = stop_early()
    names = _roles(args.roles)
    choice = resolve_backend(BackendKind(args.backend) if args.backend else None)
    refuse_implicit_sim(choice, target="this node (the kubelet's sockets, the node's files, the cluster)")
    if args.memory_cluster and not choice.simulated:
        fail("--memory-cluster runs a simulated node: give it with --backend sim")
    wanted = settings_of(args)
    node_name = args.node_name or ("sim-node" if args.memory_cluster else None)
    settings = NodeSettings(
        node_name=node_name,
        release_dir=args.nvml_release_dir,  # None: the chart's board, opened after the first role serves
        pod_resources_socket=args.pod_resources_socket,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
    )
    if args.memory_cluster:
        name = node_name or "sim-node"
        cluster_of = lambda: _memory_cluster(name)  # noqa: E731
    else:
        cluster_of = lambda: open_node_cluster(hint="or run a simulated node with --backend sim --memory-cluster")  # noqa: E731
    if problem := backend_problem(choice.kind, preset=args.preset, topology=args.topology):
        fail(problem)
    try:
        gpus = open_backend(choice.kind, preset=args.preset, topology=args.topology)
    except BACKEND_ERRORS as exc:
        fail(str(exc), code=1)
    node = Node(gpus, settings=settings, cluster=cluster_of)
    node.in_process_reset = "gpu-health" in names
    log.info(mark(f"node agent: roles {', '.join(names)} on the {gpus.name} backend", choice))
    failed = asyncio.run(_serve(node, [(n, wanted[n]) for n in names], early))
    if failed is not None:
        port = args.metrics_port
        fail(f"cannot listen on {args.metrics_address}:{port}: {failed}; pick another --metrics-port", code=1)
    log.info("node agent stopped")


async def _serve(node: Node, roles: list[tuple[str, RoleSettings]], early: threading.Event) -> str | None:
    """Share the node's resources, supervise the roles until SIGTERM/SIGINT (``early``: one that
    came while starting), then let go of everything. The metrics endpoint opens, and the NVML
    release board is followed, once the first role (the device plugin) serves: as a separate
    agent's, the first concern is the kubelet. Why the endpoint could not open (its port taken),
    or None."""
    from gpuchain.agent.supervisor import RoleMetrics, Supervisor
    from gpuchain.common.supervise import cancel_and_wait

    stop = asyncio.Event()
    stop_on_signals(stop.set)
    if early.is_set():
        stop.set()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, node.reload, "SIGHUP")
    node.share(loop)
    failed: list[str] = []
    releasing: list[asyncio.Task[None]] = []

    async def after_first() -> None:
        first_served()
        try:
            await asyncio.to_thread(node.serve_metrics)
        except OSError as exc:
            failed.append(str(exc.strerror or exc))
            stop.set()
            return
        if (task := follow_release(node, "node-agent")) is not None:
            releasing.append(task)

    builders = [(name, lambda s=s: build(s, node)) for name, s in roles]
    supervisor = Supervisor(builders, after_first=after_first)
    node.metrics.add("node-agent", RoleMetrics(supervisor))
    try:
        await supervisor.run(stop)
    finally:
        await cancel_and_wait(*releasing)
        await node.close()
    return failed[0] if failed else None


def register(app: typer.Typer) -> None:
    """The command in gpuchain's typer app (its listing in ``gpuchain --help``, and a program that
    runs the app): its arguments go to ``main`` untouched. The ``gpuchain`` executable
    (``gpuchain.entry``) runs ``main`` before typer is even imported."""
    import typer

    def node_agent_command(ctx: typer.Context) -> None:
        raise typer.Exit(main(ctx.args))

    node_agent_command.__annotations__["ctx"] = typer.Context  # typer reads it; this module's globals have no typer
    app.command(
        "node-agent",
        help=HELP + "\n\n" + DETAILS,
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(node_agent_command)
