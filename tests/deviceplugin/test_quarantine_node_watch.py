"""The device plugin follows the repair loop's quarantine list on the one watch it keeps on its Node.

With --node-name alone (no --config-dir) the plugin watches its Node only for the quarantine list;
with --config-dir the same watch carries the config label too. Either way there is one watch
request, and through the real gRPC path (kubelet peer, ListAndWatch) every device of a withheld GPU
(its MIG devices, its time-slicing replicas) is announced Unhealthy, which takes it out of the
node's allocatable (capacity keeps it: the kubelet's way to withhold a device), and comes back
Healthy when the loop releases the GPU. The last test runs the real command against kmock's API.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from kube.kmock_server import kmock_server, write_kubeconfig

from gpuchain.api.config.v1.config import parse_config
from gpuchain.api.config.v1.selection import NODE_CONFIG_LABEL
from gpuchain.deviceplugin.nodeconfig import ConfigFollower, ConfigSource, NodeLabelWatch
from gpuchain.deviceplugin.quarantine import QuarantineFollower, ride
from gpuchain.gpu.model import Gpu
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import LiveCluster
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kubelet.node import SimNode, start_sim_node
from gpuchain.kubelet.peer import KubeletPeer
from gpuchain.sim.remediation import node_object

MIXED_SHARED = parse_config(
    "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}"
)


def owner(sim: SimNode, device_id: str) -> str:
    """The physical GPU behind an announced id: a replica ``UUID::i``, a MIG device or a whole GPU."""
    uuid = device_id.split("::")[0]
    for gpu in sim.backend.inventory().gpus:
        if uuid == gpu.uuid or uuid in {m.uuid for m in gpu.mig_devices}:
            return gpu.uuid
    raise AssertionError(f"{device_id}: no such device")


def unhealthy_gpus(sim: SimNode) -> set[str]:
    """The GPUs with any device announced Unhealthy in the last ListAndWatch of any resource."""
    return {owner(sim, i) for ep in sim.kubelet.endpoints.values() for i, d in ep.devices.items() if not d.healthy}


def announced(sim: SimNode, gpu: Gpu) -> dict[str, bool]:
    """Every id the plugin announces for ``gpu`` and whether it is Healthy."""
    return {
        i: d.healthy
        for ep in sim.kubelet.endpoints.values()
        for i, d in ep.devices.items()
        if owner(sim, i) == gpu.uuid
    }


def quarantine(cluster: MemoryCluster, name: str, *gpus: Gpu) -> None:
    value = ",".join(g.uuid for g in gpus) or None
    cluster.patch(NODE, name=name, patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: value}}})


async def test_node_name_alone_withholds_mig_devices_and_replicas_through_one_watch() -> None:
    backend = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    sim = await start_sim_node(config=MIXED_SHARED, backend=backend)
    name = backend.topology.node
    cluster = MemoryCluster([node_object(name)])
    watch = NodeLabelWatch(cluster, node_name=name)
    label, rv = watch.read()
    QuarantineFollower(cluster, node_name=name, apply=sim.plugin.set_quarantined).attach(watch)
    riding = asyncio.create_task(ride(watch, label=label, resource_version=rv))
    try:
        gpus = backend.inventory().gpus
        mig = next(g for g in gpus if g.mig_enabled and g.mig_devices)
        whole = next(g for g in gpus if not g.mig_enabled)
        before = dict(sim.kubelet.allocatable())
        assert len(announced(sim, whole)) == 4 and len(announced(sim, mig)) == len(mig.mig_devices)

        quarantine(cluster, name, mig, whole)
        # Each resource (the replicas, every MIG profile) has its own ListAndWatch stream, so wait
        # until all of them have announced the change, not just the first of each GPU.
        await sim.kubelet.wait_for(
            lambda: not any(announced(sim, mig).values()) and not any(announced(sim, whole).values())
        )
        assert unhealthy_gpus(sim) == {mig.uuid, whole.uuid}
        assert sum(sim.kubelet.allocatable().values()) == sum(before.values()) - 4 - len(mig.mig_devices)
        assert sim.kubelet.capacity() == before  # withheld, still announced

        quarantine(cluster, name, mig)  # the loop re-admitted the whole GPU
        await sim.kubelet.wait_for(lambda: all(announced(sim, whole).values()))
        assert unhealthy_gpus(sim) == {mig.uuid}

        quarantine(cluster, name)
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable() == before)
        assert unhealthy_gpus(sim) == set()
        assert cluster.calls.by_verb["watch"] == 1  # one watch on the Node, no second one
    finally:
        riding.cancel()
        await sim.stop()


async def test_with_a_config_dir_the_label_and_the_quarantine_share_the_watch(tmp_path: Path) -> None:
    """The config follower reads the watch; the quarantine rides on it, and a reload to another
    config (time-slicing) keeps the withheld GPU withheld, replicas included."""
    directory = tmp_path / "configs"
    directory.mkdir()
    (directory / "default").write_text("version: v1\n")
    (directory / "ts").write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n")
    source = ConfigSource(directory=directory)
    sim = await start_sim_node(config=source.load(None, {}))
    name = sim.backend.topology.node
    cluster = MemoryCluster([node_object(name)])
    watch = NodeLabelWatch(cluster, node_name=name)
    label, rv = watch.read()
    QuarantineFollower(cluster, node_name=name, apply=sim.plugin.set_quarantined).attach(watch)
    follower = ConfigFollower(sim.plugin, source=source, env={}, label=label, watch=watch)
    following = asyncio.create_task(follower.follow(rv))
    try:
        victim = sim.backend.inventory().gpu(6)
        quarantine(cluster, name, victim)
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable() == {"nvidia.com/gpu": 7})
        cluster.patch(NODE, name=name, patch={"metadata": {"labels": {NODE_CONFIG_LABEL: "ts"}}})
        await sim.kubelet.wait_for(lambda: sim.kubelet.capacity() == {"nvidia.com/gpu": 16}, timeout=10)
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable() == {"nvidia.com/gpu": 14})
        assert announced(sim, victim) == {f"{victim.uuid}::0": False, f"{victim.uuid}::1": False}
        quarantine(cluster, name)
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable() == {"nvidia.com/gpu": 16})
        assert cluster.calls.by_verb["watch"] == 1
    finally:
        following.cancel()
        await sim.stop()


def test_a_quarantine_already_on_the_node_applies_before_the_watch_starts() -> None:
    """A plugin that (re)starts while the loop holds a GPU withholds it from its first device list:
    the startup read of the Node feeds the quarantine."""
    cluster = MemoryCluster([node_object("n")])
    cluster.patch(NODE, name="n", patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: "GPU-a,GPU-b"}}})
    seen: list[frozenset[str]] = []
    watch = NodeLabelWatch(cluster, node_name="n")
    watch.read()
    QuarantineFollower(cluster, node_name="n", apply=seen.append).attach(watch)
    assert seen == [frozenset({"GPU-a", "GPU-b"})]
    assert cluster.calls.by_verb["watch"] == 0


def test_an_observer_that_fails_does_not_stop_the_watch() -> None:
    cluster = MemoryCluster([node_object("n")])
    watch = NodeLabelWatch(cluster, node_name="n")
    seen: list[str] = []

    def broken(_node: object) -> None:
        raise RuntimeError("observer bug")

    watch.observers += [broken, lambda node: seen.append(node["metadata"]["name"])]
    watch.read()
    assert seen == ["n"] and watch.node is not None


async def test_the_command_with_node_name_alone_follows_the_quarantine_over_a_real_http_api(
    tmp_path: Path, short_dir: Path
) -> None:
    """`gpuchain device-plugin --config-file F` with NODE_NAME, no --config-dir: the Node is read and
    watched through LiveCluster over kmock's HTTP API, the kubelet peer serves over unix sockets."""
    root = short_dir
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n")
    gpu = SimBackend.from_preset("h100-80gb-x8").inventory().gpu(3)  # the command's default preset
    kubelet = KubeletPeer(root)
    await kubelet.start()
    with kmock_server() as (url, _emulator):
        cluster = LiveCluster.from_url(url)
        node = node_object("gpu-0")
        node["metadata"]["annotations"] = {QUARANTINE_ANNOTATION: gpu.uuid}  # held before the plugin starts
        cluster.create(node)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
        env |= {"KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig", url)), "NODE_NAME": "gpu-0"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gpuchain", "device-plugin", "--backend", "sim", "--config-file", str(cfg)),
            *("--socket-dir", str(root)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        try:
            await kubelet.wait_for(lambda: kubelet.allocatable() == {"nvidia.com/gpu": 14}, timeout=20)
            first = next(u for u in kubelet.updates if u.resource == "nvidia.com/gpu")
            assert (first.capacity, first.allocatable) == (16, 14)  # withheld from the very first list
            replicas = kubelet.endpoints["nvidia.com/gpu"].devices
            assert {i for i, d in replicas.items() if not d.healthy} == {f"{gpu.uuid}::0", f"{gpu.uuid}::1"}
            released = {"metadata": {"annotations": {QUARANTINE_ANNOTATION: None}}}
            await asyncio.to_thread(cluster.patch, NODE, name="gpu-0", patch=released)
            await kubelet.wait_for(lambda: kubelet.allocatable() == {"nvidia.com/gpu": 16}, timeout=10)
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await kubelet.stop()
            cluster.close()
    text = out.decode()
    assert proc.returncode == 0, text
    assert f"following Node gpu-0's repair loop quarantine ({QUARANTINE_ANNOTATION})" in text
    assert f"GPUs quarantined by the repair loop: {gpu.uuid}" in text
    assert "the repair loop released every GPU" in text
