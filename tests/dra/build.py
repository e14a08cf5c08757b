"""The DRA driver the tests run: a DRA-only node's driver over a cluster, CDI and state directories
under ``short_dir`` (unix socket paths stay short), on the test clock with a ``QUIET`` second
recovery quiet period; ``options`` turn on what a test is about (``partitionable_mig``, ``gpu_shares``,
``mps_root``). And a claim the scheduler allocated GPU shares to (``shared_claim``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra.fakeclock import QUIET, Clock
from fakes.driver_root import driver_dev

from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.kinds import RESOURCE_CLAIM
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import DRA
from gpuchain.kube.memory import MemoryCluster


def build_driver(
    sim: SimBackend, cluster: MemoryCluster, short_dir: Path, clock: Clock, **options: bool | Path
) -> DraDriver:
    config = DriverConfig(
        node=sim.topology.node,
        cdi_dir=short_dir / "cdi",
        state_dir=short_dir / "state",
        recovery_quiet_seconds=QUIET,
        dev_root=driver_dev(short_dir / "driver-root"),
        unlabelled=DRA,  # no Node in the cluster: a DRA-only node
        **options,
    )
    return DraDriver(sim, cluster=cluster, config=config, clock=clock)


def shared_claim(cluster: MemoryCluster, name: str, results: list[dict[str, Any]], pool: str) -> ClaimRef:
    """A claim the scheduler allocated shares to (``results``: device, shareID, consumedCapacity)."""
    created = cluster.create(resource_claim(name, namespace="default", count=len(results)))
    status = allocation_status(pool, [("gpu", r["device"]) for r in results])
    for written, extra in zip(status["allocation"]["devices"]["results"], results, strict=True):
        written.update(extra)
    cluster.patch_status(RESOURCE_CLAIM, name=name, status=status, namespace="default")
    return ClaimRef("default", created["metadata"]["uid"], name)
