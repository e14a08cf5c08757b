"""`gpuchain device-plugin`: run the kubelet device plugin on this node (or a simulated one)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuchain.commands._agent import nvml_release_dir_option, release_follower, settled, stop_on_signals
from gpuchain.commands._backend import (
    BACKEND_ERRORS,
    BackendKind,
    open_backend,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import (
    SIMULATED,
    BackendChoice,
    mark,
    node_backend_option,
    open_cluster,
    refuse_implicit_sim,
    resolve_backend,
)
from gpuchain.commands._output import (
    LogFormat,
    OutputFormat,
    configure_logging,
    emit,
    fail,
    log_format_option,
    output_option,
)
from gpuchain.common.supervise import spawn
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.allocate import CDI_STRATEGIES
from gpuchain.deviceplugin.config import NODE_CONFIG_LABEL, Config
from gpuchain.deviceplugin.nodeconfig import ConfigFollower, ConfigSource, NodeLabelWatch
from gpuchain.deviceplugin.plugin import DEFAULT_SOCKET_DIR, DevicePlugin
from gpuchain.deviceplugin.quarantine import QuarantineFollower, ride
from gpuchain.deviceplugin.resources import Resource, ResourceMappingError, map_resources
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.cdi import DEFAULT_CDI_DIR
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.kube.allocator import DRA, allocator_of
from gpuchain.kube.objects import Obj

if TYPE_CHECKING:
    from rich.table import Table

log = logging.getLogger("gpuchain.deviceplugin")


def follow_allocator(plugin: DevicePlugin, watch: NodeLabelWatch) -> None:
    """Keep the plugin off the node's GPUs while its Node gives them to the DRA driver
    (``gpuchain.io/gpu.allocator=dra``, ``kube.allocator``): decided from the Node the watch last
    read before the kubelet first sees a device, then on every change the watch brings."""
    plugin.handed_to_dra = allocator_of(watch.node) == DRA
    pending: set[asyncio.Task[None]] = set()  # held until done: the loop keeps only weak references

    def see(node: Obj) -> None:
        handed = allocator_of(node) == DRA
        if handed != plugin.handed_to_dra:
            task = asyncio.get_running_loop().create_task(plugin.hand_to_dra(handed))
            pending.add(task)
            task.add_done_callback(pending.discard)

    watch.observers.append(see)


async def serve(
    backend: GpuBackend,
    config: Config,
    source: ConfigSource,
    socket_dir: Path,
    label: str | None = None,
    watch: NodeLabelWatch | None = None,
    resource_version: str | None = None,
    release_dir: str = "",
    cdi_dir: Path | None = None,
) -> None:
    """Run until SIGTERM/SIGINT. SIGHUP re-reads the config, and with ``watch`` so does every change
    of the Node's config label (when the config comes from a directory); a bad or missing config
    keeps the running one. With ``watch`` the plugin also withholds the GPUs the Node's repair loop
    quarantines, followed through that same watch, from before the kubelet first sees a device.
    With ``release_dir`` the plugin lets go of NVML while gpu-health resets a GPU on the node."""
    plugin = DevicePlugin(backend, config, socket_dir, cdi_dir=cdi_dir)
    if watch is not None:
        plugin.on_degraded = lambda reason: asyncio.to_thread(
            watch.report, ResourceMappingError(reason), "serving what still fits"
        )
        QuarantineFollower(watch.cluster, watch.node_name, plugin.set_quarantined).attach(watch)
        follow_allocator(plugin, watch)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # Signals are ours before the kubelet can see the plugin: a SIGHUP's default action would
    # end the process, so one that comes while registering is kept and served once running.
    early_hup: list[str] = []
    loop.add_signal_handler(signal.SIGHUP, lambda: early_hup.append("SIGHUP"))
    stop_on_signals(stop.set)
    await plugin.start()
    for res in plugin.resources:
        log.info("serving %s: %d devices on %s", res.name, len(res.devices), socket_dir / res.endpoint)
    settled()
    follower = ConfigFollower(plugin, source, os.environ, label, watch)
    reloads: list[asyncio.Task[None]] = []

    async def reload(trigger: str) -> None:
        try:
            await follower.reload(trigger)
        except Exception:  # anything the follower does not turn into a refusal: log it, keep serving
            log.exception("%s: config not reloaded, keeping the running one", trigger)

    loop.add_signal_handler(signal.SIGHUP, lambda: reloads.append(loop.create_task(reload("SIGHUP"))))
    if early_hup:
        reloads.append(loop.create_task(reload("SIGHUP")))
    following = None
    if watch is not None:  # one watch on this Node: its config label (with a directory) and quarantine list
        if source.directory is not None:
            following = spawn("device plugin: node watch", lambda: follower.follow(resource_version))
            log.info("following Node %s's %s label (now %s)", watch.node_name, NODE_CONFIG_LABEL, label or "unset")
        else:
            following = spawn("device plugin: node watch", lambda: ride(watch, label, resource_version))
        log.info("following Node %s's repair loop quarantine (%s)", watch.node_name, QUARANTINE_ANNOTATION)
    release = release_follower(release_dir, backend, "device-plugin")
    releasing = spawn("device plugin: NVML release board", release.run) if release is not None else None
    try:
        await stop.wait()
    finally:
        for task in (following, releasing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await asyncio.gather(*reloads, return_exceptions=True)
        await plugin.stop()
        log.info("stopped; sockets removed")


def _summary(res: Resource) -> dict[str, object]:
    return {
        "resource": res.name,
        "endpoint": res.endpoint,
        "devices": len(res.devices),
        "units": len(res.unit_uuids),
        "sharing": res.sharing,
        "replicas": res.replicas,
        "ids": [d.id for d in res.devices],
    }


def _table(resources: list[Resource], choice: BackendChoice) -> Table:
    from rich.table import Table

    table = Table(title=mark("Resources this node announces", choice), title_justify="left")
    table.add_column("Resource", no_wrap=True)
    for col in ("Devices", "Physical", "Sharing", "Replicas"):
        table.add_column(col)
    for r in resources:
        table.add_row(r.name, str(len(r.devices)), str(len(r.unit_uuids)), r.sharing, str(r.replicas))
    return table


def _node_label(
    node_name: str | None, config_dir: str | None, once: bool
) -> tuple[NodeLabelWatch | None, str | None, str | None]:
    """With --node-name: the watch on this Node (its repair loop's quarantine list; with
    --config-dir also its config label), the label now and the resourceVersion to watch from.
    --list reads the Node only for the label (with --config-dir). Without a node: nothing to follow."""
    if not node_name or (once and not config_dir):
        return None, None, None
    if config_dir:
        hint = "or leave out --node-name/NODE_NAME to pick the config by --config-key alone"
        wanted = f"its {NODE_CONFIG_LABEL} label"
    else:
        hint = "or leave out --node-name/NODE_NAME (the plugin then ignores the repair loop's quarantine)"
        wanted = f"the repair loop's quarantine list ({QUARANTINE_ANNOTATION})"
    watch = NodeLabelWatch(open_cluster(hint=hint), node_name)
    try:
        label, rv = watch.read()
    except Exception as exc:  # any API or connection failure: what to serve cannot be known, so do not guess
        fail(f"cannot read Node {node_name!r} for {wanted}: {exc}; {hint}", code=1)
    if config_dir:
        log.info("Node %s: %s=%s", node_name, NODE_CONFIG_LABEL, label or "(unset)")
    return (None if once else watch), label, rv


async def _idle() -> None:
    """Wait for SIGTERM/SIGINT: a node without GPUs keeps the pod running instead of crash-looping."""
    stop = asyncio.Event()
    stop_on_signals(stop.set)
    await stop.wait()


def device_plugin(
    backend: BackendKind | None = node_backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    config: str | None = typer.Option(
        None,
        "--config-file",
        "--config",
        "-c",
        envvar="CONFIG_FILE",
        help="NVIDIA device plugin config v1 file (YAML or JSON), NVIDIA's --config-file.",
    ),
    config_dir: str | None = typer.Option(
        None,
        "--config-dir",
        help="A mounted ConfigMap with several configs: the node's nvidia.com/device-plugin.config label "
        "(with --node-name) picks one, else --config-key, else the 'default' key, else the only one.",
    ),
    config_key: str | None = typer.Option(
        None,
        "--config-key",
        envvar="NODE_CONFIG_KEY",
        help="The cluster default key of --config-dir (the ClusterPolicy's devicePlugin.config.default), "
        "used when the node has no nvidia.com/device-plugin.config label (default: the 'default' key, "
        "then the only one).",
    ),
    node_name: str | None = typer.Option(
        None,
        "--node-name",
        envvar="NODE_NAME",
        help="This node (downward API spec.nodeName). The plugin withholds the GPUs the node's repair loop "
        "quarantines (gpuchain.io/gpu-quarantine); with --config-dir its nvidia.com/device-plugin.config "
        "label also picks the key and relabelling reloads. One watch on the Node serves both (needs get/watch "
        "on nodes; create on events to report a refused config on the Node).",
    ),
    socket_dir: Path = typer.Option(
        DEFAULT_SOCKET_DIR, "--socket-dir", envvar="DP_SOCKET_DIR", help="The kubelet's device plugin socket directory."
    ),
    config_naming: bool = typer.Option(
        False,
        "--config-resource-naming",
        envvar="GPUCHAIN_CONFIG_RESOURCE_NAMING",
        help="Apply the config's resources, sharing rename and devices. NVIDIA's plugin ignores them "
        "(with a warning), and so does gpuchain without this option; give it to feature discovery too.",
    ),
    cdi_dir: Path = typer.Option(
        DEFAULT_CDI_DIR,
        "--cdi-dir",
        envvar="CDI_DIR",
        help="Where the plugin writes the CDI spec its names refer to under deviceListStrategy cdi-annotations "
        "or cdi-cri (a directory the container runtime reads specs from).",
    ),
    list_only: bool = typer.Option(
        False, "--list", help="Print the resources this config announces on this node and exit (serves nothing)."
    ),
    release_dir: str = nvml_release_dir_option(),
    output: OutputFormat = output_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Serve nvidia.com/gpu (and MIG / shared resources) to the kubelet.

    One gRPC endpoint per resource in --socket-dir, registered with its kubelet.sock and
    re-registered when the kubelet restarts. SIGHUP reloads the config, and with --node-name and
    --config-dir so does a change of the node's nvidia.com/device-plugin.config label; a bad or
    missing config keeps the running one. With --node-name the GPUs gpuchain's repair loop
    quarantines are withheld (MIG devices and replicas too). SIGTERM stops cleanly.
    Environment variables override the file as in NVIDIA's plugin (MIG_STRATEGY,
    DEVICE_LIST_STRATEGY, PASS_DEVICE_SPECS, DP_DISABLE_HEALTHCHECKS, ...).
    """
    level = logging.WARNING if list_only else logging.INFO
    configure_logging(level, log_format)
    if config and config_dir:
        fail("give --config-file or --config-dir, not both")
    source = ConfigSource(
        Path(config) if config else None, Path(config_dir) if config_dir else None, config_key or None, config_naming
    )
    choice = resolve_backend(backend)
    if not list_only and socket_dir == DEFAULT_SOCKET_DIR:
        refuse_implicit_sim(
            choice, f"the kubelet's device plugin directory ({DEFAULT_SOCKET_DIR})", "pass --socket-dir DIR or --list"
        )
    watch, label, rv = _node_label(node_name, config_dir, list_only)
    try:
        cfg = source.load(label, os.environ)
    except ConfigFileError as exc:
        if watch is not None:
            watch.report(exc, "the device plugin did not start")
        fail(str(exc))
    try:
        cfg.health.policy(os.environ)
    except ValueError as exc:
        fail(str(exc))
    for problem in cfg.plugin_problems():
        fail(f"{source.path(label) or 'config'}: {problem}")
    if not list_only and cdi_dir == DEFAULT_CDI_DIR and set(cfg.flags.plugin.device_list_strategy) & CDI_STRATEGIES:
        refuse_implicit_sim(
            choice, f"the container runtime's CDI directory ({DEFAULT_CDI_DIR})", "pass --cdi-dir DIR or --list"
        )
    try:
        b = open_backend(choice.kind, preset, topology)
    except BACKEND_ERRORS as exc:
        if cfg.flags.fail_on_init_error:
            fail(f"{exc} (set failOnInitError: false to keep running without GPUs)")
        log.error("no GPUs (%s); failOnInitError is false: serving nothing until stopped", exc)
        asyncio.run(_idle())
        return
    log.info("%s", mark(f"GPUs from the {choice.kind.value} backend", choice))
    if list_only:
        try:
            resources = map_resources(b.inventory(), cfg)
        except (ResourceMappingError, *BACKEND_ERRORS) as exc:
            fail(str(exc))
        finally:
            b.close()
        rows = [{**_summary(r), SIMULATED: choice.simulated} for r in resources]
        emit(rows, output, lambda: _table(resources, choice))
        return
    try:
        asyncio.run(serve(b, cfg, source, socket_dir, label, watch, rv, release_dir, cdi_dir))
    except ResourceMappingError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(
            f"cannot serve in {socket_dir}: {exc.strerror or exc}; --socket-dir must be the kubelet's device "
            "plugin directory, mounted read-write with room for a socket"
        )
    finally:
        b.close()
    log.info("device plugin stopped")


def register(app: typer.Typer) -> None:
    app.command("device-plugin")(device_plugin)
