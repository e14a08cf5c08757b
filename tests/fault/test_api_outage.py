"""The API server sick for a while (issue 25, items 4 and 5), on the real kube-apiserver behind the
fault proxy (tests/fault/apiproxy.py): every component stays alive, converges soon after the
server is back, and a flapping watch costs bounded CPU, restarts and log lines.

Durations are environment-tunable so a run can hold the issue's full numbers:

- ``GPUCHAIN_FAULT_OUTAGE_S`` (default 15): seconds of 503. The issue's case is 100 s; what
  killed the operator was kopf giving up after its retry list (8 retries, 54 s by default). The
  default run compresses kopf's retry sleeps by ``GPUCHAIN_FAULT_KOPF_TIME_SCALE`` (default 0.1:
  the 54 s give-up point is at 5.4 s), so a 15 s outage is ~3x past it; scale 1 and 100 s is the
  issue's run verbatim (~2 min);
- ``GPUCHAIN_FAULT_GONE_S`` (default 20): seconds during which every watch is answered 410 Gone.
  The budgets scale with it: 0.01 CPU-s per second of flapping (0.2 CPU-s in 20 s) per component.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import kopf
import kopf._cogs.clients.api as kopf_api
import pytest
from fakes.cluster_policy import cluster_policy
from fault.apiproxy import FaultProxy, fault_proxy
from peers.apiserver import ApiServer
from peers.test_kube_apiserver import NS, gpu_node, install_crd

from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL
from gpuchain.deviceplugin.nodeconfig import NodeLabelWatch
from gpuchain.kube import CLUSTER_POLICY, NODE, LiveCluster
from gpuchain.operator.runtime import RuntimeConfig, run

OUTAGE_S = float(os.environ.get("GPUCHAIN_FAULT_OUTAGE_S", "15"))
KOPF_TIME_SCALE = float(os.environ.get("GPUCHAIN_FAULT_KOPF_TIME_SCALE", "0.1"))
GONE_S = float(os.environ.get("GPUCHAIN_FAULT_GONE_S", "20"))
CONVERGE_S = 10.0
AGENT = Path(__file__).with_name("agent_process.py")


class _ScaledSleeps:
    """kopf's API module's view of ``asyncio``: every sleep (its retry backoffs) ``scale`` times as long."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(delay * self.scale, result)


def _gpu_nodes(live: LiveCluster) -> int | None:
    return (live.get(CLUSTER_POLICY, name="cluster-policy").get("status") or {}).get("gpuNodes")


async def test_every_component_outlives_a_503_outage_past_kopfs_retries_and_converges_soon_after(
    apiserver: ApiServer, live_cluster: LiveCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    kopf_give_up = sum(kopf.OperatorSettings().networking.error_backoffs) * KOPF_TIME_SCALE
    assert kopf_give_up + 5 < OUTAGE_S, "the outage must outlast kopf's own retries"
    monkeypatch.setattr(kopf_api, "asyncio", _ScaledSleeps(KOPF_TIME_SCALE))
    install_crd(live_cluster)
    live_cluster.create(gpu_node("gpu-0"))
    live_cluster.create(cluster_policy("cluster-policy", {"dcgmExporter": {"enabled": False}}))
    with fault_proxy(apiserver) as proxy:
        stop = asyncio.Event()
        config = RuntimeConfig(namespace=NS, min_interval=0.2, resync=600, server=proxy.url)
        operator = asyncio.create_task(run(LiveCluster.from_url(proxy.url), config=config, stop_flag=stop))
        watch = NodeLabelWatch(LiveCluster.from_url(proxy.url), node_name="gpu-0")
        labels: list[str | None] = []

        async def follow() -> None:
            async for value in watch.changes(None):
                labels.append(value)

        follower = asyncio.create_task(follow())

        async def until(check: Callable[[], bool], what: str, timeout: float) -> float:
            start = time.monotonic()
            while not await asyncio.to_thread(check):
                assert not operator.done(), f"the operator stopped: {operator.exception() if operator.done() else ''}"
                assert not follower.done(), "the Node watch stopped"
                assert time.monotonic() - start < timeout, f"not within {timeout:.0f} s: {what}"
                await asyncio.sleep(0.1)
            return time.monotonic() - start

        try:
            await until(lambda: _gpu_nodes(live_cluster) == 1, "the operator's first status", 60)
            await until(lambda: proxy.count("watch") >= 4, "the watches", 30)
            proxy.set_mode("503")
            # What changes during the outage, straight on the server (the proxy only fronts the agents).
            live_cluster.create(gpu_node("gpu-1"))
            live_cluster.patch(NODE, name="gpu-0", patch={"metadata": {"labels": {NODE_CONFIG_LABEL: "a100"}}})
            deadline = time.monotonic() + OUTAGE_S
            while time.monotonic() < deadline:
                assert not operator.done(), f"the operator died during the outage: {operator.exception()!r}"
                assert not follower.done(), "the Node watch died during the outage"
                await asyncio.sleep(0.5)
            proxy.set_mode("pass")
            took = await until(lambda: _gpu_nodes(live_cluster) == 2, "the operator converged", CONVERGE_S)
            await until(lambda: labels[-1:] == ["a100"], "the Node watch converged", CONVERGE_S)
            print(f"\n503 for {OUTAGE_S:.0f} s (kopf gives up after {kopf_give_up:.1f} s): converged in {took:.1f} s")
        finally:
            follower.cancel()
            stop.set()
            await asyncio.wait_for(operator, 30)


# ---- 410 Gone on every watch -------------------------------------------------------------------

COMPONENTS = ("node-watch", "quarantine", "mig-watch", "operator")


class Agent:
    """One component in its own process behind its own proxy (so every count is its own)."""

    def __init__(self, stack: ExitStack, apiserver: ApiServer, component: str, node: str, logs: Path) -> None:
        self.component = component
        self.proxy: FaultProxy = stack.enter_context(fault_proxy(apiserver))
        self.log = logs / f"{component}.log"
        self.stderr = stack.enter_context(self.log.open("wb"))
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENT), component, self.proxy.url, node, str(apiserver.ca)],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        stack.callback(self._stop)

    def _stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def mark(self) -> dict[str, float]:
        """CPU-seconds and log records so far, and the proxy's counts."""
        assert self.proc.poll() is None, f"{self.component} exited with {self.proc.returncode}"
        self.proc.send_signal(signal.SIGUSR1)
        assert self.proc.stdout is not None
        seen = json.loads(self.proc.stdout.readline())
        return {
            **seen,
            "watches": self.proxy.count("watch"),
            "lists": self.proxy.count("list"),
            "patches": self.proxy.count("PATCH"),
        }


