"""Follow one Node for as long as a node agent lives: every state of it, across watch restarts.

Several node agents ride on their own Node (the device plugin's config label and the repair
loop's quarantine list, the DRA plugin's quarantine list). They need the same thing from the API:
a watch on that Node alone (field selector ``metadata.name``), resumed from the last
resourceVersion when it ends (server timeout, ``watch_seconds``), started afresh when it expires
(410 Gone) or fails (a dropped connection, an API error: after ``retry_seconds``), whose opening
ADDED event resyncs whatever changed in between. ``node_states`` is that loop, once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from gpuchain.kube.errors import GoneError
from gpuchain.kube.kinds import NODE
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster

log = logging.getLogger(__name__)


async def node_states(
    cluster: Cluster,
    node_name: str,
    resource_version: str | None = None,
    *,
    watch_seconds: float | None = 600.0,
    retry_seconds: float = 1.0,
    purpose: str = "",
) -> AsyncGenerator[Obj, None]:
    """Yield this Node as each watch event shows it, forever (a deleted Node yields nothing: the
    agent's pod goes with it). ``purpose`` ("for quarantined GPUs") says in the warning logged when
    a watch fails what the agent keeps using meanwhile."""
    rv = resource_version
    this_node = f"metadata.name={node_name}"
    what = f"Node {node_name}{f' {purpose}' if purpose else ''}"
    while True:
        try:
            async for event in cluster.watch(
                NODE, resource_version=rv, timeout=watch_seconds, field_selector=this_node
            ):
                rv = event.resource_version or rv
                if event.type != "DELETED":
                    yield event.object
        except GoneError:
            log.info("watch on %s expired; watching afresh", what)
            rv = None
        except Exception as exc:  # the API or the connection failed: the caller keeps what it has, retry
            log.warning("watching %s failed (%s); retrying in %.0f s", what, exc, retry_seconds)
            rv = None
            await asyncio.sleep(retry_seconds)
