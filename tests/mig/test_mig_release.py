"""The MIG manager while it has let go of NVML for a GPU reset on its node (``gpu.nvmlrelease``):
no round starts, so no layout is checked or applied half-blind and nothing is marked failed; once
NVML is back the change waiting on the label goes through."""

from __future__ import annotations

import asyncio
import time

from fakes.releasable import ReleasableView

from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, MemoryCluster
from gpuchain.mig.agent import Policy
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager

NODE_NAME = "gpu-node-1"


def _labels(cluster: MemoryCluster) -> dict[str, str]:
    return dict(cluster.get(NODE, NODE_NAME)["metadata"].get("labels") or {})


async def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_no_round_while_released_then_the_waiting_change_applies() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    view = ReleasableView(sim)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": {}}}
    cluster = MemoryCluster([node])
    manager = MigManager(cluster, view, NODE_NAME, default_config(), Policy(timeout_s=60, operands=()))
    manager.clock = time.monotonic
    view.release()
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=0.05, stop=stop, resync=60))
    try:
        cluster.patch(NODE, NODE_NAME, {"metadata": {"labels": {MIG_CONFIG: "all-1g.10gb"}}})
        await asyncio.sleep(0.5)  # ten intervals: a round would have read the GPUs by now
        assert view.reads_while_released == 0
        assert _labels(cluster).get(MIG_CONFIG_STATE) != "failed"
        assert not sim.inventory().mig_devices
        view.reacquire()
        await _until(lambda: _labels(cluster).get(MIG_CONFIG_STATE) == "success")
        assert len(sim.inventory().mig_devices) == 56
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
