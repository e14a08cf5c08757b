"""Follow this Node's quarantine list (``gpuchain.io/gpu-quarantine``) into a health state.

The repair loop withholds a GPU while it drains, resets and burns it in; the device plugin and the
DRA plugin learn which from their own Node. ``QuarantineFollower`` calls ``apply`` with the set of
GPU UUIDs whenever it changes. It follows the Node one of two ways:

- ``attach(watch)``: on a ``NodeLabelWatch`` the process already has (the device plugin's watch on
  its Node for the config label): every Node that watch reads or is sent updates the quarantine,
  so one watch serves both. ``ride(watch, ...)`` drives that watch when nothing else does (no
  ``--config-dir``: the label picks no config, but the quarantine list still matters);
- ``follow()``: a watch of its own on this Node (field selector ``metadata.name``), for a process
  without another (the DRA plugin). A failed or expired watch starts over with a fresh one (whose
  first ADDED event resyncs), paced as ``kube.follow`` says; the quarantine in force stays meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION, decode_quarantine
from gpuchain.kube.follow import node_states
from gpuchain.kube.objects import Obj, annotations_of
from gpuchain.kube.port import Cluster

if TYPE_CHECKING:  # the DRA plugin imports this module without the device plugin's config layer
    from gpuchain.deviceplugin.nodeconfig import NodeLabelWatch

log = logging.getLogger(__name__)


def quarantine_of(node: Obj) -> frozenset[str]:
    """The GPU UUIDs the Node's repair loop withholds."""
    return decode_quarantine(annotations_of(node).get(QUARANTINE_ANNOTATION))


class QuarantineFollower:
    """Keeps ``apply`` fed with this Node's quarantined GPUs."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        node_name: str,
        apply: Callable[[frozenset[str]], object],
        retry_seconds: float = 1.0,
        watch_seconds: float | None = 600.0,
        on_node: Callable[[Obj], object] | None = None,
    ) -> None:
        """``on_node``: called with every Node read, for what else the plugin follows on it (the DRA
        plugin: whether the node's GPUs are its own, ``kube.allocator``)."""
        self.on_node = on_node
        self.cluster = cluster
        self.node_name = node_name
        self.apply = apply
        self.retry_seconds = retry_seconds
        self.watch_seconds = watch_seconds
        self.current: frozenset[str] | None = None

    def see(self, node: Obj) -> None:
        """Take the quarantine list of ``node`` (this Node as just read); ``apply`` when it changed."""
        if self.on_node is not None:
            self.on_node(node)
        found = quarantine_of(node)
        if found != self.current:
            if found:
                log.info("Node %s: GPUs quarantined by the repair loop: %s", self.node_name, ", ".join(sorted(found)))
            elif self.current:
                log.info("Node %s: the repair loop released every GPU", self.node_name)
            self.current = found
            self.apply(found)

    def attach(self, watch: NodeLabelWatch) -> None:
        """Follow through ``watch`` instead of a watch of its own: the Node it last read now, and
        every Node it reads or is sent from here on."""
        watch.observers.append(self.see)
        if watch.node is not None:
            self.see(watch.node)

    async def follow(self) -> None:
        """Forever: a watch on this Node from the start (its ADDED event is the first read), each Node
        taken on a worker thread."""
        async for node in node_states(
            self.cluster,
            node_name=self.node_name,
            watch_seconds=self.watch_seconds,
            retry_seconds=self.retry_seconds,
            purpose="for quarantined GPUs",
        ):
            try:
                # off the loop: ``apply`` and ``on_node`` take the plugin's lock, which a Prepare holds
                # while it waits on this loop for its MPS daemon (``dra.mps``), and may write slices
                await asyncio.to_thread(self.see, node)
            except Exception:  # applying failed: log it, keep following (the next change applies)
                log.exception("Node %s: applying the quarantine list failed", self.node_name)


async def ride(watch: NodeLabelWatch, *, label: str | None, resource_version: str | None = None) -> None:
    """Drive ``watch`` for its observers alone, forever: for a plugin whose config no label picks
    (no ``--config-dir``), so no config follower reads the watch, but whose quarantine must follow
    the Node. Label changes are ignored (the single config file applies whatever the label says)."""
    async for value in watch.changes(label, resource_version):
        log.debug("Node %s: config label now %s; no --config-dir, so it picks nothing", watch.node_name, value)
