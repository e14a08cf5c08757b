"""A config that no longer fits the node: the plugin keeps serving what fits (issue 15, defect 1).

The campaign's case: time-slicing ``devices: 8`` on an 8-GPU node, one GPU lost, the kubelet
restarts. Before the fix the re-serve raised inside the kubelet watch, the task died silently
and the plugin never registered again, not even after the GPU came back.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from fakes.sim_node import registered_again

from gpuchain.api.config.v1.config import parse_config
from gpuchain.deviceplugin.plugin import fit_resources
from gpuchain.gpu.sim import SimBackend
from gpuchain.kubelet.node import start_sim_node

SHARED = "nvidia.com/gpu.shared"
EIGHT_SHARED = (
    "health: {recoveryQuietSeconds: 0.05}\n"
    "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, devices: 8, replicas: 2}]}}"
)


async def test_kubelet_restart_with_a_gpu_lost_serves_what_fits_and_all_again_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    degraded: list[str] = []
    node = await start_sim_node(config=parse_config(EIGHT_SHARED))

    async def record(reason: str) -> None:
        degraded.append(reason)

    node.plugin.on_degraded = record
    try:
        assert node.kubelet.capacity() == {SHARED: 16}
        node.backend.lose_gpu(3)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {SHARED: 14})
        before = len(node.plugin.registrations)
        with caplog.at_level(logging.ERROR):
            await node.kubelet.restart()
            await registered_again(node, before)
            await node.kubelet.wait_for(lambda: node.kubelet.capacity() == {SHARED: 14})
        assert len(node.plugin.registrations) == before + 1
        assert degraded and "asks to replicate 8 devices but the node has 7" in degraded[0]
        assert node.plugin.degraded == degraded[0]
        assert any("no longer fits" in r.getMessage() and "gpu.shared=14" in r.getMessage() for r in caplog.records)
        node.backend.recover_gpu(3)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {SHARED: 16})
        assert node.plugin.degraded is None
        await node.kubelet.restart()
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {SHARED: 16})
    finally:
        await node.stop()


def test_fit_under_single_keeps_the_largest_uniform_group() -> None:
    inventory = SimBackend.from_preset("h100-80gb-x8-mig-mixed").inventory()
    config = parse_config("flags: {migStrategy: single}")
    resources, reason = fit_resources(inventory, config)
    assert reason is not None and "migStrategy single does not fit" in reason
    assert [r.name for r in resources] == ["nvidia.com/gpu"]
    (res,) = resources
    assert len({d.mig_profile for d in res.devices}) == 1
    assert len(res.devices) > 0


def test_fit_changes_nothing_when_the_config_fits() -> None:
    inventory = SimBackend.from_preset("h100-80gb-x8").inventory()
    resources, reason = fit_resources(inventory, parse_config(EIGHT_SHARED))
    assert reason is None and [(r.name, len(r.devices)) for r in resources] == [(SHARED, 16)]


async def test_a_crash_in_the_kubelet_watch_is_logged_at_once_and_the_watch_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Supervision on the real path: the first re-serve after a kubelet restart raises; the
    exception is logged with its traceback and the watch, restarted after its backoff, registers."""
    node = await start_sim_node(config=parse_config(EIGHT_SHARED))
    serve = node.plugin._serve
    failures = 0

    async def flaky_serve(fit: bool = False) -> None:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise RuntimeError("injected re-serve failure")
        await serve(fit)

    node.plugin._serve = flaky_serve  # type: ignore[method-assign]
    try:
        before = len(node.plugin.registrations)
        with caplog.at_level(logging.ERROR):
            await node.kubelet.restart()
            await registered_again(node, before)
        assert node.kubelet.capacity() == {SHARED: 16} and failures == 1
        crash = [r for r in caplog.records if "device plugin: kubelet watch failed" in r.getMessage()]
        assert len(crash) == 1 and crash[0].exc_info is not None
        assert "injected re-serve failure" in str(crash[0].exc_info[1])
    finally:
        await node.stop()


async def test_serving_part_of_the_config_is_a_warning_event_on_the_node(tmp_path: Path, short_dir: Path) -> None:
    """The device plugin role's serve(): the reason reaches the Node as an Event (kubectl describe node shows it)."""
    from gpuchain.agent.node import Node
    from gpuchain.agent.roles.device_plugin import Prepared, serve
    from gpuchain.agent.settings import DevicePluginSettings, NodeSettings
    from gpuchain.deviceplugin.nodeconfig import REASON_INVALID, ConfigSource, NodeLabelWatch
    from gpuchain.kube import EVENT, MemoryCluster
    from gpuchain.kubelet.peer import KubeletPeer
    from gpuchain.sim.remediation import node_object

    root = short_dir
    config_file = tmp_path / "config.yaml"
    config_file.write_text(EIGHT_SHARED)
    cluster = MemoryCluster([node_object("gpu-node")])
    watch = NodeLabelWatch(cluster, node_name="gpu-node")
    watch.read()
    backend = SimBackend.from_preset("h100-80gb-x8")
    kubelet = KubeletPeer(root)
    await kubelet.start()
    node = Node(backend, settings=NodeSettings(node_name="gpu-node"), cluster=lambda: cluster)
    prepared = Prepared(
        config=parse_config(EIGHT_SHARED),
        source=ConfigSource(file=config_file),
        watch=watch,
        label=None,
        resource_version=None,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(DevicePluginSettings(socket_dir=root), node=node, prepared=prepared, stop=stop, started=lambda: None)
    )
    try:
        await kubelet.wait_for(lambda: kubelet.capacity() == {SHARED: 16}, timeout=10)
        backend.lose_gpu(5)
        await kubelet.wait_for(lambda: kubelet.allocatable() == {SHARED: 14}, timeout=10)
        await kubelet.restart()
        await kubelet.wait_for(lambda: kubelet.capacity() == {SHARED: 14}, timeout=10)

        def warned() -> bool:
            return any(e["reason"] == REASON_INVALID for e in cluster.snapshot(EVENT))

        await kubelet.wait_for(warned, timeout=10)
        (event,) = [e for e in cluster.snapshot(EVENT) if e["reason"] == REASON_INVALID]
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == "gpu-node"
        assert "asks to replicate 8 devices but the node has 7" in event["message"]
        assert event["message"].endswith("serving what still fits")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await kubelet.stop()
    assert not (root / "nvidia-gpu.shared.sock").exists()