@pytest.fixture
def agents(apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path) -> Iterator[list[Agent]]:
    install_crd(live_cluster)
    live_cluster.create(gpu_node("gpu-0"))
    live_cluster.create(cluster_policy("cluster-policy", {"dcgmExporter": {"enabled": False}}))
    with ExitStack() as stack:
        yield [Agent(stack, apiserver, component, "gpu-0", tmp_path) for component in COMPONENTS]


async def test_a_watch_answered_410_for_a_while_costs_each_component_bounded_cpu_restarts_and_log_lines(
    agents: list[Agent], live_cluster: LiveCluster
) -> None:
    deadline = time.monotonic() + 60
    # Every watch open (the MIG manager has two, kopf three and its CRD observer), the operator's first pass done.
    while not (
        all(a.proxy.count("watch") >= (2 if a.component == "mig-watch" else 1) for a in agents)
        and _gpu_nodes(live_cluster) == 1
    ):
        assert time.monotonic() < deadline, {a.component: a.proxy.counts for a in agents}
        assert all(a.proc.poll() is None for a in agents), "a component exited"
        await asyncio.sleep(0.2)
    await asyncio.sleep(3)  # settled: the operator's writes after its first status are done
    before = [a.mark() for a in agents]
    for a in agents:
        a.proxy.set_mode("gone")
    await asyncio.sleep(GONE_S)
    after = [a.mark() for a in agents]
    for a in agents:
        a.proxy.set_mode("pass")
    cost = {
        a.component: {key: round(later[key] - earlier[key], 3) for key in earlier}
        for a, earlier, later in zip(agents, before, after, strict=True)
    }
    print(f"\n{GONE_S:.0f} s of 410 on every watch:", json.dumps(cost, indent=1), "\nlogs:", agents[0].log.parent)
    for a, earlier in zip(agents, before, strict=True):
        c = cost[a.component]
        # Each watch stream (kopf has one per kind and one for CRDs) restarts at once, then ever
        # more slowly, at least every 2.5 s (the backoff's cap of 5 s, jittered) once it is there.
        streams = earlier["watches"]
        assert c["cpu"] < 0.01 * GONE_S, (a.component, c)
        assert c["watches"] <= streams * (4 + GONE_S / 2.5), (a.component, streams, c)
        assert c["logs"] <= streams * 4 + GONE_S, (a.component, c)
    # kopf lists once per restart of a stream; a re-list that shows nothing new wakes no reconcile.
    operator = cost["operator"]
    assert operator["lists"] <= operator["watches"] and operator["patches"] == 0, operator
