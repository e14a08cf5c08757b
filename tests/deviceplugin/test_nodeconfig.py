"""Per-node config: the Node's nvidia.com/device-plugin.config label picks the config, and relabelling
reloads it, with the plugin serving over real unix sockets and the Node in a MemoryCluster."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.sim_node import registered_again

from gpuchain.api.config.v1.selection import (
    CLUSTER_DEFAULT_SOURCE,
    NODE_CONFIG_LABEL,
    ConfigKeyError,
    choose_config_file,
    select_config_key,
)
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.deviceplugin.nodeconfig import (
    EVENT_COMPONENT,
    REASON_NOT_FOUND,
    ConfigFollower,
    ConfigSource,
    NodeLabelWatch,
    node_config_label,
)
from gpuchain.kube import NODE, KubeError, MemoryCluster, WatchEvent
from gpuchain.kube.objects import Obj
from gpuchain.kubelet.node import SimNode, start_sim_node

GPU = "nvidia.com/gpu"
NODE_NAME = "gpu-node-1"
TIME_SLICING = "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}\n"


# ---- the decision (pure) ------------------------------------------------------------------------


def test_label_wins_over_cluster_default_and_default() -> None:
    assert select_config_key("ts", cluster_default="mig", available={"default", "ts", "mig"}) == "ts"


def test_without_label_the_cluster_default_then_default_then_the_only_key() -> None:
    assert select_config_key(None, cluster_default="mig", available={"default", "mig"}) == "mig"
    assert select_config_key("", cluster_default=None, available={"default", "mig"}) == "default"
    assert select_config_key(None, cluster_default=None, available={"only"}) == "only"
    with pytest.raises(ConfigFileError, match="label the node or add a 'default' key"):
        select_config_key(None, cluster_default=None, available={"a", "b"})


def test_a_label_naming_a_missing_key_is_an_error_listing_the_keys() -> None:
    with pytest.raises(ConfigKeyError) as err:
        select_config_key("h100-mig", cluster_default="default", available={"ts", "default"})
    assert (err.value.field, err.value.key, err.value.available) == (NODE_CONFIG_LABEL, "h100-mig", ("default", "ts"))
    assert "'h100-mig', which does not exist; available: default, ts" in str(err.value)


def test_a_missing_cluster_default_is_not_silently_replaced_by_default() -> None:
    with pytest.raises(ConfigKeyError) as err:
        select_config_key(None, cluster_default="gone", available={"default"})
    assert err.value.field == CLUSTER_DEFAULT_SOURCE and "devicePlugin.config.default" in str(err.value)


def test_choose_config_file_passes_label_and_cluster_default(tmp_path: Path) -> None:
    for key in ("default", "ts", "mig"):
        (tmp_path / key).write_text("")
    assert choose_config_file(tmp_path, label=None, cluster_default="mig").name == "mig"
    assert choose_config_file(tmp_path, label="ts", cluster_default="mig").name == "ts"
    with pytest.raises(ConfigKeyError, match=str(tmp_path)):
        choose_config_file(tmp_path, label="nope", cluster_default="mig")


def test_node_config_label_treats_an_empty_value_as_absent() -> None:
    assert node_config_label(_node("ts")) == "ts"
    assert node_config_label(_node("")) is None
    assert node_config_label(_node(None)) is None
    assert node_config_label(None) is None


# ---- the plugin following its Node ----------------------------------------------------------------


def _node(label: str | None, name: str = NODE_NAME) -> Obj:
    labels = {"kubernetes.io/hostname": name} | ({NODE_CONFIG_LABEL: label} if label is not None else {})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _relabel(cluster: MemoryCluster, label: str | None, name: str = NODE_NAME) -> None:
    cluster.patch(NODE, name=name, patch={"metadata": {"labels": {NODE_CONFIG_LABEL: label}}})


def _config_dir(tmp_path: Path) -> Path:
    (tmp_path / "default").write_text("version: v1\n")
    (tmp_path / "ts").write_text(TIME_SLICING)
    (tmp_path / "..data").mkdir()  # a mounted ConfigMap's hidden entries are not keys
    return tmp_path


async def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


class Following:
    """A simulated node whose plugin follows its Node's label, started as the command starts it."""

    def __init__(self, cluster: MemoryCluster, source: ConfigSource, watch: NodeLabelWatch) -> None:
        self.cluster, self.source, self.watch = cluster, source, watch
        self.sim: SimNode | None = None
        self.follower: ConfigFollower | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        label, rv = self.watch.read()
        self.sim = await start_sim_node(config=self.source.load(label, {}))
        self.follower = ConfigFollower(self.sim.plugin, source=self.source, env={}, label=label, watch=self.watch)
        self.task = asyncio.create_task(self.follower.follow(rv))

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await self.task
        if self.sim is not None:
            await self.sim.stop()


