"""Fixtures of the real-peer tests that only they use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peers.node import RealNode, real_node


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    """One real node (control plane, containerd, kubelet: peers/node.py) for every test that asks.

    Started on first use and stopped at the end of the session, when its teardown checks that no
    process, mount or cgroup of it is left. Tests leave it as they found it: their pods deleted,
    their device plugins stopped.
    """
    with real_node(tmp_path_factory.mktemp("node")) as running:
        yield running
