"""The `cluster` fixture (import ``cluster_fixture``): the contract tests run on MemoryCluster and on
LiveCluster and LeanCluster over a real kube-apiserver (tests/peers, k8s v1.37.2), never on kmock.

Not a conftest.py: several test folders have one, and a second module named ``conftest`` would
shadow the root conftest for ``from conftest import ...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from gpuchain.kube import Cluster, LiveCluster, MemoryCluster
from gpuchain.kube.lean import LeanCluster, from_kubeconfig


@pytest.fixture(name="cluster", params=["memory", "apiserver", "apiserver-lean"])
def cluster_fixture(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A fresh, empty cluster behind the port: in memory, or the real API server emptied for this
    test, through lightkube (LiveCluster) or the standard library (LeanCluster, the node agent's)."""
    if request.param == "memory":
        yield MemoryCluster()
        return
    live: LiveCluster = request.getfixturevalue("live_cluster")
    if request.param == "apiserver":
        yield live
        return
    lean = LeanCluster(from_kubeconfig(str(request.getfixturevalue("apiserver").kubeconfig)))
    try:
        yield lean
    finally:
        lean.close()


def eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for a controller's asynchronous work (garbage collection, a budget's status) to show.

    MemoryCluster does such work inside the write, so there the first check passes; the real
    control plane's controllers act within a second or two.
    """
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.1)
