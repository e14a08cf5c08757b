"""`gpuchain gfd`: GPU feature discovery labels (NVIDIA GFD compatible) for this node or a simulated one."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuchain.commands._agent import nvml_release_dir_option, release_follower, stop_on_signals
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
from gpuchain.common.files import output_problem
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.config import (
    GFD_ENV_FLAGS,
    NODE_CONFIG_LABEL,
    Config,
    GfdFlags,
    MigStrategy,
    format_go_duration,
    parse_go_duration,
)
from gpuchain.deviceplugin.nodeconfig import ConfigSource, NodeLabelWatch
from gpuchain.discovery.labels import LabelError, Labels
from gpuchain.discovery.output import patch_node_labels, render_feature_file, write_feature_file
from gpuchain.discovery.service import Discovery, Sink, follow_config_label, read_machine_type, sleep_seconds
from gpuchain.kube.errors import KubeError

if TYPE_CHECKING:
    from rich.table import Table

log = logging.getLogger("gpuchain.discovery")


def _config(source: ConfigSource, label: str | None, mig_strategy: MigStrategy | None) -> Config:
    """The plugin's config file (the one the node label picks from a ConfigMap), then GFD's
    environment variables, then this command's flags."""
    config = source.load(label, os.environ)
    if mig_strategy is None:
        return config
    return config.model_copy(update={"flags": config.flags.model_copy(update={"mig_strategy": mig_strategy})})


def _node_label(node_name: str | None, config_dir: str | None) -> tuple[NodeLabelWatch | None, str | None, str | None]:
    """With --node-name and --config-dir: the watch on this Node, its config label now and the
    resourceVersion to watch from. Otherwise nothing to follow."""
    if not (node_name and config_dir):
        return None, None, None
    hint = "or leave out --node-name/NODE_NAME to pick the config by --config-key alone"
    watch = NodeLabelWatch(open_cluster(hint=hint), node_name)
    try:
        label, rv = watch.read()
    except Exception as exc:  # any API or connection failure: the label cannot be known, so do not guess
        fail(f"cannot read Node {node_name!r} for its {NODE_CONFIG_LABEL} label: {exc}; {hint}", code=1)
    return watch, label, rv


def _interval_source(option: str | None, config_file: Path | None) -> str:
    """Where the sleep interval came from, for an error message: option, variable or file."""
    if option:
        return "--sleep-interval"
    if "GFD_SLEEP_INTERVAL" in os.environ:
        return "GFD_SLEEP_INTERVAL"
    return f"{config_file or 'default config'}: flags.gfd.sleepInterval"


NFD_FEATURE_FILE = str(GfdFlags.model_fields["output_file"].default)
"""Where NFD on the host picks feature files up and turns them into node labels."""


def _table(labels: Labels, choice: BackendChoice) -> Table:
    from rich.table import Table

    table = Table(title=mark(f"{len(labels)} feature discovery labels", choice), title_justify="left")
    table.add_column("Label")
    table.add_column("Value")
    for key, value in labels.items():
        table.add_row(key, value)
    return table


def _node_sink(node: str) -> Sink:
    """Patch ``node``'s labels through the live cluster (in-cluster config or kubeconfig)."""
    cluster = open_cluster(hint="or leave out --node (the feature file is enough under NFD)")
    return lambda labels: patch_node_labels(cluster, node, labels)


def gfd(
    backend: BackendKind | None = node_backend_option(),
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
    if config_file and config_dir:
        fail("give --config-file or --config-dir, not both")
    stop = threading.Event()  # SIGTERM while starting (reading the Node, opening NVML) stops it once up
    stop_on_signals(stop.set)
    source = ConfigSource(
        Path(config_file) if config_file else None,
        Path(config_dir) if config_dir else None,
        config_key or None,
        config_naming,
        GFD_ENV_FLAGS,
    )
    watch, label, rv = _node_label(node_name, config_dir)
    try:
        config = _config(source, label, mig_strategy)
        gfd_flags = config.flags.gfd
        interval_ns = parse_go_duration(sleep_interval) if sleep_interval else gfd_flags.sleep_interval
        oneshot = oneshot or gfd_flags.oneshot
        interval = sleep_seconds(interval_ns, oneshot)
    except ConfigFileError as exc:
        fail(str(exc))
    except ValueError as exc:
        fail(f"{_interval_source(sleep_interval, source.path(label))}: {exc}")
    target = gfd_flags.output_file if output_file is None else output_file
    if target not in ("", "-") and (problem := output_problem(target)) is not None:
        fail(f"--output-file {target}: {problem}; or pass - for stdout, '' for none")
    choice = resolve_backend(backend)
    if node:
        refuse_implicit_sim(choice, f"node {node}'s labels on the live cluster")
    if target == NFD_FEATURE_FILE:
        refuse_implicit_sim(
            choice, f"NFD's feature file {target} (it becomes node labels)", "pass --output-file PATH, - or ''"
        )
    machine = read_machine_type(machine_type_file or gfd_flags.machine_type_file)
    sinks: list[Sink] = []
    if target == "-":
        head = f"# {SIMULATED} GPUs: these labels describe no real hardware\n" if choice.simulated else ""
        sinks.append(lambda labels: sys.stdout.write(head + render_feature_file(labels)))
    elif target:
        sinks.append(lambda labels: write_feature_file(target, labels))
    if node:
        sinks.append(_node_sink(node))
    gpus = backend_or_fail(choice.kind, preset, topology)
    discovery = Discovery(
        gpus, config, sinks, machine, timestamps=not (no_timestamp or gfd_flags.no_timestamp), stop=stop
    )
    try:
        if oneshot:
            try:
                labels = discovery.run_once()
            except (*BACKEND_ERRORS, LabelError, KubeError) as exc:
                fail(str(exc), code=1)
            except OSError as exc:
                fail(f"cannot write {target}: {exc.strerror or exc}; pass --output-file PATH or '-'", code=1)
            if target != "-":
                emit(labels, output, lambda: _table(labels, choice))
            return
        configure_logging(logging.INFO, log_format)
        every = (
            "once, then waiting (sleepInterval infinite)"
            if interval is None
            else f"every {format_go_duration(interval_ns)}"
        )
        log.info(mark(f"labelling {every}; Ctrl-C to stop", choice))
        if watch is not None:
            log.info("following Node %s's %s label (now %s)", watch.node_name, NODE_CONFIG_LABEL, label or "unset")
            follow_config_label(discovery, watch, lambda value: _config(source, value, mig_strategy), label, rv)
        from gpuchain.gpu.nvmlrelease import FollowerThread

        release = release_follower(release_dir, gpus, "gfd")
        releasing = FollowerThread(release).start() if release is not None else None
        try:
            discovery.run(interval)
        finally:
            if releasing is not None:
                releasing.stop()
        if interval is not None and target not in ("", "-"):
            _remove_feature_file(target)
    finally:
        gpus.close()


def _remove_feature_file(path: str) -> None:
    """On a clean stop of a looping run, take the labels away with the feature file, as NVIDIA's
    GFD does (not with oneshot or an infinite interval, where the file is meant to stay)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        logging.getLogger(__name__).warning("could not remove %s on stop: %s", path, exc)


def register(app: typer.Typer) -> None:
    app.command("gfd")(gfd)
