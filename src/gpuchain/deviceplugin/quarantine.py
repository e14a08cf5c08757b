"""Follow this Node's quarantine list (``gpuchain.io/gpu-quarantine``) into a health state.

The repair loop withholds a GPU while it drains, resets and burns it in; the device plugin and the
DRA plugin learn which from their own Node. ``QuarantineFollower`` reads the Node once, then
watches only it (field selector ``metadata.name``) and calls ``apply`` with the set of GPU UUIDs
whenever it changes. A failed or expired watch starts over with a fresh one (whose first ADDED
event resyncs), after ``retry_seconds``; the quarantine in force stays meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION, decode_quarantine
from gpuchain.kube.errors import GoneError
from gpuchain.kube.kinds import NODE
from gpuchain.kube.objects import Obj, annotations_of
from gpuchain.kube.port import Cluster

log = logging.getLogger(__name__)


def quarantine_of(node: Obj) -> frozenset[str]:
    """The GPU UUIDs the Node's repair loop withholds."""
    return decode_quarantine(annotations_of(node).get(QUARANTINE_ANNOTATION))


class QuarantineFollower:
    """Keeps ``apply`` fed with this Node's quarantined GPUs."""

    def __init__(
        self,
        cluster: Cluster,
        node_name: str,
        apply: Callable[[frozenset[str]], object],
        retry_seconds: float = 1.0,
        watch_seconds: float | None = 600.0,
    ) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.apply = apply
        self.retry_seconds = retry_seconds
        self.watch_seconds = watch_seconds
        self.current: frozenset[str] | None = None

    def _see(self, node: Obj) -> None:
        found = quarantine_of(node)
        if found != self.current:
            if found:
                log.info("Node %s: GPUs quarantined by the repair loop: %s", self.node_name, ", ".join(sorted(found)))
            self.current = found
            self.apply(found)

    async def follow(self) -> None:
        """Forever: a watch on this Node from the start (its ADDED event is the first read)."""
        rv: str | None = None
        this_node = f"metadata.name={self.node_name}"
        while True:
            try:
                async for event in self.cluster.watch(
                    NODE, resource_version=rv, timeout=self.watch_seconds, field_selector=this_node
                ):
                    rv = event.resource_version or rv
                    if event.type != "DELETED":
                        self._see(event.object)
            except GoneError:
                rv = None
            except Exception as exc:  # the API or the connection failed: keep the quarantine, retry
                log.warning("watching Node %s for quarantined GPUs failed (%s); retrying", self.node_name, exc)
                rv = None
                await asyncio.sleep(self.retry_seconds)
