"""The kopf runtime against kmock over real HTTP: it watches, reconciles, deploys and reports."""

from __future__ import annotations

import asyncio
import time

from kube.kmock_server import kmock_server
from operator_helpers import NS, node

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, LiveCluster
from gpuchain.operator.crd import cluster_policy
from gpuchain.operator.operands import OPERANDS
from gpuchain.operator.runtime import Coalescer, RuntimeConfig, run


async def _until(check, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, "timed out waiting for the operator"
        await asyncio.sleep(0.1)


async def test_operator_runs_against_kmock() -> None:
    with kmock_server() as (url, _):
        live = LiveCluster.from_url(url)
        live.create(node("gpu-0"))
        live.create(cluster_policy("cluster-policy", {"dcgmExporter": {"enabled": False}}))
        stop = asyncio.Event()
        config = RuntimeConfig(namespace=NS, min_interval=0.05, resync=0.5, server=url)
        task = asyncio.create_task(run(LiveCluster.from_url(url), config, stop_flag=stop))
        try:
            await _until(lambda: "status" in live.get(CLUSTER_POLICY, "cluster-policy"))
            await _until(lambda: len(live.list(DAEMONSET, NS)) == len(OPERANDS) - 1)
            status = live.get(CLUSTER_POLICY, "cluster-policy")["status"]
            assert status["gpuNodes"] == 1
            assert status["operands"]["dcgm-exporter"]["state"] == "disabled"
            assert status["operands"]["driver"]["reason"] == "Deploying", "kmock runs no DaemonSet controller"
            # A spec change is picked up from the watch.
            live.patch(CLUSTER_POLICY, "cluster-policy", {"spec": {"mig": {"strategy": "sideways"}}})
            await _until(
                lambda: any(
                    c["type"] == "Error" and c["status"] == "True"
                    for c in live.get(CLUSTER_POLICY, "cluster-policy")["status"]["conditions"]
                )
            )
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)


async def test_coalescer_runs_once_for_a_burst() -> None:
    calls: list[float] = []
    coalescer = Coalescer(lambda: calls.append(time.monotonic()), min_interval=0.2, resync=60)
    task = asyncio.create_task(coalescer.run())
    for _ in range(50):
        coalescer.poke()
    await asyncio.sleep(0.1)
    task.cancel()
    assert len(calls) == 1
