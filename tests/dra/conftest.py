"""DRA test fixtures: a driver over a simulated node and an in-memory cluster, in a short directory
(``short_dir``, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dra.build import build_driver
from dra.fakeclock import Clock

from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.kinds import RESOURCE_CLAIM
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.memory import MemoryCluster

NODE = "h100-node"


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
        return build_driver(sim, cluster, short_dir, clock)

    return build


Allocate = Callable[[str, str, list[str]], ClaimRef]


@pytest.fixture
def allocate(cluster: MemoryCluster) -> Allocate:
    """Create a ResourceClaim and write the allocation the scheduler would; returns the kubelet's ref."""

    def create(name: str, pool: str, devices: list[str]) -> ClaimRef:
        created = cluster.create(resource_claim(name, namespace="default", count=len(devices)))
        cluster.patch_status(
            RESOURCE_CLAIM,
            name=name,
            status=allocation_status(pool, [("gpu", d) for d in devices]),
            namespace="default",
        )
        return ClaimRef("default", created["metadata"]["uid"], name)

    return create