@pytest.fixture
async def following(tmp_path: Path) -> AsyncIterator[Following]:
    cluster = MemoryCluster([_node("ts"), _node("ts", "gpu-node-2")])
    f = Following(cluster, ConfigSource(directory=_config_dir(tmp_path)), NodeLabelWatch(cluster, node_name=NODE_NAME))
    await f.start()
    yield f
    await f.stop()


async def test_a_node_labelled_ts_gets_time_slicing_and_relabelling_brings_default_back(
    following: Following,
) -> None:
    assert following.sim is not None
    kubelet = following.sim.kubelet
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 16})
    assert all("::" in i for i in kubelet.endpoints[GPU].devices), "replica ids <UUID>::<n>"
    registrations = len(following.sim.plugin.registrations)

    _relabel(following.cluster, "default")
    await registered_again(following.sim, registrations)  # re-registered with the kubelet
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8})

    _relabel(following.cluster, "ts")
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 16})


async def test_another_nodes_label_is_ignored(following: Following) -> None:
    assert following.sim is not None and following.follower is not None
    registrations = len(following.sim.plugin.registrations)
    _relabel(following.cluster, "default", "gpu-node-2")
    _relabel(following.cluster, "ts")  # same value: no event, no reload
    _relabel(following.cluster, "zzz")  # refused: once it is, every earlier event was handled
    await _until(lambda: following.follower is not None and bool(following.follower.failures))
    assert len(following.sim.plugin.registrations) == registrations
    assert following.sim.kubelet.allocatable() == {GPU: 16}


async def test_a_label_naming_a_missing_key_keeps_the_running_config_and_reports_it(
    following: Following, caplog: pytest.LogCaptureFixture
) -> None:
    assert following.sim is not None and following.follower is not None
    kubelet = following.sim.kubelet
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 16})
    registrations = len(following.sim.plugin.registrations)

    with caplog.at_level(logging.ERROR, logger="gpuchain.deviceplugin.nodeconfig"):
        _relabel(following.cluster, "h100-mig")
        await _until(lambda: following.follower is not None and bool(following.follower.failures))
    assert "config not reloaded, keeping the running one" in caplog.text
    assert "'h100-mig', which does not exist; available: default, ts" in caplog.text
    assert kubelet.allocatable() == {GPU: 16}
    assert len(following.sim.plugin.registrations) == registrations, "nothing re-served"
    assert following.sim.plugin.config.sharing.time_slicing.resources[0].replicas == 2

    (event,) = following.cluster.events_for(following.cluster.get(NODE, name=NODE_NAME))
    assert (event["type"], event["reason"], event["source"]["component"]) == (
        "Warning",
        REASON_NOT_FOUND,
        EVENT_COMPONENT,
    )
    assert "h100-mig" in event["message"] and "available: default, ts" in event["message"]

    _relabel(following.cluster, "default")  # the watch goes on after a refused label
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8})


async def test_removing_the_label_falls_back_to_the_cluster_default(tmp_path: Path) -> None:
    cluster = MemoryCluster([_node("default")])
    source = ConfigSource(directory=_config_dir(tmp_path), cluster_default="ts")
    f = Following(cluster, source, NodeLabelWatch(cluster, node_name=NODE_NAME))
    await f.start()
    try:
        assert f.sim is not None
        kubelet = f.sim.kubelet
        assert kubelet.allocatable() == {GPU: 8}
        _relabel(cluster, None)
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 16})
    finally:
        await f.stop()


