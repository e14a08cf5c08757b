"""`gpuchain device-plugin`: run the kubelet device plugin on this node (or a simulated one)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuchain.agent.build import serve_alone
from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.roles import device_plugin as device_plugin_role
from gpuchain.agent.runtime import stop_early, stop_on_signals
from gpuchain.agent.settings import DevicePluginSettings, NodeSettings
from gpuchain.commands._agent import nvml_release_dir_option
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
    open_node_cluster,
    refuse_implicit_sim,
    resolve_backend,
)
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import LogFormat, configure_logging, emit, fail, log_format_option, output_option
from gpuchain.deviceplugin.allocate import CDI_STRATEGIES
from gpuchain.deviceplugin.plugin import DEFAULT_SOCKET_DIR
from gpuchain.deviceplugin.resources import Resource, ResourceMappingError, map_resources
from gpuchain.gpu.cdi import DEFAULT_CDI_DIR

if TYPE_CHECKING:
    from rich.table import Table

log = logging.getLogger("gpuchain.deviceplugin")


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


async def _idle() -> None:
    """Wait for SIGTERM/SIGINT: a node without GPUs keeps the pod running instead of crash-looping."""
    stop = asyncio.Event()
    stop_on_signals(stop.set)
    await stop.wait()


def device_plugin(
    backend: BackendKind | None = node_backend_option(),
    *,
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
    early = None if list_only else stop_early()
    settings = DevicePluginSettings(
        socket_dir=socket_dir,
        config_file=Path(config) if config else None,
        config_dir=Path(config_dir) if config_dir else None,
        config_key=config_key or None,
        config_naming=config_naming,
        cdi_dir=cdi_dir,
    )
    choice = resolve_backend(backend)
    if not list_only and socket_dir == DEFAULT_SOCKET_DIR:
        refuse_implicit_sim(
            choice,
            target=f"the kubelet's device plugin directory ({DEFAULT_SOCKET_DIR})",
            elsewhere="pass --socket-dir DIR or --list",
        )
    cluster = functools.cache(lambda: open_node_cluster(hint=_cluster_hint(config_dir)))
    # The config is read before the GPUs are opened: a bad config is named even on a node without GPUs.
    try:
        source = device_plugin_role.source_of(settings)
        watch, label, rv = device_plugin_role.node_label(settings, node_name=node_name, cluster=cluster, once=list_only)
        cfg = device_plugin_role.load(source, label=label, watch=watch)
    except RoleError as exc:
        fail(str(exc), code=exc.code)
    if not list_only and cdi_dir == DEFAULT_CDI_DIR and set(cfg.flags.plugin.device_list_strategy) & CDI_STRATEGIES:
        refuse_implicit_sim(
            choice,
            target=f"the container runtime's CDI directory ({DEFAULT_CDI_DIR})",
            elsewhere="pass --cdi-dir DIR or --list",
        )
    try:
        b = open_backend(choice.kind, preset=preset, topology=topology)
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
        emit(rows, fmt=output, table=lambda: _table(resources, choice))
        return
    node = Node(b, settings=NodeSettings(node_name=node_name, release_dir=release_dir), cluster=cluster)
    prepared = device_plugin_role.Prepared(config=cfg, source=source, watch=watch, label=label, resource_version=rv)

    async def role(stop: asyncio.Event, started: Callable[[], None]) -> None:
        await device_plugin_role.serve(settings, node=node, prepared=prepared, stop=stop, started=started)

    try:
        asyncio.run(serve_alone(role, node=node, component="device-plugin", early=early))
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


def _cluster_hint(config_dir: str | None) -> str:
    """What to do without a Kubernetes API: leave out the Node, which the plugin reads for the
    config label (with --config-dir) or the repair loop's quarantine list."""
    if config_dir:
        return "or leave out --node-name/NODE_NAME to pick the config by --config-key alone"
    return "or leave out --node-name/NODE_NAME (the plugin then ignores the repair loop's quarantine)"


def register(app: typer.Typer) -> None:
    app.command("device-plugin")(device_plugin)
