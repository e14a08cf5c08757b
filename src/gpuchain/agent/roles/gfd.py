"""The feature discovery role: NVIDIA GFD-compatible labels as an NFD feature file and/or on the Node.

The labels come from the device plugin's config (the file, or the key the Node's
``nvidia.com/device-plugin.config`` label picks from a ConfigMap directory, followed live), then
GFD's environment variables, then the settings. Passes run on a thread (``discovery.service``);
on a clean stop of a looping run the feature file goes with the labels, as NVIDIA's GFD does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.settings import GfdSettings
from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.durations import format_go_duration, parse_go_duration
from gpuchain.api.config.v1.environment import GFD_ENV_FLAGS
from gpuchain.api.config.v1.flags import GfdFlags, MigStrategy
from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL
from gpuchain.common.files import output_problem
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.nodeconfig import ConfigSource, NodeLabelWatch
from gpuchain.discovery.output import patch_node_labels, render_feature_file, write_feature_file
from gpuchain.discovery.service import Discovery, Sink, follow_config_label, read_machine_type, sleep_seconds

log = logging.getLogger("gpuchain.discovery")

NFD_FEATURE_FILE = GfdFlags().output_file
"""Where NFD on the host picks feature files up and turns them into node labels."""


def config_of(source: ConfigSource, *, label: str | None, mig_strategy: str | None) -> Config:
    """The plugin's config file (the one the node label picks from a ConfigMap), then GFD's
    environment variables, then the settings' MIG strategy."""
    config = source.load(label, os.environ)
    if mig_strategy is None:
        return config
    flags = dataclasses.replace(config.flags, mig_strategy=MigStrategy(mig_strategy))
    return dataclasses.replace(config, flags=flags)


def _interval_source(option: str | None, config_file: Path | None) -> str:
    """Where the sleep interval came from, for an error message: option, variable or file."""
    if option:
        return "--sleep-interval"
    if "GFD_SLEEP_INTERVAL" in os.environ:
        return "GFD_SLEEP_INTERVAL"
    return f"{config_file or 'default config'}: flags.gfd.sleepInterval"


@dataclass(kw_only=True)
class Prepared:
    """A discovery ready to label, and how often."""

    discovery: Discovery
    oneshot: bool
    """Label once and exit (``--oneshot``, ``flags.gfd.oneshot``)."""
    interval: float | None
    """Seconds between passes; None: no further pass (oneshot, or ``infinite``)."""
    every: str
    target: str
    """The feature file ('-' stdout, '' none)."""
    source: ConfigSource
    watch: NodeLabelWatch | None
    label: str | None
    resource_version: str | None


def prepare(settings: GfdSettings, node: Node) -> Prepared:
    """Read the Node's config label and the config; build the discovery (blocking). Raises RoleError."""
    if settings.config_file and settings.config_dir:
        raise RoleError("give --config-file or --config-dir, not both")
    source = ConfigSource(
        file=settings.config_file,
        directory=settings.config_dir,
        cluster_default=settings.config_key,
        config_naming=settings.config_naming,
        variables=GFD_ENV_FLAGS,
    )
    watch, label, rv = _node_label(settings, node)
    try:
        config = config_of(source, label=label, mig_strategy=settings.mig_strategy)
        gfd_flags = config.flags.gfd
        interval_ns = (
            parse_go_duration(settings.sleep_interval) if settings.sleep_interval else gfd_flags.sleep_interval
        )
        oneshot = settings.oneshot or gfd_flags.oneshot
        interval = sleep_seconds(interval_ns, oneshot)
    except ConfigFileError as exc:
        raise RoleError(str(exc)) from None
    except ValueError as exc:
        raise RoleError(f"{_interval_source(settings.sleep_interval, source.path(label))}: {exc}") from None
    target = gfd_flags.output_file if settings.output_file is None else settings.output_file
    if target not in ("", "-") and (problem := output_problem(target)) is not None:
        raise RoleError(f"--output-file {target}: {problem}; or pass - for stdout, '' for none")
    machine = read_machine_type(settings.machine_type_file or gfd_flags.machine_type_file)
    sinks: list[Sink] = []
    if target == "-":
        head = "# simulated GPUs: these labels describe no real hardware\n" if node.simulated else ""
        sinks.append(lambda labels: sys.stdout.write(head + render_feature_file(labels)))
    elif target:
        sinks.append(lambda labels: write_feature_file(target, labels))
    if settings.patch_node:
        cluster, patched = node.cluster(), settings.patch_node
        sinks.append(lambda labels: patch_node_labels(cluster, node=patched, labels=labels))
    timestamps = not (settings.no_timestamp or gfd_flags.no_timestamp)
    discovery = Discovery(backend=node.backend, config=config, sinks=sinks, machine=machine, timestamps=timestamps)
    every = (
        "once, then waiting (sleepInterval infinite)"
        if interval is None
        else f"every {format_go_duration(interval_ns)}"
    )
    return Prepared(
        discovery=discovery,
        oneshot=oneshot,
        interval=interval,
        every=every,
        target=target,
        source=source,
        watch=watch,
        label=label,
        resource_version=rv,
    )


def _node_label(settings: GfdSettings, node: Node) -> tuple[NodeLabelWatch | None, str | None, str | None]:
    """With a Node and a config directory: the watch on this Node, its config label now and the
    resourceVersion to watch from. Otherwise nothing to follow."""
    if not (node.name and settings.config_dir):
        return None, None, None
    hint = "or leave out --node-name/NODE_NAME to pick the config by --config-key alone"
    watch = NodeLabelWatch(node.cluster(), node_name=node.name)
    try:
        label, rv = watch.read()
    except Exception as exc:  # any API or connection failure: the label cannot be known, so do not guess
        raise RoleError(
            f"cannot read Node {node.name!r} for its {NODE_CONFIG_LABEL} label: {exc}; {hint}", code=1
        ) from None
    return watch, label, rv


async def serve(settings: GfdSettings, *, prepared: Prepared, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """Label every interval until ``stop``; then take the feature file away (a looping run's)."""
    discovery, watch = prepared.discovery, prepared.watch
    simulated = " (simulated)" if discovery.backend.name == "sim" else ""
    log.info("labelling %s; Ctrl-C to stop%s", prepared.every, simulated)
    if watch is not None:
        log.info("following Node %s's %s label (now %s)", watch.node_name, NODE_CONFIG_LABEL, prepared.label or "unset")
        follow_config_label(
            discovery,
            watch=watch,
            load=lambda value: config_of(prepared.source, label=value, mig_strategy=settings.mig_strategy),
            label=prepared.label,
            resource_version=prepared.resource_version,
        )
    passes = asyncio.ensure_future(asyncio.to_thread(discovery.run, prepared.interval))
    stopped = asyncio.ensure_future(stop.wait())
    started()
    try:
        await asyncio.wait({passes, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        discovery.stop.set()
        await passes
    if prepared.interval is not None and prepared.target not in ("", "-"):
        _remove_feature_file(prepared.target)


def _remove_feature_file(path: str) -> None:
    """On a clean stop of a looping run, take the labels away with the feature file, as NVIDIA's
    GFD does (not with oneshot or an infinite interval, where the file is meant to stay)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("could not remove %s on stop: %s", path, exc)


async def run(settings: GfdSettings, node: Node, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """The role: prepare, then label until ``stop``."""
    prepared = await asyncio.to_thread(prepare, settings, node)
    await serve(settings, prepared=prepared, stop=stop, started=started)
