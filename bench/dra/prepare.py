"""DRA prepare latency, whole GPU and MIG (created on prepare), as ratios to an empty call on the same socket.

Run: .venv/bin/python -m bench.dra.prepare [--rounds 500]

The DRA driver (``partitionable_mig``: a MIG device is created on Prepare and destroyed on
Unprepare) serves its real gRPC endpoint on a unix socket over a simulated H100 node and an
in-memory API server; this process plays the kubelet through gpuchain's kubelet-side DRA client
(``gpuchain.kubelet.dra_peer.DraPeer``), which registers the driver and calls it in ``v1``.

Each round calls, in turn and each timed on its own:

- NodePrepareResources with no claims: the baseline. It crosses the same socket, the same
  servicer and the same hop to the driver's worker thread as a real call; only the driver's work
  is missing, so a ratio says what preparing costs on top of the transport;
- NodePrepareResources for a claim allocated GPU 0 whole;
- NodeUnprepareResources for that claim;
- NodePrepareResources for a claim allocated a 1g.10gb placement of GPU 1 (the MIG instance is
  created in the simulator, the CDI spec written, the checkpoint recorded);
- NodeUnprepareResources for that claim (the instance destroyed);
- NodeUnprepareResources with no claims: the unprepare baseline.

Alternating them round by round lets load from other processes hit all alike. A warm-up round
before them is not timed: it switches GPU 1 into MIG mode once and warms the channel. The client and the driver
share one process and event loop (the driver's work runs in a thread, as it does when deployed),
so both sides' CPU falls inside each call, for the baseline too. The simulator's MIG calls return
at once: on hardware, creating a GPU and a compute instance adds the driver's own time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable

from bench.doctor.run import alternated
from bench.stats import percentile
from gpuchain.common.scratch import scratch_dir
from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.driver import DraDriver, DriverConfig
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM
from gpuchain.dra.server import DraPluginServer
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import DRA
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kubelet.dra_peer import DraClaim, DraPeer

PRESET = "h100-80gb-x8"
WHOLE_GPU = "gpu-0"
MIG_PREFIX = "gpu-1-mig-1g10gb-"
"""The MIG claim's device: the first 1g.10gb placement of GPU 1 the driver publishes."""
CALLS = (
    ("empty NodePrepareResources (baseline)", 0),
    (f"prepare whole GPU ({WHOLE_GPU})", 0),
    ("unprepare whole GPU", 5),
    ("prepare MIG 1g.10gb, created", 0),
    ("unprepare MIG 1g.10gb, destroyed", 5),
    ("empty NodeUnprepareResources (baseline)", 5),
)
"""Each call measured, in the order of a round, and the index of its baseline."""


def _claim(cluster: MemoryCluster, pool: str, name: str, device: str) -> DraClaim:
    """A ResourceClaim with the allocation the scheduler would write; the kubelet's name for it."""
    created = cluster.create(resource_claim(name, namespace="default"))
    cluster.patch_status(
        RESOURCE_CLAIM, name=name, status=allocation_status(pool, [("gpu", device)]), namespace="default"
    )
    return DraClaim("default", created["metadata"]["uid"], name)


def measure(rounds: int) -> list[list[float]]:
    """Seconds of each call in ``CALLS`` order over ``rounds`` alternated rounds, after a warm-up one."""
    sim = SimBackend.from_preset(PRESET)
    node = sim.topology.node
    cluster = MemoryCluster()  # no Node object: a DRA-only node
    root = scratch_dir("dra-bench-")
    config = DriverConfig(
        node=node, cdi_dir=root / "cdi", state_dir=root / "state", unlabelled=DRA, partitionable_mig=True
    )
    driver = DraDriver(sim, cluster=cluster, config=config)
    server = DraPluginServer(driver, registry_dir=root / "registry", plugin_dir=root / "plugin")
    peer = DraPeer(root / "registry", supported=("v1",))
    loop = asyncio.new_event_loop()

    def call(make: Callable[[], Awaitable[object]]) -> Callable[[], object]:
        return lambda: loop.run_until_complete(make())

    async def prepared(claim: DraClaim) -> None:
        result = (await peer.prepare(DRIVER, [claim]))[claim.uid]
        if result.error or not result.devices:
            raise RuntimeError(f"preparing {claim.name}: {result.error or 'no devices'}")

    async def unprepared(claim: DraClaim) -> None:
        error = (await peer.unprepare(DRIVER, [claim]))[claim.uid]
        if error:
            raise RuntimeError(f"unpreparing {claim.name}: {error}")

    try:
        published = driver.publish()
        mig = next(d for d in published.devices if d.startswith(MIG_PREFIX))
        whole = _claim(cluster, node, "whole", WHOLE_GPU)
        part = _claim(cluster, node, "mig", mig)
        loop.run_until_complete(server.start())
        loop.run_until_complete(peer.wait_for(DRIVER))
        fns = [
            call(lambda: peer.prepare(DRIVER, [])),
            call(lambda: prepared(whole)),
            call(lambda: unprepared(whole)),
            call(lambda: prepared(part)),
            call(lambda: unprepared(part)),
            call(lambda: peer.unprepare(DRIVER, [])),
        ]
        for fn in fns[:4]:  # a warm-up round, untimed: GPU 1 goes into MIG mode here, once
            fn()
        if len(sim.gpu_instances(1)) != 1:
            raise RuntimeError("preparing the MIG claim created no MIG instance")
        for fn in fns[4:]:
            fn()
        times = alternated(fns, rounds)
        if sim.gpu_instances(1):
            raise RuntimeError("a MIG instance outlived its claim")
        return times
    finally:
        loop.run_until_complete(peer.close())
        loop.run_until_complete(server.stop())
        loop.close()
        shutil.rmtree(root, ignore_errors=True)


def report(times: list[list[float]], load: tuple[float, float]) -> None:
    """One row per call: p50 and p99 in ms, and each as a ratio to its baseline's."""
    rounds = len(times[0])
    print("DRA NodePrepareResources / NodeUnprepareResources over gRPC on a unix socket (gpuchain's kubelet")
    print("DRA client, API v1; simulated H100 node), ratios to an empty call on the same socket, same run")
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}; {rounds} alternated rounds")
    print()
    print(f"{'call':<42}{'p50 ms':>9}{'p99 ms':>9}  {'ratio p50 / p99':>16}")
    for (label, baseline), spent in zip(CALLS, times, strict=True):
        base = times[baseline]
        p50, p99 = percentile(spent, 50, scale=1000), percentile(spent, 99, scale=1000)
        ratio = f"{p50 / percentile(base, 50, scale=1000):>7.2f} / {p99 / percentile(base, 99, scale=1000):<7.2f}"
        print(f"{label:<42}{p50:>9.3f}{p99:>9.3f}  {ratio}".rstrip())


def main(argv: list[str] | None = None) -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000, help="alternated rounds (at least 2)")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds: a p99 needs at least 2 rounds")
    before = os.getloadavg()[0]
    times = measure(args.rounds)
    report(times, (before, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
