"""Per-node config: the Node's ``nvidia.com/device-plugin.config`` label picks the plugin's config, live.

NVIDIA runs a config-manager sidecar that watches the label, writes the chosen file and signals
the plugin. gpuchain folds that into the plugin process: one fewer container, and a label change
goes through the very path SIGHUP takes (re-serve, re-register, health state kept).

- ``ConfigSource`` says where the config comes from (one file, or a mounted ConfigMap with keys)
  and, given the current label, which file applies; the decision itself is the pure
  ``select_config_key`` in ``gpuchain.api.config.v1.selection``.
- ``NodeLabelWatch`` turns a watch on Nodes (through the ``Cluster`` port) into the label's
  successive values for one Node, resuming and resyncing on its own.
- ``ConfigFollower`` keeps a running ``DevicePlugin`` on the config its source and label name:
  ``reload()`` for SIGHUP, ``follow()`` for label changes. A reload that fails (a label naming a
  missing key, a bad file, a config that does not fit the node) keeps the running config, logs
  the error and records a Warning Event on the Node.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.environment import ENV_FLAGS, EnvFlags
from gpuchain.api.config.v1.load import load_config
from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL, ConfigKeyError, choose_config_file
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.resources import ResourceMappingError
from gpuchain.kube import NODE, Cluster, labels_of, resource_version_of
from gpuchain.kube.follow import node_states
from gpuchain.kube.objects import Obj

if TYPE_CHECKING:  # feature discovery shares ConfigSource and NodeLabelWatch without the gRPC server
    from gpuchain.deviceplugin.plugin import DevicePlugin

log = logging.getLogger(__name__)

EVENT_COMPONENT = "nvidia-device-plugin"
"""``source.component`` of the Events the plugin records on its Node."""

REASON_NOT_FOUND = "DevicePluginConfigNotFound"
REASON_INVALID = "DevicePluginConfigInvalid"


def node_config_label(node: Obj | None) -> str | None:
    """The Node's config label value; None when the Node or the label is absent, or the value is empty."""
    if node is None:
        return None
    return labels_of(node).get(NODE_CONFIG_LABEL) or None


def node_ref(name: str) -> Obj:
    """A minimal Node object to record an Event about when no full object has been read."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


@dataclass(frozen=True, kw_only=True)
class ConfigSource:
    """Where the plugin's config comes from: one ``file``, or a ``directory`` (a mounted ConfigMap)
    whose key is picked by the node label, then ``cluster_default``, then ``default``, then the
    only key. Neither: every default. ``config_naming`` keeps the config's resource naming, which
    NVIDIA's plugin drops at start (see ``without_config_naming``)."""

    file: Path | None = None
    directory: Path | None = None
    cluster_default: str | None = None
    config_naming: bool = False
    variables: EnvFlags = ENV_FLAGS
    """The environment variables that override the file (the plugin's, or GFD's ``GFD_ENV_FLAGS``)."""

    def path(self, label: str | None) -> Path | None:
        """The file that applies with ``label`` on the Node. Raises ConfigFileError/ConfigKeyError."""
        if self.directory is None:
            return self.file
        return choose_config_file(self.directory, label=label, cluster_default=self.cluster_default)

    def load(self, label: str | None, env: Mapping[str, str]) -> Config:
        """The config that applies with ``label``, environment overrides applied."""
        return load_config(self.path(label), env=env, config_naming=self.config_naming, variables=self.variables)


