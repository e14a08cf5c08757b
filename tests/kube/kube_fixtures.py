"""The `cluster` fixture (import ``cluster_fixture``): contract tests run on MemoryCluster and on LiveCluster over kmock.

Not a conftest.py: several test folders have one, and a second module named ``conftest`` would
shadow the root conftest for ``from conftest import ...``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kube.kmock_server import kmock_server

from gpuchain.kube import Cluster, LiveCluster, MemoryCluster

#: What kmock 0.8 does not do, so the LiveCluster run cannot check it (MemoryCluster still does).
KMOCK_LACKS = {
    "selectors": "kmock ignores labelSelector/fieldSelector",
    "metadata": "kmock sets no resourceVersion, uid, generation or creationTimestamp",
    "eviction": "kmock has no pods/eviction subresource",
    "status": "kmock does not separate the status subresource",
    "resume": "kmock keeps no resourceVersions to resume a watch from",
    "gc": "kmock does no ownerReference garbage collection",
    "logs": "kmock keeps no container logs (test_kube_live checks the log request over HTTP)",
    "strategic": "kmock merges a strategic merge patch as a JSON merge patch, replacing lists "
    "(test_kube_live checks the request's patch type over HTTP)",
}


@pytest.fixture(name="cluster", params=["memory", "kmock"])
def cluster_fixture(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A fresh, empty cluster behind the port."""
    if request.param == "memory":
        yield MemoryCluster()
        return
    with kmock_server() as (url, _emulator):
        live = LiveCluster.from_url(url)
        try:
            yield live
        finally:
            live.close()


def needs(cluster: Cluster, feature: str) -> None:
    """Skip on kmock, naming the missing feature; the MemoryCluster run still checks it."""
    if isinstance(cluster, LiveCluster):
        pytest.skip(f"LiveCluster over kmock: {KMOCK_LACKS[feature]}")
