"""Fixtures shared by every layer's tests: simulated GPUs (the NVML fake is in fakes.fake_pynvml)
and the real Kubernetes control plane of tests/peers (built by scripts/build-peers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.fake_pynvml import nvml_over
from hypothesis import settings
from peers.apiserver import ApiServer, control_plane

from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import LiveCluster

__all__ = ["nvml_over"]  # older tests import it from here

# Property tests check answers, not speed: a loaded 2-core CI machine must not fail them on
# hypothesis's default 200 ms deadline. Tests that bound time (the fuzz suite's hang check) set
# their own deadline explicitly.
settings.register_profile("gpuchain", deadline=None)
settings.load_profile("gpuchain")


@pytest.fixture
def h100_sim() -> SimBackend:
    """A simulated HGX H100 node (8 x H100 80GB on NVSwitch)."""
    return SimBackend.from_preset("h100-80gb-x8")


@pytest.fixture
def mig_sim() -> SimBackend:
    """A simulated H100 node partly in MIG mode (the `h100-80gb-x8-mig-mixed` preset)."""
    return SimBackend.from_preset("h100-80gb-x8-mig-mixed")


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """etcd + kube-apiserver + kube-controller-manager (k8s v1.34.4) on loopback, once per session.

    Skips, naming the reason, only when a peer could not be built (see tests/peers/binaries.py).
    """
    with control_plane(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.fixture
def apiserver(kube_apiserver: ApiServer) -> ApiServer:
    """The session's control plane, emptied of what earlier tests wrote."""
    kube_apiserver.reset()
    return kube_apiserver


@pytest.fixture
def live_cluster(apiserver: ApiServer) -> Iterator[LiveCluster]:
    """LiveCluster on the real API server as the admin user, on an emptied cluster."""
    live = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    try:
        yield live
    finally:
        live.close()
