"""`gpuchain device-plugin`: run the kubelet device plugin on this node (or a simulated one)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import typer
from rich.table import Table

from gpuchain.commands._backend import (
    BACKEND_ERRORS,
    BackendKind,
    backend_option,
    open_backend,
    preset_option,
    topology_option,
)
from gpuchain.commands._output import OutputFormat, emit, err_console, fail, output_option
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.config import Config, choose_config_file, load_config
from gpuchain.deviceplugin.plugin import DEFAULT_SOCKET_DIR, DevicePlugin
from gpuchain.deviceplugin.resources import Resource, ResourceMappingError, map_resources
from gpuchain.gpu.backend import GpuBackend

log = logging.getLogger("gpuchain.deviceplugin")


async def serve(backend: GpuBackend, config: Config, config_path: str | None, socket_dir: Path) -> None:
    """Run until SIGTERM/SIGINT; SIGHUP re-reads the config file (a bad file keeps the old config)."""
    plugin = DevicePlugin(backend, config, socket_dir)
    await plugin.start()
    for res in plugin.resources:
        log.info("serving %s: %d devices on %s", res.name, len(res.devices), socket_dir / res.endpoint)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reloads: list[asyncio.Task[None]] = []

    async def reload() -> None:
        try:
            new = load_config(config_path, os.environ)
            await plugin.reload(new)
        except (ConfigFileError, ResourceMappingError) as exc:
            log.error("SIGHUP: config not reloaded, keeping the running one: %s", exc)
            return
        log.info("SIGHUP: config reloaded; %d resources registered", len(plugin.resources))

    loop.add_signal_handler(signal.SIGHUP, lambda: reloads.append(loop.create_task(reload())))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for task in reloads:
            await task
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


def _table(resources: list[Resource]) -> Table:
    table = Table(title="Resources this node announces", title_justify="left")
    table.add_column("Resource", no_wrap=True)
    for col in ("Devices", "Physical", "Sharing", "Replicas"):
        table.add_column(col)
    for r in resources:
        table.add_row(r.name, str(len(r.devices)), str(len(r.unit_uuids)), r.sharing, str(r.replicas))
    return table


async def _idle() -> None:
    """Wait for SIGTERM/SIGINT: a node without GPUs keeps the pod running instead of crash-looping."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def device_plugin(
    backend: BackendKind = backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    config: str | None = typer.Option(
        None, "--config", "-c", envvar="CONFIG_FILE", help="NVIDIA device plugin config v1 file (YAML)."
    ),
    config_dir: str | None = typer.Option(
        None, "--config-dir", help="A mounted ConfigMap with several configs; --config-key picks one."
    ),
    config_key: str | None = typer.Option(
        None,
        "--config-key",
        envvar="NODE_CONFIG_KEY",
        help="This node's nvidia.com/device-plugin.config label value (default: the 'default' key).",
    ),
    socket_dir: Path = typer.Option(
        DEFAULT_SOCKET_DIR, "--socket-dir", envvar="DP_SOCKET_DIR", help="The kubelet's device plugin socket directory."
    ),
    list_only: bool = typer.Option(
        False, "--list", help="Print the resources this config announces on this node and exit (serves nothing)."
    ),
    output: OutputFormat = output_option(),
) -> None:
    """Serve nvidia.com/gpu (and MIG / shared resources) to the kubelet.

    One gRPC endpoint per resource in --socket-dir, registered with its kubelet.sock and
    re-registered when the kubelet restarts. SIGHUP reloads --config; SIGTERM stops cleanly.
    Environment variables override the file as in NVIDIA's plugin (MIG_STRATEGY,
    DEVICE_LIST_STRATEGY, PASS_DEVICE_SPECS, DP_DISABLE_HEALTHCHECKS, ...).
    """
    level = logging.WARNING if list_only else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if config_dir:
            if config:
                raise typer.BadParameter("give --config or --config-dir, not both")
            config = str(choose_config_file(config_dir, config_key))
        cfg = load_config(config, os.environ)
    except (ConfigFileError, ValueError) as exc:
        fail(str(exc))
    try:
        b = open_backend(backend, preset, topology)
    except BACKEND_ERRORS as exc:
        if cfg.flags.fail_on_init_error:
            fail(f"{exc} (set failOnInitError: false to keep running without GPUs)", code=1)
        log.error("no GPUs (%s); failOnInitError is false: serving nothing until stopped", exc)
        asyncio.run(_idle())
        return
    if list_only:
        try:
            resources = map_resources(b.inventory(), cfg)
        except (ResourceMappingError, *BACKEND_ERRORS) as exc:
            fail(str(exc))
        finally:
            b.close()
        emit([_summary(r) for r in resources], output, lambda: _table(resources))
        return
    try:
        asyncio.run(serve(b, cfg, config, socket_dir))
    except ResourceMappingError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot serve in {socket_dir}: {exc}", code=1)
    finally:
        b.close()
    err_console.print("device plugin stopped", style="dim")


def register(app: typer.Typer) -> None:
    app.command("device-plugin")(device_plugin)
