"""Run kmock's Kubernetes emulator on a real loopback HTTP port in a background thread.

The sync LiveCluster verbs block, so the server must not share the test's event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kmock

#: Resources the emulator must answer for even before any object of them exists (discovery, lists),
#: and whether each is namespaced, as a real API server's discovery says.
RESOURCES = {
    "v1/namespaces": False,
    "v1/nodes": False,
    "v1/pods": True,
    "v1/events": True,
    "v1/configmaps": True,
    "v1/serviceaccounts": True,
    "v1/services": True,
    "apps/v1/daemonsets": True,
    "apps/v1/deployments": True,
    "policy/v1/poddisruptionbudgets": True,
    "node.k8s.io/v1/runtimeclasses": False,
    "gpuchain.io/v1/clusterpolicies": False,
}
#: The verbs discovery lists for every resource: clients such as kopf serve (watch) only
#: resources whose discovery entry says they can be listed and watched.
VERBS = ("get", "list", "watch", "create", "patch", "delete")


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
            for res, namespaced in RESOURCES.items():
                emulator.resources[res] = {"namespaced": namespaced, "verbs": set(VERBS)}
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


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig at ``path`` whose one context (``c``) talks to ``url`` without credentials, for
    a ``gpuchain`` process run against the emulator (or any loopback server) through KUBECONFIG."""
    path.write_text(
        f"apiVersion: v1\nkind: Config\nclusters: [{{name: k, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "current-context: c\n"
    )
    return path
