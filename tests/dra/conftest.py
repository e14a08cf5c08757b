"""DRA test fixtures: a driver over a simulated node and an in-memory cluster, in short /tmp paths."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dra.fakeclock import QUIET, Clock
from fakes.driver_root import driver_dev

from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.kinds import RESOURCE_CLAIM
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import DRA
from gpuchain.kube.memory import MemoryCluster

NODE = "h100-node"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory under /tmp: unix socket paths are limited to ~107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster()


@pytest.fixture
def clock() -> Clock:
    return Clock()


DriverFactory = Callable[[SimBackend], DraDriver]


@pytest.fixture
def make_driver(cluster: MemoryCluster, short_dir: Path, clock: Clock) -> DriverFactory:
    """Build a driver (again, to model a plugin restart) over the same cluster, CDI dir and state dir,
    on the test clock with a ``QUIET`` second recovery quiet period."""

    def build(sim: SimBackend) -> DraDriver:
        config = DriverConfig(
            node=sim.topology.node,
            cdi_dir=short_dir / "cdi",
            state_dir=short_dir / "state",
            recovery_quiet_seconds=QUIET,
            dev_root=driver_dev(short_dir / "driver-root"),
            unlabelled=DRA,  # no Node in the cluster: a DRA-only node
        )
        return DraDriver(sim, cluster, config, clock)

    return build


Allocate = Callable[[str, str, list[str]], ClaimRef]


@pytest.fixture
def allocate(cluster: MemoryCluster) -> Allocate:
    """Create a ResourceClaim and write the allocation the scheduler would; returns the kubelet's ref."""

    def create(name: str, pool: str, devices: list[str]) -> ClaimRef:
        created = cluster.create(resource_claim(name, "default", count=len(devices)))
        cluster.patch_status(RESOURCE_CLAIM, name, allocation_status(pool, [("gpu", d) for d in devices]), "default")
        return ClaimRef("default", created["metadata"]["uid"], name)

    return create
