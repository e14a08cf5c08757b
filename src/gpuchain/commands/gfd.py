"""`gpuchain gfd`: GPU feature discovery labels (NVIDIA GFD compatible) for this node or a simulated one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuchain.agent.build import serve_alone
from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.roles import gfd as gfd_role
from gpuchain.agent.runtime import stop_early
from gpuchain.agent.settings import GfdSettings, NodeSettings
from gpuchain.api.config.v1.flags import MigStrategy
from gpuchain.commands._agent import nvml_release_dir_option
from gpuchain.commands._backend import (
    BACKEND_ERRORS,
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
from gpuchain.commands._output import LogFormat, configure_logging, emit, fail, log_format_option, output_option
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.discovery.labels import LabelError, Labels
from gpuchain.gpu.absent import NoGpus
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError
from gpuchain.kube.errors import KubeError

if TYPE_CHECKING:
    from rich.table import Table


def _table(labels: Labels, choice: BackendChoice) -> Table:
    from rich.table import Table

    table = Table(title=mark(f"{len(labels)} feature discovery labels", choice), title_justify="left")
    table.add_column("Label")
    table.add_column("Value")
    for key, value in labels.items():
        table.add_row(key, value)
    return table


def gfd(
    backend: BackendKind | None = node_backend_option(),
    *,
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    config_file: str | None = typer.Option(
        None,
        "--config-file",
        envvar=["GFD_CONFIG_FILE", "CONFIG_FILE"],
        help="Device plugin config file (NVIDIA config v1, YAML or JSON).",
    ),
    config_dir: str | None = typer.Option(
        None,
        "--config-dir",
        help="The device plugin's mounted ConfigMap with several configs, as NVIDIA's operator gives GFD: "
        "the node's nvidia.com/device-plugin.config label (with --node-name) picks one, else --config-key, "
        "else the 'default' key, else the only one.",
    ),
    config_key: str | None = typer.Option(
        None,
        "--config-key",
        envvar="NODE_CONFIG_KEY",
        help="The cluster default key of --config-dir (the ClusterPolicy's devicePlugin.config.default).",
    ),
    node_name: str | None = typer.Option(
        None,
        "--node-name",
        envvar="NODE_NAME",
        help="This node (downward API spec.nodeName). With --config-dir: its nvidia.com/device-plugin.config "
        "label picks the key and a change of it relabels at once (needs get/watch on nodes).",
    ),
    config_naming: bool = typer.Option(
        False,
        "--config-resource-naming",
        envvar="GPUCHAIN_CONFIG_RESOURCE_NAMING",
        help="Apply the config's resources, sharing rename and devices, as the device plugin does with "
        "the same option (NVIDIA's GFD ignores them, with a warning).",
    ),
    mig_strategy: MigStrategy | None = typer.Option(
        None, "--mig-strategy", help="Override flags.migStrategy: none, single or mixed."
    ),
    oneshot: bool = typer.Option(False, "--oneshot", help="Label once, print the labels and exit."),
    sleep_interval: str | None = typer.Option(
        None,
        "--sleep-interval",
        help="Time between passes as a Go duration (60s, 1m30s) or 'infinite' to label once and stay up "
        "(default: flags.gfd.sleepInterval, GFD_SLEEP_INTERVAL).",
    ),
    output_file: str | None = typer.Option(
        None,
        "--output-file",
        help="NFD feature file to write (default: flags.gfd.outputFile); '-' writes to stdout, '' writes none.",
    ),
    node: str | None = typer.Option(
        None, "--node", help="Also patch this Node's labels directly (needs cluster access), e.g. --node $NODE_NAME."
    ),
    no_timestamp: bool = typer.Option(False, "--no-timestamp", help="Leave out nvidia.com/gfd.timestamp."),
    machine_type_file: str | None = typer.Option(
        None, "--machine-type-file", help="File with the machine's product name (default: flags.gfd.machineTypeFile)."
    ),
    release_dir: str = nvml_release_dir_option(),
    output: OutputFormat = output_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Compute NVIDIA GFD-compatible labels and write them as an NFD feature file or onto the Node.

    Runs on a simulated H100 node by default; try --preset h100-80gb-x8-mig-mixed --mig-strategy mixed
    --oneshot --output-file ''.
    """
    early = stop_early()  # SIGTERM while starting (reading the Node, opening NVML) stops it once up
    settings = GfdSettings(
        config_file=Path(config_file) if config_file else None,
        config_dir=Path(config_dir) if config_dir else None,
        config_key=config_key or None,
        config_naming=config_naming,
        mig_strategy=mig_strategy.value if mig_strategy is not None else None,
        sleep_interval=sleep_interval,
        output_file=output_file,
        patch_node=node,
        no_timestamp=no_timestamp,
        machine_type_file=machine_type_file,
        oneshot=oneshot,
    )
    choice = resolve_backend(backend)
    if node:
        refuse_implicit_sim(choice, target=f"node {node}'s labels on the live cluster")
    hint = (
        "or leave out --node (the feature file is enough under NFD)"
        if node
        else "or leave out --node-name/NODE_NAME to pick the config by --config-key alone"
    )
    try:
        gpus: GpuBackend = open_backend(choice.kind, preset=preset, topology=topology)
        init_error = None
    except GpuError as exc:  # the driver did not answer: failOnInitError, read with the config, decides
        gpus, init_error = NoGpus(str(exc)), exc
    except ConfigFileError as exc:
        fail(str(exc))
    gfd_node = Node(
        gpus,
        settings=NodeSettings(node_name=node_name, release_dir=release_dir),
        cluster=lambda: open_node_cluster(hint=hint),
    )
    try:
        try:
            prepared = gfd_role.prepare(settings, gfd_node)
        except RoleError as exc:
            fail(str(exc), code=exc.code)
        if init_error is not None:
            if prepared.discovery.config.flags.fail_on_init_error:
                fail(f"{init_error} (set GFD_FAIL_ON_INIT_ERROR=false to keep running without GPU labels)")
            gfd_role.log.error("no GPUs (%s); failOnInitError is false: labelling without GPU labels", init_error)
        target = prepared.target
        if target == gfd_role.NFD_FEATURE_FILE:
            refuse_implicit_sim(
                choice,
                target=f"NFD's feature file {target} (it becomes node labels)",
                elsewhere="pass --output-file PATH, - or ''",
            )
        if prepared.oneshot:
            try:
                labels = prepared.discovery.run_once()
            except (*BACKEND_ERRORS, LabelError, KubeError) as exc:
                fail(str(exc), code=1)
            except OSError as exc:
                fail(f"cannot write {target}: {exc.strerror or exc}; pass --output-file PATH or '-'", code=1)
            if target != "-":
                emit(labels, fmt=output, table=lambda: _table(labels, choice))
            return
        configure_logging(logging.INFO, log_format)

        async def role(stop: asyncio.Event, started: Callable[[], None]) -> None:
            await gfd_role.serve(settings, prepared=prepared, stop=stop, started=started)

        asyncio.run(serve_alone(role, node=gfd_node, component="gfd", early=early))
    finally:
        gpus.close()


def register(app: typer.Typer) -> None:
    app.command("gfd")(gfd)
