"""Follow the API server's objects for as long as an agent lives: every event, across watch restarts.

Several node agents ride on a watch that must never end: the device plugin's config label and the
repair loop's quarantine list, the DRA plugin's quarantine list (``node_states``: one Node, by
field selector ``metadata.name``) and the MIG manager's Node and Pod watches (``events``). They
need the same thing from the API: a watch resumed from the last resourceVersion when it ends
(server timeout, ``watch_seconds``), started afresh when it expires (410 Gone) or fails (a dropped
connection, an API error), whose opening ADDED events resync whatever changed in between.

How soon it starts again is what keeps a sick API server from being hammered (issue 25: every
watch answered 410 for 20 s made the device plugin restart its Node watch 13 times a second, 1.6
CPU-seconds and 538 log lines). A watch that ends by its timeout resumes at once. The first 410
after a healthy watch re-lists at once (that is what 410 asks for: the resourceVersion was
compacted); a failure, or a 410 again before the new watch delivered anything, waits a
``Backoff``: ``retry_seconds``, doubling to ``max_retry_seconds``, with jitter. The cap is what
bounds how long an agent takes to notice the API server is back. A streak of failures logs its
first failure (for 410s also the first that waits) and its end; the attempts in between log at
DEBUG only, so an outage of any length costs two or three lines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from gpuchain.common.supervise import Backoff
from gpuchain.kube.errors import GoneError
from gpuchain.kube.kinds import NODE, Kind
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster, WatchEvent

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""The first wait after a failed watch."""
MAX_RETRY_SECONDS = 5.0
"""The longest wait between two tries: an agent sees the API server back within about this long."""


async def events(
    cluster: Cluster,
    *,
    kind: Kind,
    what: str,
    resource_version: str | None = None,
    field_selector: str | None = None,
    watch_seconds: float | None = 600.0,
    retry_seconds: float = RETRY_SECONDS,
    max_retry_seconds: float = MAX_RETRY_SECONDS,
) -> AsyncGenerator[WatchEvent, None]:
    """Yield every event of a watch on ``kind`` (``field_selector``), forever, as the module says.

    ``what`` names the watch in the log ("Node gpu-0 for quarantined GPUs")."""
    rv = resource_version
    backoff = Backoff(retry_seconds, cap=max_retry_seconds)
    expired = False  # a 410 was answered by re-listing at once; the next one before an event waits
    while True:
        try:
            async for event in cluster.watch(
                kind, resource_version=rv, timeout=watch_seconds, field_selector=field_selector
            ):
                if backoff.failures or expired:
                    if backoff.failures:
                        log.info("watching %s again after %d failed attempts", what, backoff.failures)
                    backoff.reset()
                    expired = False
                rv = event.resource_version or rv
                yield event
            continue  # ended by its timeout: resume from the last resourceVersion at once
        except GoneError:
            rv = None
            if not (expired or backoff.failures):
                expired = True
                log.info("watch on %s expired; watching afresh", what)
                continue
            wait = backoff.next()
            level = logging.INFO if backoff.failures == 1 else logging.DEBUG
            log.log(level, "watch on %s expired again; watching afresh in %.1f s", what, wait)
        except Exception as exc:  # the API or the connection failed: the caller keeps what it has, retry
            rv = None
            wait = backoff.next()
            level = logging.WARNING if backoff.failures == 1 else logging.DEBUG
            log.log(level, "watching %s failed (%s); retrying in %.1f s", what, exc, wait)
        await asyncio.sleep(wait)


async def node_states(
    cluster: Cluster,
    *,
    node_name: str,
    resource_version: str | None = None,
    watch_seconds: float | None = 600.0,
    retry_seconds: float = RETRY_SECONDS,
    max_retry_seconds: float = MAX_RETRY_SECONDS,
    purpose: str = "",
) -> AsyncGenerator[Obj, None]:
    """Yield this Node as each watch event shows it, forever (a deleted Node yields nothing: the
    agent's pod goes with it). ``purpose`` ("for quarantined GPUs") says in the warning logged when
    a watch fails what the agent keeps using meanwhile."""
    async for event in events(
        cluster,
        kind=NODE,
        what=f"Node {node_name}{f' {purpose}' if purpose else ''}",
        resource_version=resource_version,
        field_selector=f"metadata.name={node_name}",
        watch_seconds=watch_seconds,
        retry_seconds=retry_seconds,
        max_retry_seconds=max_retry_seconds,
    ):
        if event.type != "DELETED":
            yield event.object
