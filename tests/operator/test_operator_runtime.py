"""The kopf runtime against kmock over real HTTP: it watches, reconciles, deploys and reports."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sized

import pytest
from fakes.cluster_policy import cluster_policy
from kube.kmock_server import kmock_server
from operator_helpers import NS, node

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, LiveCluster
from gpuchain.operator import runtime as runtime_module
from gpuchain.operator.operands import DRIVER, NODE_AGENT, TOOLKIT
from gpuchain.operator.runtime import Coalescer, RuntimeConfig, kopf_settings, run


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
        task = asyncio.create_task(run(LiveCluster.from_url(url), config=config, stop_flag=stop))
        try:
            await _until(lambda: "status" in live.get(CLUSTER_POLICY, name="cluster-policy"))
            # The default layout: the node agent serves every gpuchain operand but the switched-off exporter.
            wanted = {DRIVER.name, TOOLKIT.name, NODE_AGENT.name}
            await _until(lambda: {d["metadata"]["name"] for d in live.list(DAEMONSET, namespace=NS)} == wanted)
            status = live.get(CLUSTER_POLICY, name="cluster-policy")["status"]
            assert status["gpuNodes"] == 1
            assert status["operands"]["dcgm-exporter"]["state"] == "disabled"
            assert status["operands"]["driver"]["reason"] == "Deploying", "kmock runs no DaemonSet controller"
            # A spec change is picked up from the watch.
            live.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"mig": {"strategy": "sideways"}}})
            await _until(
                lambda: any(
                    c["type"] == "Error" and c["status"] == "True"
                    for c in live.get(CLUSTER_POLICY, name="cluster-policy")["status"]["conditions"]
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


def test_kopf_retries_a_failed_request_without_end_on_a_capped_backoff() -> None:
    retries = kopf_settings(RuntimeConfig(retry_seconds=1.0, max_retry_seconds=5.0)).networking.error_backoffs
    assert not isinstance(retries, Sized), "kopf gives up after a retry list of known length"
    waits = list(itertools.islice(retries, 1000))
    assert 0.5 <= waits[0] <= 1.0 and max(waits) <= 5.0 and min(waits[10:]) >= 2.5
    assert next(iter(retries)) <= 1.0, "each request starts its own backoff"


async def test_a_kopf_watch_stream_restarts_at_once_then_backs_off_while_it_keeps_restarting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watching = kopf_settings(RuntimeConfig(retry_seconds=1.0, max_retry_seconds=4.0)).watching
    clock = [100.0]
    monkeypatch.setattr(runtime_module.time, "monotonic", lambda: clock[0])

    async def stream(restarts: int, then_quiet: float = 0.0) -> list[float]:
        """One watch stream's task: ``restarts`` restarts back to back, then one after ``then_quiet`` s."""
        waits = []
        for _ in range(restarts):
            waits.append(watching.reconnect_backoff)
            clock[0] += waits[-1]
        clock[0] += then_quiet
        waits.append(watching.reconnect_backoff)
        return waits

    first = await asyncio.create_task(stream(5, then_quiet=9.0))  # quiet for more than twice the cap
    assert first[0] == 0 and all(0.5 <= w <= 4.0 for w in first[1:5]) and first[4] >= 2.0
    assert first[5] == 0, "a stream quiet for a while restarts at once again"
    assert (await asyncio.create_task(stream(0))) == [0.0], "another stream has its own pacing"
