"""`gpuchain dra-plugin` (the DRA kubelet plugin) and `gpuchain dra-demo` (the same on a simulated node)."""

from __future__ import annotations

import asyncio
import enum
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuchain.agent.build import serve_alone
from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.roles import dra_plugin as dra_role
from gpuchain.agent.settings import DraPluginSettings, NodeSettings
from gpuchain.commands._agent import nvml_release_dir_option
from gpuchain.commands._backend import (
    BACKEND_ERRORS,
    DEFAULT_PRESET,
    BackendKind,
    open_backend,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import (
    BackendChoice,
    mark,
    node_backend_option,
    open_node_cluster,
    refuse_implicit_sim,
    resolve_backend,
)
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import LogFormat, configure_logging, emit_data, fail, log_format_option, output_option
from gpuchain.common.numbers import positive_seconds
from gpuchain.common.supervise import EXIT_CODE
from gpuchain.dra.checkpoint import CheckpointError
from gpuchain.dra.driver import DEFAULT_STATE_DIR, DraDriver
from gpuchain.dra.server import DEFAULT_PLUGIN_DIR, DEFAULT_REGISTRY_DIR
from gpuchain.dra.slices import SliceError
from gpuchain.gpu.cdi import DEFAULT_CDI_DIR
from gpuchain.gpu.health import DEFAULT_QUIET_SECONDS
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DEVICE_PLUGIN, DRA
from gpuchain.kube.errors import KubeError
from gpuchain.kube.port import Cluster

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuchain.exporter.server import MetricsServer

log = logging.getLogger("gpuchain.dra")


class UnlabelledNodes(enum.StrEnum):
    device_plugin = DEVICE_PLUGIN
    dra = DRA


class ClusterKind(enum.StrEnum):
    live = "live"
    memory = "memory"


def _open_cluster(kind: ClusterKind) -> Cluster:
    if kind is ClusterKind.memory:
        from gpuchain.kube.memory import MemoryCluster

        return MemoryCluster()
    return open_node_cluster(hint="or use --cluster memory")


def _refuse_implicit_sim(choice: BackendChoice, cluster: ClusterKind, dirs: list[tuple[Path, Path]]) -> None:
    """A simulated default publishes nothing to a live cluster and registers nothing with the real kubelet."""
    if cluster is ClusterKind.live:
        refuse_implicit_sim(choice, target="the live cluster (ResourceSlice)", elsewhere="pass --cluster memory")
    real = [str(given) for given, default in dirs if given == default]
    if real:
        refuse_implicit_sim(
            choice,
            target=f"the kubelet's directories ({', '.join(real)})",
            elsewhere="point --registry-dir, --plugin-dir, --cdi-dir and --state-dir elsewhere",
        )


def _serve_metrics(driver: DraDriver, address: str, port: int) -> MetricsServer:
    """The plugin's metrics on the exporter's HTTP server, on a daemon thread; a port that cannot be
    bound is one line and exit 1 (before the plugin registers)."""
    from gpuchain.exporter.server import MetricsServer

    try:
        server = MetricsServer(driver.metrics, host=address, port=port)
    except OSError as exc:
        fail(f"--metrics-port: cannot listen on {address}:{port}: {exc.strerror or exc}; pick another port", code=1)
    server.start_background()
    log.info("serving the DRA plugin's metrics on http://%s:%d/metrics", address, server.server_port)
    return server


def dra_plugin(
    backend: BackendKind | None = node_backend_option(),
    *,
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    node_name: str | None = typer.Option(
        None, "--node-name", envvar="NODE_NAME", help="This node (default: the simulated node, or the host name)."
    ),
    cluster: ClusterKind = typer.Option(
        ClusterKind.live, "--cluster", help="live: the API server (in-cluster or kubeconfig); memory: in-process only."
    ),
    registry_dir: Path = typer.Option(DEFAULT_REGISTRY_DIR, "--registry-dir", help="The kubelet's plugins_registry."),
    plugin_dir: Path = typer.Option(DEFAULT_PLUGIN_DIR, "--plugin-dir", help="Where the DRA endpoint socket goes."),
    cdi_dir: Path = typer.Option(DEFAULT_CDI_DIR, "--cdi-dir", envvar="CDI_DIR", help="Where claim CDI specs go."),
    state_dir: Path = typer.Option(
        DEFAULT_STATE_DIR, "--state-dir", help="Where the prepared-claims checkpoint lives."
    ),
    resync: float = typer.Option(
        30.0, "--resync-seconds", min=0.1, help="Republish interval (catches MIG re-layouts)."
    ),
    quiet: float = typer.Option(
        DEFAULT_QUIET_SECONDS,
        "--recovery-quiet-seconds",
        min=0,
        help="A recovered GPU (or a restored event stream) must stay quiet this long before its devices "
        "are published again; the device plugin's health.recoveryQuietSeconds.",
    ),
    dev_root: Path = typer.Option(
        Path("/"),
        "--dev-root",
        envvar="NVIDIA_DEV_ROOT",
        help="Where the driver's /dev lives (/ for a host driver, the driver container's root otherwise); "
        "optional control devices such as /dev/nvidia-modeset are looked up there.",
    ),
    unlabelled: UnlabelledNodes = typer.Option(
        UnlabelledNodes.device_plugin,
        "--unlabelled-nodes",
        help=f"Who serves a node without the {ALLOCATOR_LABEL} label: the device plugin (this driver then "
        f"publishes nothing there; label the node {ALLOCATOR_LABEL}={DRA} to hand it over), or this driver "
        "(only where no device plugin is deployed).",
    ),
    device_taints: bool = typer.Option(
        False,
        "--device-taints",
        help="Publish an unhealthy device with a taint (NoSchedule, or NoExecute where its fault needs the pods "
        "off) instead of leaving it out of the slice; needs Device.taints (Kubernetes >= 1.36, or the "
        "DRADeviceTaints feature gate), else the plugin falls back to leaving it out.",
    ),
    partitionable_mig: bool = typer.Option(
        False,
        "--partitionable-mig",
        help="Publish each MIG-capable GPU as partitionable devices: the whole GPU and every MIG profile "
        "placement, sharing its memory slices, compute slices and engines as counters, the MIG device created "
        "on prepare and destroyed on unprepare. The plugin then owns those GPUs' MIG layout (the MIG manager "
        "refuses layouts that would change them). Needs Kubernetes 1.35 or later with shared counters (the "
        "DRAPartitionableDevices feature gate, on by default from 1.36), else the plugin falls back to publishing "
        "the GPUs as before.",
    ),
    gpu_shares: bool = typer.Option(
        False,
        "--gpu-shares",
        help="Publish each whole GPU for several claims to share: a claim asks for part of its memory and SMs in "
        "capacity.requests (memory, multiprocessors) and gets them as MPS limits in its container (enforced "
        "where an MPS daemon serves the GPU; time-sliced otherwise). A claim that asks for no memory gets the "
        "GPU to itself. Needs consumable capacity (the DRAConsumableCapacity feature gate), else the plugin "
        "falls back to publishing the GPUs unshared.",
    ),
    mps_root: Path | None = typer.Option(
        None,
        "--mps-root",
        help="With --gpu-shares: run an MPS control daemon for each GPU while claims hold part of it, so the "
        "shares' MPS limits hold, its pipe and log directories under this host directory (mounted at the same "
        "path in the plugin's pod, its shm directory as the pod's /dev/shm); the claims' containers get the "
        "pipe directory and the shared memory mounted. Needs nvidia-cuda-mps-control and nvidia-smi from the "
        "node's driver (runtimeClassName nvidia, NVIDIA_DRIVER_CAPABILITIES with compute).",
    ),
    metrics_port: int = typer.Option(
        0,
        "--metrics-port",
        min=0,
        help="Serve the plugin's Prometheus metrics (prepare/unprepare latency histograms, devices per state) "
        "on this port at /metrics; 0 serves nothing.",
    ),
    metrics_address: str = typer.Option("0.0.0.0", "--metrics-address", help="With --metrics-port: the address."),
    release_dir: str = nvml_release_dir_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Serve GPUs and MIG devices to Kubernetes DRA as driver gpu.gpuchain.io.

    Publishes this node's ResourceSlice (its devices only while the node's GPUs are DRA's, never
    while a device plugin announces them), registers with the kubelet's plugin watcher, prepares
    claims as CDI specs and withdraws devices on XIDs (DP_DISABLE_HEALTHCHECKS /
    DP_ENABLE_HEALTHCHECKS as for the device plugin). SIGTERM stops cleanly.
    """
    configure_logging(logging.INFO, log_format)
    try:
        positive_seconds("--resync-seconds", resync)
    except ValueError as exc:
        fail(str(exc))
    if mps_root is not None and not gpu_shares:
        fail("--mps-root runs MPS daemons for GPU shares: it needs --gpu-shares")
    choice = resolve_backend(backend)
    kube = _open_cluster(cluster)  # a missing cluster config is named first: its fix holds for any backend
    _refuse_implicit_sim(
        choice,
        cluster,
        [
            (registry_dir, DEFAULT_REGISTRY_DIR),
            (plugin_dir, DEFAULT_PLUGIN_DIR),
            (cdi_dir, DEFAULT_CDI_DIR),
            (state_dir, DEFAULT_STATE_DIR),
        ],
    )
    try:
        b = open_backend(choice.kind, preset=preset, topology=topology)
    except BACKEND_ERRORS as exc:
        fail(str(exc))
    settings = DraPluginSettings(
        registry_dir=registry_dir,
        plugin_dir=plugin_dir,
        cdi_dir=cdi_dir,
        state_dir=state_dir,
        resync=resync,
        recovery_quiet_seconds=quiet,
        dev_root=dev_root,
        unlabelled=DRA if unlabelled is UnlabelledNodes.dra else DEVICE_PLUGIN,
        device_taints=device_taints,
        partitionable_mig=partitionable_mig,
        gpu_shares=gpu_shares,
        mps_root=mps_root,
    )
    node = Node(b, settings=NodeSettings(node_name=node_name, release_dir=release_dir), cluster=lambda: kube)
    try:
        driver, server = dra_role.driver_of(settings, node)
        metrics = _serve_metrics(driver, metrics_address, metrics_port) if metrics_port else None

        async def role(stop: asyncio.Event, started: Callable[[], None]) -> None:
            await dra_role.serve(driver, server=server, resync=resync, stop=stop, started=started)

        try:
            asyncio.run(serve_alone(role, node=node, component="dra-plugin"))
        finally:
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
    except RoleError as exc:
        fail(str(exc), code=exc.code)
    except (CheckpointError, SliceError) as exc:
        fail(str(exc))
    except KubeError as exc:
        fail(f"Kubernetes API: {exc}", code=1)
    except dra_role.CriticalLoopFailed:
        raise typer.Exit(EXIT_CODE) from None
    except OSError as exc:
        fail(f"cannot serve in {registry_dir} / {plugin_dir}: {exc}", code=1)
    finally:
        b.close()
    from gpuchain.commands._render import err_console

    err_console.print(mark("DRA plugin stopped", choice), style="dim")


def dra_demo(
    preset: str = typer.Option(DEFAULT_PRESET, "--preset", help="Simulated topology preset."),
    output: OutputFormat = output_option(),
) -> None:
    """Run the DRA path on a simulated node: ResourceSlice, registration, a claim prepared, an XID.

    Plugin and kubelet peer talk gRPC over unix sockets in a temporary directory; no GPU or
    cluster is needed. -o json prints the transcript (including the ResourceSlice and CDI spec).
    """
    from rich.panel import Panel

    from gpuchain.commands._render import console
    from gpuchain.sim.dra_demo import run_dra_demo

    people = output.for_people
    if people:
        console.print(Panel.fit("gpuchain DRA demo: GPUs -> ResourceSlice -> claim -> CDI (simulated)", style="bold"))
    try:
        transcript = asyncio.run(run_dra_demo(preset, console if people else None))
    except BACKEND_ERRORS as exc:
        fail(str(exc))
    except (LookupError, OSError, TimeoutError, RuntimeError) as exc:
        fail(f"DRA demo failed: {exc or type(exc).__name__}", code=1)
    emit_data(transcript, output)


def register(app: typer.Typer) -> None:
    app.command("dra-plugin")(dra_plugin)
    app.command("dra-demo")(dra_demo)