async def test_sighup_reload_uses_the_label_seen_last(following: Following, tmp_path: Path) -> None:
    """SIGHUP and label changes share one path: a changed file under the current label is picked up."""
    assert following.sim is not None and following.follower is not None
    kubelet = following.sim.kubelet
    (tmp_path / "ts").write_text(TIME_SLICING.replace("replicas: 2", "replicas: 3"))
    assert await following.follower.reload("SIGHUP")
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 24})


class FlakyCluster(MemoryCluster):
    """A MemoryCluster whose first watches fail, as a dropped connection or an API error would."""

    def __init__(self, objects: list[Obj], failures: int) -> None:
        super().__init__(objects)
        self.failures = failures

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        if self.failures > 0:
            self.failures -= 1
            raise KubeError("connection reset by peer")
        async for event in super().watch(*args, **kwargs):
            yield event


async def test_the_watch_retries_and_resyncs_after_failures(caplog: pytest.LogCaptureFixture) -> None:
    cluster = FlakyCluster([_node("ts")], failures=2)
    watch = NodeLabelWatch(cluster, node_name=NODE_NAME, retry_seconds=0.01)
    label, rv = watch.read()
    _relabel(cluster, "default")  # changed while the watch is down: seen on resync
    changes = watch.changes(label, rv)
    with caplog.at_level(logging.WARNING):
        assert await asyncio.wait_for(anext(changes), 5) == "default"
    assert cluster.failures == 0 and "connection reset by peer" in caplog.text
    _relabel(cluster, None)
    assert await asyncio.wait_for(anext(changes), 5) is None
    await changes.aclose()


async def test_a_watch_that_ends_resumes_without_missing_a_change() -> None:
    cluster = MemoryCluster([_node("ts")])
    watch = NodeLabelWatch(cluster, node_name=NODE_NAME, watch_seconds=0.05)
    label, rv = watch.read()
    changes = watch.changes(label, rv)
    pending = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0.15)  # several watches ended and resumed
    _relabel(cluster, "default")
    assert await asyncio.wait_for(pending, 5) == "default"
    await changes.aclose()


@pytest.mark.parametrize(("config_naming", "expected"), [(False, {GPU: 16}), (True, {GPU: 6, "nvidia.com/gpu.ts": 4})])
async def test_relabelling_applies_nvidias_naming_rule_unless_told_otherwise(
    tmp_path: Path, config_naming: bool, expected: dict[str, int]
) -> None:
    """A label switch reloads through the start-up path: the config's rename and devices are
    dropped as NVIDIA's plugin drops them, unless the source keeps the config's naming."""
    directory = _config_dir(tmp_path)
    (directory / "named").write_text(
        "sharing: {timeSlicing: {resources: [{name: gpu, rename: gpu.ts, devices: 2, replicas: 2}]}}\n"
    )
    cluster = MemoryCluster([_node("default")])
    f = Following(
        cluster,
        ConfigSource(directory=directory, config_naming=config_naming),
        NodeLabelWatch(cluster, node_name=NODE_NAME),
    )
    await f.start()
    try:
        assert f.sim is not None
        kubelet = f.sim.kubelet
        await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8})
        _relabel(cluster, "named")
        await kubelet.wait_for(lambda: kubelet.allocatable() == expected)
    finally:
        await f.stop()


async def test_a_reload_to_a_config_only_the_plugin_refuses_keeps_the_running_one(following: Following) -> None:
    assert following.sim is not None and following.follower is not None
    assert following.source.directory is not None
    (following.source.directory / "default").write_text("flags: {deviceDiscoveryStrategy: vfio}\n")
    _relabel(following.cluster, "default")
    await _until(lambda: following.follower is not None and bool(following.follower.failures))
    assert "vfio is for feature discovery only" in str(following.follower.failures[0])
    assert following.sim.kubelet.allocatable() == {GPU: 16}
