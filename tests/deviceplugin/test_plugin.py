"""The plugin against the kubelet peer over real unix sockets: every strategy, health, restarts, reload."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import grpc
import pytest
from fakes.fake_pynvml import nvml_over
from fakes.sim_node import registered_again

from gpuchain.api.config.v1.config import Config, parse_config
from gpuchain.deviceplugin.plugin import DevicePlugin
from gpuchain.deviceplugin.resources import ResourceMappingError
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.model import HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.kubelet.node import SimNode, all_registered, start_sim_node
from gpuchain.kubelet.peer import ContainerRequest, KubeletPeer
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb

GPU = "nvidia.com/gpu"


@pytest.fixture
async def node() -> AsyncIterator[SimNode]:
    n = await start_sim_node(config=parse_config("health: {recoveryQuietSeconds: 0.05}"))
    yield n
    await n.stop()


async def _node(text: str = "", backend: SimBackend | None = None, **kwargs: object) -> SimNode:
    return await start_sim_node(config=parse_config(text), backend=backend, **kwargs)  # type: ignore[arg-type]


async def test_registers_one_endpoint_with_all_gpus(node: SimNode) -> None:
    assert node.kubelet.capacity() == {GPU: 8}
    assert node.kubelet.allocatable() == {GPU: 8}
    ep = node.kubelet.endpoints[GPU]
    assert ep.endpoint == "nvidia-gpu.sock" and (node.socket_dir / "nvidia-gpu.sock").exists()
    assert ep.options.get_preferred_allocation_available
    inv = node.backend.inventory()
    assert {i: d.numa_nodes for i, d in ep.devices.items()} == {g.uuid: (g.numa_node,) for g in inv.gpus}


async def test_pod_gets_gpus_through_preferred_allocation(node: SimNode) -> None:
    pod = await node.kubelet.admit("ml", name="train", containers=[ContainerRequest("main", {GPU: 4})])
    ids = pod.containers[0].devices[GPU]
    numa = {node.backend.inventory().gpu(i).numa_node for i in ids}
    assert len(ids) == 4 and len(numa) == 1
    assert pod.containers[0].envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(ids)
    assert node.plugin.servicer(GPU).allocations == 1


@pytest.mark.parametrize(
    ("flags", "check"),
    [
        ("deviceListStrategy: envvar", lambda c, ids: c.envs["NVIDIA_VISIBLE_DEVICES"] == ids[0]),
        (
            "deviceListStrategy: volume-mounts",
            lambda c, ids: (
                c.mounts[0].container_path == f"/var/run/nvidia-container-devices/{ids[0]}"
                and c.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
            ),
        ),
        (
            "deviceListStrategy: cdi-annotations",
            lambda c, ids: list(c.annotations.values()) == [f"k8s.device-plugin.nvidia.com/gpu={ids[0]}"],
        ),
        (
            "deviceListStrategy: cdi-cri",
            lambda c, ids: c.cdi_devices == (f"k8s.device-plugin.nvidia.com/gpu={ids[0]}",),
        ),
        ("deviceIDStrategy: index", lambda c, ids: c.envs["NVIDIA_VISIBLE_DEVICES"].isdigit()),
        (
            "passDeviceSpecs: true",  # the GPU's own node (control nodes only where this host has them)
            lambda c, ids: any(re.fullmatch(r"/dev/nvidia\d+", d.container_path) for d in c.device_specs),
        ),
    ],
)
async def test_allocate_strategies_over_grpc(flags: str, check: object) -> None:
    node = await _node(f"flags:\n  plugin:\n    {flags}\n")
    try:
        pod = await node.kubelet.admit("default", name="p", containers=[ContainerRequest("c", {GPU: 1})])
        c = pod.containers[0]
        assert check(c, list(c.devices[GPU]))  # type: ignore[operator]
    finally:
        await node.stop()


async def test_unknown_id_is_invalid_argument_naming_the_id(node: SimNode) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await node.kubelet.allocate_raw(GPU, ["GPU-does-not-exist"])
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "GPU-does-not-exist" in (err.value.details() or "")


async def test_oversized_shared_request_is_invalid_argument() -> None:
    node = await _node(
        "sharing: {timeSlicing: {failRequestsGreaterThanOne: true, resources: [{name: gpu, replicas: 4}]}}"
    )
    try:
        assert node.kubelet.capacity() == {GPU: 32}
        ids = list(node.kubelet.endpoints[GPU].devices)[:2]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await node.kubelet.allocate_raw(GPU, ids)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "maximum request size for shared resources is 1" in (err.value.details() or "")
    finally:
        await node.stop()


async def test_replicas_spread_over_gpus_and_pod_sees_the_uuid() -> None:
    node = await _node("sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 4}]}}")
    try:
        shared = "nvidia.com/gpu.shared"
        assert node.kubelet.capacity() == {shared: 32}
        a = await node.kubelet.admit("default", name="a", containers=[ContainerRequest("c", {shared: 1})])
        b = await node.kubelet.admit("default", name="b", containers=[ContainerRequest("c", {shared: 1})])
        ua = a.containers[0].envs["NVIDIA_VISIBLE_DEVICES"]
        ub = b.containers[0].envs["NVIDIA_VISIBLE_DEVICES"]
        assert ua.startswith("GPU-") and "::" not in ua and ua != ub
    finally:
        await node.stop()


async def test_mixed_mig_endpoints_and_mig_scoped_health(mig_sim: SimBackend) -> None:
    node = await _node("flags: {migStrategy: mixed}", backend=mig_sim)
    try:
        cap = node.kubelet.capacity()
        assert cap == {GPU: 2, "nvidia.com/mig-1g.10gb": 22, "nvidia.com/mig-2g.20gb": 4, "nvidia.com/mig-3g.40gb": 4}
        pod = await node.kubelet.admit(
            "default", name="m", containers=[ContainerRequest("c", {"nvidia.com/mig-1g.10gb": 1})]
        )
        mig_uuid = pod.containers[0].devices["nvidia.com/mig-1g.10gb"][0]
        assert pod.containers[0].envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid
        mig_sim.inject_xid(mig_uuid, xid=48)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable()["nvidia.com/mig-1g.10gb"] == 21)
        assert node.kubelet.allocatable() == {**cap, "nvidia.com/mig-1g.10gb": 21}
    finally:
        await node.stop()


async def test_xid_drops_allocatable_and_recovery_restores_it(node: SimNode) -> None:
    node.backend.inject_xid(2, xid=79)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 7)
    node.backend.inject_xid(3, xid=13)
    node.backend.recover_gpu(2)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 8)
    assert node.kubelet.capacity() == {GPU: 8}


async def test_lost_gpu_is_unhealthy_until_it_comes_back(node: SimNode) -> None:
    node.backend.lose_gpu(5)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 7)
    with pytest.raises(Exception, match="Insufficient"):
        await node.kubelet.admit("default", name="big", containers=[ContainerRequest("c", {GPU: 8})])
    node.backend.recover_gpu(5)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 8)


class FlakyEvents(SimBackend):
    """A backend whose first event subscription fails (the NVML watcher could not start), then works."""

    failures: ClassVar[list[str]] = ["cannot create the NVML event set"]

    async def events(self) -> AsyncIterator[HealthEvent]:
        if self.failures:
            raise GpuError(self.failures.pop())
        async for event in super().events():
            yield event


async def test_devices_come_back_after_the_event_stream_recovers() -> None:
    flaky = FlakyEvents.from_preset("h100-80gb-x8")
    flaky.failures = ["cannot create the NVML event set"]
    node = await start_sim_node(config=parse_config("health: {recoveryQuietSeconds: 0.05}"), backend=flaky, wait=False)
    try:
        await node.kubelet.wait_for(all_registered(node))
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable().get(GPU) == 0)
        assert node.kubelet.capacity() == {GPU: 8}  # unhealthy, still announced
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable().get(GPU) == 8)
        node.backend.inject_xid(1, xid=79)  # the new subscription delivers events
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable().get(GPU) == 7)
    finally:
        await node.stop()


async def test_disabled_health_checks_keep_devices_healthy() -> None:
    node = await start_sim_node(env={"DP_DISABLE_HEALTHCHECKS": "all"})
    try:
        handled = asyncio.Event()
        node.plugin.on_event = lambda event: handled.set()
        node.backend.inject_xid(0, xid=79)
        await asyncio.wait_for(handled.wait(), 5)
        assert not node.plugin.health.bad_gpus
        assert node.kubelet.allocatable() == {GPU: 8}
    finally:
        await node.stop()


async def test_kubelet_restart_reregisters(node: SimNode) -> None:
    await node.kubelet.admit("default", name="keep", containers=[ContainerRequest("c", {GPU: 1})])
    before = len(node.plugin.registrations)
    stray = node.socket_dir / "stale-plugin.sock"
    stray.touch()
    await node.kubelet.restart()
    assert not stray.exists()
    # The new registration itself, not a state the old one already satisfied (under CI load the
    # checks below passed before the plugin had noticed the restart).
    await registered_again(node, before)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8})
    assert len(node.plugin.registrations) == before + 1
    assert (node.socket_dir / "nvidia-gpu.sock").exists()
    assert ("default", "keep") in node.kubelet.pods


async def test_plugin_restart_drops_then_restores_allocatable(node: SimNode) -> None:
    await node.plugin.stop()
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 0})
    assert node.kubelet.capacity() == {GPU: 8}
    await node.restart_plugin()
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8})


async def test_plugin_started_before_the_kubelet_registers_when_it_appears(
    h100_sim: SimBackend, short_dir: Path
) -> None:
    root = short_dir
    plugin = DevicePlugin(h100_sim, config=Config(), socket_dir=root, env={}, watch_interval=0.02)
    kubelet = KubeletPeer(root)
    try:
        await plugin.start()
        assert not plugin.registered
        await kubelet.start()
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8})
    finally:
        await plugin.stop()
        await kubelet.stop()


async def test_a_reload_re_serves_and_registers_once(node: SimNode) -> None:
    """The kubelet watch does not take a reload's own un-serve for a vanished socket: seen from
    before the reload let go of its lock, it did, re-served a second time and took the endpoint
    away again, so an Allocate just after the reload met no socket."""
    before = len(node.plugin.registrations)
    await node.plugin.reload(parse_config("{}"))
    assert len(node.plugin.registrations) == before + 1
    await asyncio.sleep(0.5)  # ten polls of the kubelet watch (watch_interval 0.05) and its inotify wake-up
    assert len(node.plugin.registrations) == before + 1
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8})
    pod = await node.kubelet.admit("default", name="after-reload", containers=[ContainerRequest("c", {GPU: 1})])
    assert len(pod.containers[0].devices[GPU]) == 1


async def test_reload_switches_to_time_slicing(node: SimNode) -> None:
    await node.plugin.reload(
        parse_config("sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 2}]}}")
    )
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable().get("nvidia.com/gpu.shared") == 16)
    assert node.kubelet.allocatable()[GPU] == 0


async def test_pre_start_container_is_called_when_required() -> None:
    node = await start_sim_node(pre_start_required=True)
    try:
        assert node.kubelet.endpoints[GPU].options.pre_start_required
        await node.kubelet.admit("default", name="p", containers=[ContainerRequest("c", {GPU: 1})])
        assert node.plugin.servicer(GPU).prestarts == 1
    finally:
        await node.stop()


async def test_list_and_watch_resends_the_full_list_on_change(node: SimNode) -> None:
    sent: list[pb.ListAndWatchResponse] = []
    node.plugin.servicer(GPU).on_send = sent.append
    node.backend.inject_xid(1, xid=79)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 7)
    assert len(sent) == 1 and len(sent[0].devices) == 8
    assert [d.health for d in sent[0].devices].count("Unhealthy") == 1


async def test_gpu_lost_across_a_kubelet_restart_is_announced_again_when_back(node: SimNode) -> None:
    node.backend.lose_gpu(6)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 7)
    await node.kubelet.restart()
    await node.kubelet.wait_for(lambda: node.kubelet.capacity() == {GPU: 7} and node.kubelet.allocatable()[GPU] == 7)
    node.backend.recover_gpu(6)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 8})


async def test_plugin_on_the_nvml_backend(h100_sim: SimBackend, short_dir: Path) -> None:
    """The same plugin on NvmlBackend (fake pynvml over the simulator): XID, loss and recovery."""
    plugin_backend = nvml_over(h100_sim)
    kubelet_root = short_dir
    kubelet = KubeletPeer(kubelet_root)
    plugin = DevicePlugin(
        plugin_backend, config=parse_config("health: {recoveryQuietSeconds: 0.05}"), socket_dir=kubelet_root, env={}
    )
    try:
        await kubelet.start()
        await plugin.start()
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8})
        fake = plugin_backend._nvml
        while not (fake._event_sets and len(fake._event_sets[0].registered) == 8):
            await asyncio.sleep(0.01)  # NVML misses events raised before the event set exists
        h100_sim.inject_xid(1, xid=48)
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 7})
        h100_sim.lose_gpu(2)
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 6})
        lost = h100_sim.snapshot_gpu(2).uuid
        while "lost" not in plugin.health.bad_gpus.get(lost, ""):
            await asyncio.sleep(0.02)  # NVML notices a lost GPU by probing, every 0.2 s here
        h100_sim.recover_gpu(2)
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 7})
    finally:
        await plugin.stop()
        for thread in threading.enumerate():
            if thread.name == "nvml-events":  # let NVML's event thread see the stop while the loop runs
                await asyncio.to_thread(thread.join, 2)
        await kubelet.stop()
        plugin_backend.close()


async def test_a_reload_that_does_not_fit_keeps_the_running_resources() -> None:
    """`single` is invalid on a mixed MIG node: the reload is refused and nothing stops being served."""
    n = await _node("flags: {migStrategy: mixed}", backend=SimBackend.from_preset("h100-80gb-x8-mig-mixed"))
    try:
        before = n.kubelet.allocatable()
        assert before["nvidia.com/mig-1g.10gb"] == 22
        with pytest.raises(ResourceMappingError):
            await n.plugin.reload(parse_config("flags: {migStrategy: single}"))
        assert n.plugin.config.flags.mig_strategy.value == "mixed"
        assert set(n.plugin.servers) == set(before)
        assert n.kubelet.allocatable() == before
    finally:
        await n.stop()


async def test_a_reload_with_a_bad_healthcheck_variable_changes_nothing(node: SimNode) -> None:
    node.plugin.env = {"DP_DISABLE_HEALTHCHECKS": "sometimes"}
    config = node.plugin.config
    with pytest.raises(ValueError, match="DP_DISABLE_HEALTHCHECKS"):
        await node.plugin.reload(parse_config("flags: {migStrategy: mixed}"))
    assert node.plugin.config is config
    assert node.kubelet.allocatable() == {GPU: 8}


async def test_listed_says_when_the_kubelet_has_had_the_first_device_list() -> None:
    """What the node agent waits for before starting its other roles on the same event loop."""
    node = await _node(wait=False)
    try:
        assert node.plugin.registered and not node.kubelet.updates
        assert await node.plugin.listed(10)
        assert node.plugin.servicer(GPU).listed.is_set()
        await node.kubelet.wait_for(lambda: bool(node.kubelet.updates), 5)  # the list it says it sent
        assert node.kubelet.allocatable() == {GPU: 8}
    finally:
        await node.stop()


async def test_listed_without_a_kubelet_waits_for_nothing(tmp_path: Path) -> None:
    plugin = DevicePlugin(SimBackend.from_preset("h100-80gb-x8"), config=parse_config(""), socket_dir=tmp_path, env={})
    await plugin.start()
    try:
        assert not plugin.registered
        assert not await asyncio.wait_for(plugin.listed(30), 1)  # at once: no kubelet to wait for
    finally:
        await plugin.stop()
