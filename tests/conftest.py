"""Fixtures shared by every layer's tests: simulated GPUs (the NVML fake is in fakes.fake_pynvml)
and the real Kubernetes control plane of tests/peers (built by scripts/build-peers)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.driver_root import driver_dev
from fakes.fake_pynvml import nvml_over
from fakes.mps import install as install_mps_stand_ins
from fakes.mps import stop_daemons as stop_mps_daemons
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from peers.apiserver import ApiServer, control_plane

from gpuchain.common.scratch import scratch_dir
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import LiveCluster

__all__ = ["nvml_over"]  # older tests import it from here

# Hypothesis profiles. Property tests check answers, not speed: a loaded 2-core CI machine must not
# fail them on hypothesis's default 200 ms deadline (tests that bound time, such as the fuzz suite's
# hang check, set their own deadline). Pick one with --hypothesis-profile=NAME.
# - "dev", the default: new random draws each run and hypothesis's own database in .hypothesis/,
#   so a developer's run keeps looking for new failures and replays the ones it found.
# - "ci", in scripts/test and wherever hypothesis detects a CI service (CI=..., GITLAB_CI=..., it
#   then loads its own profile of that name, replaced here): the same draws on every run
#   (derandomize: seeded from each test's source, so only a change to the test, hypothesis or Python
#   changes them) and no database, so a red run means a change broke something, never an unlucky
#   draw. Hypothesis uses no example database with fixed draws (derandomize or a seed turns it off),
#   so inputs that once found a difference are kept as reviewed files and replayed as explicit
#   examples by the tests that found them (tests/peers/nvidia-config-examples/), under every profile.
# - "explore", for scripts/explore-config-differences: random draws, GPUCHAIN_EXPLORE_EXAMPLES
#   examples per test (default 10000) and a writable database of its own, never run in CI.
# Each is built on hypothesis's "default" profile, not on whatever is loaded when this file is read
# (hypothesis's own "ci" profile under CI, which would make "dev" and "explore" derandomized too).
_BASE = settings.get_profile("default")
_IN_CI = settings.get_current_profile_name() == "ci"
settings.register_profile("dev", _BASE, deadline=None)
settings.register_profile(
    "ci", _BASE, deadline=None, derandomize=True, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "explore",
    _BASE,
    deadline=None,
    max_examples=int(os.environ.get("GPUCHAIN_EXPLORE_EXAMPLES", "10000")),
    database=DirectoryBasedExampleDatabase(Path(__file__).resolve().parents[1] / ".hypothesis" / "explore"),
)
settings.load_profile("ci" if _IN_CI else "dev")


@pytest.fixture
def h100_sim() -> SimBackend:
    """A simulated HGX H100 node (8 x H100 80GB on NVSwitch)."""
    return SimBackend.from_preset("h100-80gb-x8")


@pytest.fixture
def mig_sim() -> SimBackend:
    """A simulated H100 node partly in MIG mode (the `h100-80gb-x8-mig-mixed` preset)."""
    return SimBackend.from_preset("h100-80gb-x8-mig-mixed")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A new directory short enough for unix sockets (``scratch_dir``: $TMPDIR when it fits, else
    /tmp), removed when the test ends, with the sockets and files its stopped processes left.

    pytest's ``tmp_path`` is too long for a socket path (107 bytes at most). A test stops what it
    started inside itself; a fixture that starts a process here asks for ``short_dir`` so that
    pytest stops that process first (fixtures are torn down in reverse order). A process still
    writing here as it goes is an error of the test, not something to ignore: only an entry that
    vanished while the tree was removed is tolerated.
    """
    path = scratch_dir("gc-")
    yield path
    shutil.rmtree(path, onerror=_vanished_is_fine)


def _vanished_is_fine(_function: object, _path: str, info: tuple[type[BaseException], BaseException, object]) -> None:
    """``shutil.rmtree``'s error handler: an entry already gone (a socket its server unlinked) counts as removed."""
    if not isinstance(info[1], FileNotFoundError):
        raise info[1]


@pytest.fixture
def mps_stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """NVIDIA's MPS control program and nvidia-smi as recording stand-ins on PATH (``fakes.mps``);
    the MPS root to use. The stand-in daemons still running after the test are stopped."""
    root = install_mps_stand_ins(tmp_path, monkeypatch)
    yield root
    stop_mps_daemons(tmp_path)


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    """A driver root with its control device nodes (``driver_dev``'s default three)."""
    return driver_dev(tmp_path / "driver-root")


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """etcd + kube-apiserver + kube-controller-manager (k8s v1.37.2) on loopback, once per session.

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
