"""The node agent's roles in one process: one backend, one event stream, one Node watch, and a
crashing role that leaves the device plugin serving the kubelet."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gpuchain.agent.build import Role, build
from gpuchain.agent.node import Node
from gpuchain.agent.settings import (
    DevicePluginSettings,
    DraPluginSettings,
    ExporterSettings,
    GpuHealthSettings,
    MigManagerSettings,
    NodeSettings,
    RoleSettings,
)
from gpuchain.agent.supervisor import REPEATED, RoleMetrics, Supervisor
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, MemoryCluster
from gpuchain.kubelet.peer import ContainerRequest, KubeletPeer
from gpuchain.sim.remediation import node_object

GPU = "nvidia.com/gpu"
NODE_NAME = "gpu-node"
NODE_WATCH = f"watch on Node {NODE_NAME}"


class Agent:
    """A node agent in this process: its node resources, supervisor and the kubelet beside it."""

    def __init__(self, root: Path, node: Node, supervisor: Supervisor, kubelet: KubeletPeer) -> None:
        self.root, self.node, self.supervisor, self.kubelet = root, node, supervisor, kubelet
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def up(self, *names: str, timeout: float = 20.0) -> None:
        async def all_up() -> None:
            while not all(self.supervisor.role(n).up for n in names):
                await asyncio.sleep(0.05)

        await asyncio.wait_for(all_up(), timeout)

    def metrics(self) -> str:
        assert self.node.server is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{self.node.server.server_port}/metrics", timeout=10) as r:
            return str(r.read().decode())


@pytest.fixture
async def agent_of(short_dir: Path) -> AsyncIterator[Callable[..., asyncio.Future[Agent]]]:
    """Start a node agent with the roles given (name, settings or a role of the test's own)."""
    started: list[Agent] = []

    async def start(
        backend: SimBackend, roles_in: Callable[[Path], list[tuple[str, RoleSettings | Role]]], **timing: float
    ) -> Agent:
        """``roles_in(root)``: the roles, given the agent's directory (the kubelet's sockets are in
        ``root / "device-plugins"``)."""
        root = short_dir / f"agent-{len(started)}"
        root.mkdir()
        cluster = MemoryCluster([node_object(NODE_NAME)])
        settings = NodeSettings(node_name=NODE_NAME, metrics_address="127.0.0.1", metrics_port=0)
        node = Node(backend, settings=settings, cluster=lambda: cluster)
        node.share(asyncio.get_running_loop())
        node.in_process_reset = True
        kubelet = KubeletPeer(root / "device-plugins")
        await kubelet.start()

        def builder(what: RoleSettings | Role) -> Callable[[], Role]:
            if callable(what):
                return lambda: what
            return functools.partial(build, what, node)

        supervisor = Supervisor([(name, builder(what)) for name, what in roles_in(root)], **timing)
        node.metrics.add("node-agent", RoleMetrics(supervisor))
        node.serve_metrics()
        agent = Agent(root, node, supervisor, kubelet)
        agent.task = asyncio.create_task(supervisor.run(agent.stop))
        started.append(agent)
        return agent

    yield start  # type: ignore[misc]
    for agent in started:
        agent.stop.set()
        if agent.task is not None:
            await asyncio.wait_for(agent.task, 30)
        await agent.node.close()
        await agent.kubelet.stop()
    gc.unfreeze()  # the supervisor froze the start-up heap (runtime.settled), as an agent does; not this test process's


def _every_role(root: Path) -> list[tuple[str, RoleSettings | Role]]:
    return [
        ("device-plugin", DevicePluginSettings(socket_dir=root / "device-plugins")),
        ("gpu-health", GpuHealthSettings(resync=0.5)),
        ("exporter", ExporterSettings(interval=0.2)),
        (
            "dra-plugin",
            DraPluginSettings(
                registry_dir=root / "registry",
                plugin_dir=root / "plugins",
                cdi_dir=root / "cdi",
                state_dir=root / "state",
            ),
        ),
        ("mig-manager", MigManagerSettings()),
    ]


async def test_roles_share_one_backend_one_event_stream_and_one_node_watch(
    agent_of: Callable[..., asyncio.Future[Agent]],
) -> None:
    """Device plugin, gpu-health, exporter, DRA plugin and MIG manager on one process: one health event
    subscription and one watch on the Node feed them all, and an XID reaches every role through it."""
    backend = SimBackend.from_preset("h100-80gb-x8", node=NODE_NAME)
    agent = await agent_of(backend, _every_role)
    await agent.kubelet.wait_for(lambda: agent.kubelet.allocatable() == {GPU: 8}, timeout=20)
    await agent.up("device-plugin", "gpu-health", "exporter", "dra-plugin", "mig-manager")

    async def every_follower_subscribed() -> None:
        """Four roles follow the health events, three the Node (the DRA plugin's and the MIG
        manager's watches among them): waited for, not slept on, as a loaded machine may take
        longer than any fixed pause to start them."""
        while {f.name: f.readers for f in agent.node._fanouts} != {"GPU health events": 4, NODE_WATCH: 3}:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(every_follower_subscribed(), 20)

    # What the backend and the API see, beside what the agent counts: one subscriber, one Node watch.
    assert len(backend._subscriptions) == 1 and agent.node.event_subscriptions == 1
    cluster = agent.node.cluster()
    assert isinstance(cluster, MemoryCluster)
    assert len([w for w in cluster._watchers if w.kind == NODE]) == 1 and agent.node.node_watches == 1

    backend.inject_xid(3, xid=79)
    await agent.kubelet.wait_for(lambda: agent.kubelet.allocatable() == {GPU: 7}, timeout=10)

    def published() -> bool:
        node = agent.node.cluster().get(NODE, name=NODE_NAME)
        return any(c["type"] == "GPUHealthy" and c["status"] == "False" for c in node["status"]["conditions"])

    async def seen_everywhere() -> None:
        while not (published() and "DCGM_FI_DEV_XID_ERRORS" in await asyncio.to_thread(agent.metrics)):
            await asyncio.sleep(0.1)

    await asyncio.wait_for(seen_everywhere(), 10)
    assert agent.node.event_subscriptions == 1  # still the one subscription
    assert all(r.failures == 0 for r in agent.supervisor.roles)


async def test_a_role_crashing_in_a_loop_leaves_the_device_plugin_serving(
    agent_of: Callable[..., asyncio.Future[Agent]], caplog: pytest.LogCaptureFixture
) -> None:
    """Another role fails over and over; the device plugin's ListAndWatch and Allocate still answer
    the kubelet, and the failing role is visible as a metric and in the log."""
    backend = SimBackend.from_preset("h100-80gb-x8", node=NODE_NAME)
    crashes = 0

    async def crashing(stop: asyncio.Event, started: Callable[[], None]) -> None:
        nonlocal crashes
        started()
        await asyncio.sleep(0.01)
        crashes += 1
        raise RuntimeError(f"crash {crashes}")

    caplog.set_level(logging.ERROR, logger="gpuchain.node-agent")
    agent = await agent_of(
        backend,
        lambda root: [
            ("device-plugin", DevicePluginSettings(socket_dir=root / "device-plugins")),
            ("crasher", crashing),
        ],
        first_delay=0.02,
        max_delay=0.1,
    )
    kubelet = agent.kubelet  # the project's kubelet peer, on the plugin's socket directory
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, timeout=20)

    async def crashed_repeatedly() -> None:
        while crashes < 3 * REPEATED:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(crashed_repeatedly(), 20)
    assert agent.supervisor.failing(agent.supervisor.role("crasher"))
    assert agent.supervisor.role("device-plugin").failures == 0

    # Allocate answers: a pod gets a GPU.
    pod = await kubelet.admit("default", name="train", containers=[ContainerRequest("main", {GPU: 1})])
    assert len(pod.containers[0].devices[GPU]) == 1
    # ListAndWatch answers: an XID reaches the kubelet as one unhealthy device.
    backend.inject_xid(5, xid=79)
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 7}, timeout=10)

    text = await asyncio.to_thread(agent.metrics)
    assert 'gpuchain_node_agent_role_failing{role="crasher"} 1.0' in text
    assert 'gpuchain_node_agent_role_failing{role="device-plugin"} 0.0' in text
    assert 'gpuchain_node_agent_role_up{role="device-plugin"} 1.0' in text
    repeated = [r for r in caplog.records if "role crasher failed" in r.getMessage() and "in a row" in r.getMessage()]
    assert repeated and repeated[0].exc_info is not None


async def test_no_other_role_runs_before_the_kubelet_has_the_device_plugin_registered(
    agent_of: Callable[..., asyncio.Future[Agent]],
) -> None:
    """Start-up order: the device plugin is started alone and the other roles (which load the
    Kubernetes client, prometheus, ...) only once the kubelet accepted its Register."""
    agents: list[Agent] = []
    seen: list[tuple[str, bool]] = []

    def recording(name: str) -> Role:
        async def run(stop: asyncio.Event, started: Callable[[], None]) -> None:
            seen.append((name, GPU in agents[0].kubelet.endpoints))
            started()
            await stop.wait()

        return run

    agent = await agent_of(  # its supervisor runs from the first await on: agents is filled by then
        SimBackend.from_preset("h100-80gb-x8", node=NODE_NAME),
        lambda root: [
            ("device-plugin", DevicePluginSettings(socket_dir=root / "device-plugins")),
            ("gfd", recording("gfd")),
            ("exporter", recording("exporter")),
        ],
    )
    agents.append(agent)
    await agent.up("device-plugin", "gfd", "exporter")
    assert sorted(seen) == [("exporter", True), ("gfd", True)]
