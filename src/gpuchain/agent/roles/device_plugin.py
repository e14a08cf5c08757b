"""The device plugin role: NVIDIA's device plugin config v1, served to the kubelet over gRPC.

``prepare`` reads what the plugin starts from (the Node's config label and quarantine list, the
config, checked against the environment's health switches); ``serve`` runs the plugin until
stopped: SIGHUP (``Node.reloads``) re-reads the config, and with a Node so does every change of
its config label (when the config comes from a directory); the GPUs the Node's repair loop
quarantines are withheld, followed through the same watch, from before the kubelet first sees a
device. A bad or missing config on reload keeps the running one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.settings import DevicePluginSettings
from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL
from gpuchain.common.supervise import cancel_and_wait, spawn
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.nodeconfig import ConfigFollower, ConfigSource, NodeLabelWatch
from gpuchain.deviceplugin.plugin import DEFAULT_SOCKET_DIR, DevicePlugin
from gpuchain.deviceplugin.quarantine import QuarantineFollower, ride
from gpuchain.deviceplugin.resources import ResourceMappingError
from gpuchain.gpu.cdi import DEFAULT_CDI_DIR
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.kube.allocator import DRA, allocator_of
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster

log = logging.getLogger("gpuchain.deviceplugin")

FIRST_LIST_WAIT = 1.0
"""Seconds the role waits, registered, for the kubelet's first ListAndWatch before it says it
serves: the node agent starts its other roles then, and their imports and first passes run on the
event loop that answers the kubelet (they delayed its first list by some 150 ms)."""


def source_of(settings: DevicePluginSettings) -> ConfigSource:
    """Where the config comes from: one file, or a ConfigMap directory whose key the Node's label picks."""
    if settings.config_file and settings.config_dir:
        raise RoleError("give --config-file or --config-dir, not both")
    return ConfigSource(
        file=settings.config_file,
        directory=settings.config_dir,
        cluster_default=settings.config_key,
        config_naming=settings.config_naming,
    )


@dataclass(kw_only=True)
class Prepared:
    """What the plugin starts from."""

    config: Config
    source: ConfigSource
    watch: NodeLabelWatch | None
    label: str | None
    resource_version: str | None


def node_label(
    settings: DevicePluginSettings, *, node_name: str | None, cluster: Callable[[], Cluster], once: bool = False
) -> tuple[NodeLabelWatch | None, str | None, str | None]:
    """With a Node: the watch on it (its repair loop's quarantine list; with a config directory also
    its config label), the label now and the resourceVersion to watch from. ``once`` (listing the
    resources) reads the Node only for the label. Without a Node: nothing to follow."""
    if not node_name or (once and not settings.config_dir):
        return None, None, None
    if settings.config_dir:
        hint = "or leave out --node-name/NODE_NAME to pick the config by --config-key alone"
        wanted = f"its {NODE_CONFIG_LABEL} label"
    else:
        hint = "or leave out --node-name/NODE_NAME (the plugin then ignores the repair loop's quarantine)"
        wanted = f"the repair loop's quarantine list ({QUARANTINE_ANNOTATION})"
    watch = NodeLabelWatch(cluster(), node_name=node_name)
    try:
        label, rv = watch.read()
    except Exception as exc:  # any API or connection failure: what to serve cannot be known, so do not guess
        raise RoleError(f"cannot read Node {node_name!r} for {wanted}: {exc}; {hint}", code=1) from None
    if settings.config_dir:
        log.info("Node %s: %s=%s", node_name, NODE_CONFIG_LABEL, label or "(unset)")
    return (None if once else watch), label, rv


def load(source: ConfigSource, *, label: str | None, watch: NodeLabelWatch | None) -> Config:
    """The config the label picks, checked: its health switches and the plugin's own problems.
    A config that cannot be used is RoleError (and a Warning Event on the Node, with a watch)."""
    try:
        config = source.load(label, os.environ)
    except ConfigFileError as exc:
        if watch is not None:
            watch.report(exc, "the device plugin did not start")
        raise RoleError(str(exc)) from None
    try:
        config.health.policy(os.environ)
    except ValueError as exc:
        raise RoleError(str(exc)) from None
    for problem in config.plugin_problems():
        raise RoleError(f"{source.path(label) or 'config'}: {problem}")
    return config


def prepare(settings: DevicePluginSettings, node: Node) -> Prepared:
    """Read the Node and the config (blocking: call it off the event loop). Raises RoleError."""
    source = source_of(settings)
    watch, label, rv = node_label(settings, node_name=node.name, cluster=node.cluster)
    return Prepared(
        config=load(source, label=label, watch=watch), source=source, watch=watch, label=label, resource_version=rv
    )


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
    settings: DevicePluginSettings,
    *,
    node: Node,
    prepared: Prepared,
    stop: asyncio.Event,
    started: Callable[[], None],
) -> None:
    """Serve until ``stop``; ``started()`` once every resource is served (and, when the kubelet is
    there, registered and its first device lists sent, or ``FIRST_LIST_WAIT`` passed). Raises
    ResourceMappingError when the config does not fit the node, OSError when the socket directory
    cannot be served."""
    watch, source = prepared.watch, prepared.source
    cdi_dir = settings.cdi_dir or DEFAULT_CDI_DIR
    socket_dir = settings.socket_dir or DEFAULT_SOCKET_DIR
    plugin = DevicePlugin(node.backend, config=prepared.config, socket_dir=socket_dir, cdi_dir=cdi_dir)
    if watch is not None:
        plugin.on_degraded = lambda reason: asyncio.to_thread(
            watch.report, ResourceMappingError(reason), "serving what still fits"
        )
        QuarantineFollower(watch.cluster, node_name=watch.node_name, apply=plugin.set_quarantined).attach(watch)
        follow_allocator(plugin, watch)
    follower = ConfigFollower(plugin, source=source, env=os.environ, label=prepared.label, watch=watch)

    async def reload(trigger: str) -> None:
        try:
            await follower.reload(trigger)
        except Exception:  # anything the follower does not turn into a refusal: log it, keep serving
            log.exception("%s: config not reloaded, keeping the running one", trigger)

    following: asyncio.Task[None] | None = None
    try:
        await plugin.start()
        for res in plugin.resources:
            log.info("serving %s: %d devices on %s", res.name, len(res.devices), socket_dir / res.endpoint)
        await plugin.listed(FIRST_LIST_WAIT)
        started()
        node.add_reload(reload)  # a SIGHUP that came while starting is served now
        if watch is not None:  # one watch on this Node: its config label (with a directory) and quarantine list
            rv = prepared.resource_version
            if source.directory is not None:
                following = spawn("device plugin: node watch", run=lambda: follower.follow(rv))
                label = prepared.label or "unset"
                log.info("following Node %s's %s label (now %s)", watch.node_name, NODE_CONFIG_LABEL, label)
            else:
                following = spawn(
                    "device plugin: node watch", run=lambda: ride(watch, label=prepared.label, resource_version=rv)
                )
            log.info("following Node %s's repair loop quarantine (%s)", watch.node_name, QUARANTINE_ANNOTATION)
        await stop.wait()
    finally:
        await node.remove_reload(reload)
        if following is not None:
            await cancel_and_wait(following)
        await plugin.stop()
        log.info("stopped; sockets removed")


async def run(settings: DevicePluginSettings, node: Node, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """The role in the node agent: prepare, then serve until ``stop``."""
    prepared = await asyncio.to_thread(prepare, settings, node)
    await serve(settings, node=node, prepared=prepared, stop=stop, started=started)