class NodeLabelWatch:
    """The successive values of one Node's config label, from a watch on that Node.

    The watch asks for this Node by name (field selector ``metadata.name``), so the API server
    sends only its events, not every Node's.
    A watch that ends (server timeout, ``watch_seconds``) resumes from the last resourceVersion;
    one that fails (410 Gone, a dropped connection, an API error) starts over with a fresh watch,
    whose initial ADDED events resync the label: at once after a first 410, else after a jittered
    backoff from ``retry_seconds`` (``kube.follow``).
    """

    def __init__(
        self, cluster: Cluster, *, node_name: str, retry_seconds: float = 1.0, watch_seconds: float | None = 600.0
    ) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.retry_seconds = retry_seconds
        self.watch_seconds = watch_seconds
        self.node: Obj | None = None
        """The Node as last seen (for Events about it)."""
        self.observers: list[Callable[[Obj], object]] = []
        """Called with the Node on every read and watch event: what else of this Node the plugin
        follows (the repair loop's quarantine list) rides on this one watch."""

    def _seen(self, node: Obj) -> None:
        self.node = node
        for observe in self.observers:
            try:
                observe(node)
            except Exception:  # one observer's bug must not stop the label watch
                log.exception("Node %s: an observer of the node watch failed", self.node_name)

    def read(self) -> tuple[str | None, str | None]:
        """Get the Node now: (label value, resourceVersion to watch from). Raises the port's errors."""
        node = self.cluster.get(NODE, name=self.node_name)
        self._seen(node)
        return node_config_label(node), resource_version_of(node) or None

    def report(self, exc: ConfigFileError | ResourceMappingError, outcome: str = "keeping the running config") -> None:
        """Record a refused config as a Warning Event on the Node, saying what the plugin does
        about it (best effort: without the RBAC grant to create Events it only logs)."""
        reason = REASON_NOT_FOUND if isinstance(exc, ConfigKeyError) else REASON_INVALID
        node = self.node or node_ref(self.node_name)
        try:
            self.cluster.record_event(
                node, reason=reason, message=f"{exc}; {outcome}", type="Warning", component=EVENT_COMPONENT
            )
        except Exception as err:  # an Event is a courtesy; never let it stop the plugin
            log.warning("could not record a %s Event on Node %s: %s", reason, self.node_name, err)

    async def changes(
        self, current: str | None, resource_version: str | None = None
    ) -> AsyncGenerator[str | None, None]:
        """Yield the label's value each time it differs from ``current`` (None: label removed).

        A deleted Node yields nothing (the plugin keeps its config; its pod goes with the Node).
        """
        async for node in node_states(
            self.cluster,
            node_name=self.node_name,
            resource_version=resource_version,
            watch_seconds=self.watch_seconds,
            retry_seconds=self.retry_seconds,
        ):
            self._seen(node)
            label = node_config_label(node)
            if label != current:
                current = label
                yield label


class ConfigFollower:
    """Keeps a running DevicePlugin on the config its source (and its Node's label) names."""

    def __init__(
        self,
        plugin: DevicePlugin,
        *,
        source: ConfigSource,
        env: Mapping[str, str] | None = None,
        label: str | None = None,
        watch: NodeLabelWatch | None = None,
    ) -> None:
        """``label`` is the value the running config was chosen with; ``watch`` is None without a Node."""
        self.plugin = plugin
        self.source = source
        self.env = env
        self.label = label
        self.watch = watch
        self.failures: list[ConfigFileError | ResourceMappingError] = []
        """Reloads refused since start, each added once it is logged and its Event recorded."""
        self._lock = asyncio.Lock()

    async def reload(self, trigger: str) -> bool:
        """Re-read the config that applies now and apply it, as SIGHUP does.

        On any problem the running config stays, the error is logged (and recorded as a Warning
        Event on the Node when there is one) and the answer is False.
        """
        async with self._lock:
            label = self.label
            try:
                path = self.source.path(label)
                env = self.env if self.env is not None else os.environ
                new = load_config(path, env=env, config_naming=self.source.config_naming)
                for problem in new.plugin_problems():
                    raise ConfigFileError(str(path or "config"), line=None, field="", reason=problem)
                await self.plugin.reload(new)
            except (ConfigFileError, ResourceMappingError) as exc:
                log.error("%s: config not reloaded, keeping the running one: %s", trigger, exc)
                await self._warn(exc)
                self.failures.append(exc)  # last: a recorded failure has been logged and reported
                return False
        where = f" from {path}" if path else ""
        log.info("%s: config reloaded%s; %d resources registered", trigger, where, len(self.plugin.resources))
        return True

    async def follow(self, resource_version: str | None = None) -> None:
        """Reload on every change of the Node's label, until cancelled. Needs ``watch``."""
        if self.watch is None:
            raise RuntimeError("ConfigFollower.follow needs a NodeLabelWatch (give --node-name)")
        async for label in self.watch.changes(self.label, resource_version):
            self.label = label
            shown = f"{NODE_CONFIG_LABEL}={label}" if label else f"{NODE_CONFIG_LABEL} removed"
            await self.reload(f"node label {shown}")

    async def _warn(self, exc: ConfigFileError | ResourceMappingError) -> None:
        """Record the refused reload on the Node, when there is one."""
        if self.watch is not None:
            await asyncio.to_thread(self.watch.report, exc)
