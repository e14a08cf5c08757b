"""Fixtures of the real-peer tests that only they use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.mps import install as install_mps_stand_ins
from fakes.mps import stop_daemons as stop_mps_daemons

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


@pytest.fixture
def node_mps_stand_ins(node: RealNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The ``mps_stand_ins`` of tests/conftest.py for a DRA plugin on the node: the stand-ins on PATH
    of the processes a test starts there, the MPS root to give it. The stand-in daemons started there
    run in the node's PID namespace and are numbered in it: those a test left are killed there."""
    root = install_mps_stand_ins(tmp_path, monkeypatch)
    yield root
    stop_mps_daemons(tmp_path, node.root / "proc", lambda pid: node.run(["/bin/sh", "-c", f"kill -9 {pid}"]))
