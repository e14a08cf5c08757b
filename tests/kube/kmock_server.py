"""Run kmock's Kubernetes emulator on a real loopback HTTP port in a background thread.

The sync LiveCluster verbs block, so the server must not share the test's event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kmock

#: Resources the emulator must answer for even before any object of them exists (discovery, lists).
RESOURCES = (
    "v1/namespaces",
    "v1/nodes",
    "v1/pods",
    "v1/events",
    "v1/configmaps",
    "v1/serviceaccounts",
    "apps/v1/daemonsets",
    "apps/v1/deployments",
    "policy/v1/poddisruptionbudgets",
    "node.k8s.io/v1/runtimeclasses",
    "gpuchain.io/v1/clusterpolicies",
)


@contextmanager
def kmock_server() -> Iterator[tuple[str, Any]]:
    """Yield (base URL, emulator) for a kmock KubernetesEmulator served over HTTP on 127.0.0.1."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None
    box: dict[str, Any] = {}

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            for res in RESOURCES:
                emulator.resources[res] = {}
            box["url"] = str(server.url).rstrip("/")
            box["emulator"] = emulator
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("kmock server did not start")
    try:
        yield box["url"], box["emulator"]
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
