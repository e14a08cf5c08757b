"""The kopf runtime against kmock over real HTTP: it watches, reconciles, deploys and reports."""

from __future__ import annotations

import asyncio
import itertools
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
    with kmock_server() as (url, _emulator):
        live = LiveCluster.from_url(url)
        live.create(node("gpu-0"))
        live.create(cluster_policy("cluster-policy", {"dcgmExporter": {"enabled": False}}))
        stop = asyncio.Event()
        # A resync far past the test's end: every reconcile here was woken by a watch event.
        config = RuntimeConfig(namespace=NS, min_interval=0.05, resync=600, server=url)
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


async def test_coalescer_bounds_runs_during_a_burst_and_runs_again_after_it() -> None:
    calls: list[float] = []
    min_interval = 0.05
    coalescer = Coalescer(lambda: calls.append(time.monotonic()), min_interval=min_interval, resync=600)
    task = asyncio.create_task(coalescer.run())
    try:
        start = time.monotonic()
        for _ in range(40):  # a poke every ~5 ms, spread over several intervals
            coalescer.poke()
            await asyncio.sleep(0.005)
        elapsed = time.monotonic() - start
        await _until(lambda: len(calls) >= 1, timeout=5)
        assert 1 <= len(calls) <= elapsed / min_interval + 2, (len(calls), elapsed)
        assert all(b - a >= min_interval for a, b in itertools.pairwise(calls)), calls
        await asyncio.sleep(2 * min_interval)  # the trailing poke (if any) has run; now idle
        settled = len(calls)
        await asyncio.sleep(2 * min_interval)
        assert len(calls) == settled, "no run without a poke (resync is far away)"
        coalescer.poke()
        await _until(lambda: len(calls) == settled + 1, timeout=5)
    finally:
        task.cancel()
