"""A GPU reset by the repair loop on a node in MIG mode, and the MIG manager carving it again.

A reset keeps MIG mode but destroys the GPU's GPU and compute instances (NVIDIA's MIG user
guide: MIG devices do not persist across a GPU reset; ``SimBackend.reset_gpu`` models it). The MIG
manager, which once read ``success`` and never looked again, now looks when it has news of a reset
(the repair loop's quarantine on the Node, NVML let go) and carves exactly the GPUs that lost their
MIG devices, leaving the others and the node's pods alone.

The layout is the one NVIDIA's mig-parted example config calls ``custom-config`` in shape (per-GPU
``devices`` lists, NVIDIA/mig-parted examples/config.yaml), written for the 8-GPU H100 preset
``h100-80gb-x8-mig-mixed`` (GPUs 0-3 balanced, 4-5 seven 1g.10gb, 6-7 whole).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fakes.releasable import ReleasableView

from gpuchain.api.config.v1.config import parse_config as plugin_config
from gpuchain.common.labels import DEPLOY_PREFIX, MIG_CONFIG, MIG_CONFIG_STATE, PAUSED_FOR_MIG_CHANGE
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import EVENT, NODE, POD, MemoryCluster
from gpuchain.kube.mig_owner import DRA_MIG_GPUS, annotation_value
from gpuchain.kubelet.node import start_sim_node
from gpuchain.mig.agent import (
    Apply,
    LayoutCheck,
    Machine,
    Observation,
    Phase,
    Policy,
    RecordEvent,
    SetLabels,
    State,
    step,
)
from gpuchain.mig.apply import lost_to_reset_gpus
from gpuchain.mig.config import parse_config
from gpuchain.mig.manager import MigManager
from gpuchain.remediation.gpuloop import LOOP_ANNOTATION, Stage, decode_records
from gpuchain.remediation.loopagent import GpuLoopAgent
from gpuchain.remediation.publisher import GpuHealthPublisher

NODE_NAME = "h100-mig-node"
CONFIG = parse_config(
    "version: v1\nmig-configs:\n  custom-config:\n"
    "    - devices: [0, 1, 2, 3]\n      mig-enabled: true\n"
    "      mig-devices: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}\n"
    "    - devices: [4, 5]\n      mig-enabled: true\n      mig-devices: {1g.10gb: 7}\n"
    "    - devices: [6, 7]\n      mig-enabled: false\n"
)


def _node() -> dict[str, Any]:
    labels = {MIG_CONFIG: "custom-config", f"{DEPLOY_PREFIX}device-plugin": "true"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": labels}, "spec": {}}


def _workload() -> dict[str, Any]:
    """A pod on GPU 4's MIG devices: a full layout change under --evict would evict it."""
    limits = {"nvidia.com/mig-1g.10gb": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml"},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


def _instances(sim: SimBackend) -> dict[int, list[tuple[int, str, int]]]:
    """GPU -> its GPU instances as (id, profile, start): what must stay put on untouched GPUs."""
    return {
        g.index: [(gi.gi_id, gi.profile, gi.start) for gi in sim.gpu_instances(g.index)]
        for g in sim.inventory().gpus
        if sim.mig_mode(g.index).current
    }


class Rig:
    """The node's MIG manager and repair loop (publisher + loop agent) on one simulated 8-GPU node."""

    def __init__(self) -> None:
        self.sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
        self.cluster = MemoryCluster([_node(), _workload()])
        self.manager = MigManager(
            self.cluster, backend=self.sim, node=NODE_NAME, config=CONFIG, policy=Policy(timeout_s=60, evict=True)
        )
        self.publisher = GpuHealthPublisher(self.sim, cluster=self.cluster, node_name=NODE_NAME, quiet_seconds=0)
        self.loop = GpuLoopAgent(self.sim, cluster=self.cluster, node_name=NODE_NAME)
        self.plugin_labels: list[str | None] = []
        real_patch = self.cluster.patch

        def patch(kind: Any, name: str, patch: Any, namespace: str | None = None) -> Any:
            labels = (patch.get("metadata") or {}).get("labels") or {}
            if f"{DEPLOY_PREFIX}device-plugin" in labels:
                self.plugin_labels.append(labels[f"{DEPLOY_PREFIX}device-plugin"])
            return real_patch(kind, name=name, patch=patch, namespace=namespace)

        self.cluster.patch = patch  # type: ignore[method-assign]

    def labels(self) -> dict[str, str]:
        return dict(self.cluster.get(NODE, name=NODE_NAME)["metadata"].get("labels") or {})

    def annotations(self) -> dict[str, str]:
        return dict(self.cluster.get(NODE, name=NODE_NAME)["metadata"].get("annotations") or {})

    def stage(self, uuid: str) -> Stage | None:
        rec = decode_records(self.annotations().get(LOOP_ANNOTATION)).get(uuid)
        return None if rec is None else rec.stage

    def repair_pass(self) -> None:
        self.publisher.publish()
        self.loop.run_once()

    def events(self) -> list[str]:
        return [e["reason"] for e in self.cluster.snapshot(EVENT)]


def test_a_reset_by_the_loop_is_carved_again_on_that_gpu_only_without_eviction() -> None:
    r = Rig()
    r.manager.reconcile()
    assert r.labels()[MIG_CONFIG_STATE] == "success"  # the preset already has the layout: nothing applied
    before = _instances(r.sim)
    uuid = r.sim.inventory().gpus[1].uuid
    r.publisher.handle(r.sim.inject_xid(1, xid=48, message="double-bit ECC error"))  # NVIDIA's XID catalog: reset

    for _ in range(10):
        r.repair_pass()
        r.manager.reconcile()
        if r.stage(uuid) in (Stage.BURN_IN, Stage.HEALTHY) and not lost_to_reset_gpus(
            r.sim, config=CONFIG, name="custom-config"
        ):
            break
    assert r.stage(uuid) in (Stage.BURN_IN, Stage.HEALTHY)  # the loop did reset GPU 1
    assert "GPUResetStarted" in r.events()

    after = _instances(r.sim)
    assert {g: after[g] for g in after if g != 1} == {g: before[g] for g in before if g != 1}  # untouched
    layout = sorted(gi[1] for gi in after[1])
    assert layout == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]  # GPU 1 carved again per custom-config
    assert r.labels()[MIG_CONFIG_STATE] == "success"
    assert r.cluster.get(POD, name="train-0", namespace="ml")  # nothing evicted, although the manager may evict
    assert r.cluster.calls.by_verb["evict"] == 0
    # The operands were paused and put back (how the device plugin reads the new MIG devices).
    assert r.plugin_labels == [PAUSED_FOR_MIG_CHANGE, "true"]
    assert r.labels()[f"{DEPLOY_PREFIX}device-plugin"] == "true"
    assert "MigConfigRecarve" in r.events() and "MigConfigSuccess" in r.events()


def test_without_news_of_a_reset_the_gpus_are_not_read_again() -> None:
    r = Rig()
    r.manager.reconcile()
    reads = 0
    real = r.sim.gpu_instances

    def counted(index: int) -> Any:
        nonlocal reads
        reads += 1
        return real(index)

    r.sim.gpu_instances = counted  # type: ignore[method-assign]
    r.cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {"unrelated": "x"}}})
    r.manager.reconcile()
    assert reads == 0
    r.cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: "GPU-x"}}})
    r.manager.reconcile()
    assert reads > 0


def test_a_gpu_the_dra_driver_owns_is_not_carved_again() -> None:
    """A GPU whose MIG layout the DRA driver owns (``kube.mig_owner``) holds only the instances its
    claims made, none at first: to the layout's eye it lost them to a reset, and it is not the MIG
    manager's to carve."""
    r = Rig()
    r.manager.reconcile()
    for gi in r.sim.gpu_instances(4):  # the DRA driver takes GPU 4, keeping none of its instances
        r.sim.destroy_gpu_instance(4, gi.gi_id)
    r.cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"annotations": {DRA_MIG_GPUS: annotation_value({4})}}})
    before = _instances(r.sim)
    quarantine = r.sim.inventory().gpus[1].uuid  # news of a reset elsewhere on the node
    r.cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: quarantine}}})
    for _ in range(5):
        r.manager.reconcile()
    assert _instances(r.sim) == before and before[4] == []
    assert "MigConfigRecarve" not in r.events()
    assert r.labels()[MIG_CONFIG_STATE] == "success"


def test_a_gpu_the_dra_driver_takes_as_a_recarve_begins_is_not_carved() -> None:
    """A recarve is a MIG change like any other: ``pending`` is written first and the GPUs the DRA
    driver owns are read after it (``kube.mig_owner``), so a GPU the driver announced just before is
    left to it; the driver, which reads ``pending`` before it creates a MIG device, waits."""
    r = Rig()
    r.manager.reconcile()
    r.sim.reset_gpu(1)
    r.cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: "GPU-x"}}})
    manager_patch = r.cluster.patch
    announced = False

    def patch(kind: Any, name: str, patch: Any, namespace: str | None = None) -> Any:
        nonlocal announced
        if not announced:  # the DRA driver announces GPU 1 just before the manager's first write
            announced = True
            manager_patch(
                NODE, name=NODE_NAME, patch={"metadata": {"annotations": {DRA_MIG_GPUS: annotation_value({1})}}}
            )
        return manager_patch(kind, name=name, patch=patch, namespace=namespace)

    r.cluster.patch = patch  # type: ignore[method-assign]
    r.manager.reconcile()
    assert announced and not r.sim.gpu_instances(1)
    assert r.labels()[MIG_CONFIG_STATE] == "success"


def test_a_gpu_that_differs_otherwise_is_no_recarve() -> None:
    """Only a GPU left as a reset leaves it counts; any other difference (a person's change) is
    not re-carved behind the node's back: the node is left as before."""
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    sim.reset_gpu(1)
    assert lost_to_reset_gpus(sim, config=CONFIG, name="custom-config") == (1,)
    sim.destroy_gpu_instance(4, sim.gpu_instances(4)[0].gi_id)  # six of seven left on GPU 4
    assert lost_to_reset_gpus(sim, config=CONFIG, name="custom-config") == ()


@pytest.mark.parametrize("state", [State.FAILED, State.REBOOTING, State.PENDING])
def test_recarve_only_from_success(state: State) -> None:
    m = Machine(phase=Phase.IDLE, config="custom-config", outcome=state)
    labels = {MIG_CONFIG: "custom-config", MIG_CONFIG_STATE: state.value}
    nxt, actions = step(m, obs=Observation(labels=labels, recarve=(1,)), policy=Policy(), now=0.0)
    assert nxt.phase is (Phase.IDLE if state is not State.PENDING else Phase.CHECK)
    assert not any(isinstance(a, RecordEvent) and a.reason == "MigConfigRecarve" for a in actions)


def test_recarve_skips_the_workloads_and_applies_to_those_gpus_only() -> None:
    m = Machine(phase=Phase.IDLE, config="custom-config", outcome=State.SUCCESS)
    labels = {MIG_CONFIG: "custom-config", MIG_CONFIG_STATE: "success"}
    busy = Observation(labels=labels, workload_pods=(), recarve=(1, 2))
    m, actions = step(m, obs=busy, policy=Policy(), now=5.0)
    assert m.phase is Phase.CHECK and m.recarve == (1, 2)
    assert SetLabels({MIG_CONFIG_STATE: State.PENDING}) in actions  # a MIG change, as the DRA driver reads it
    labels[MIG_CONFIG_STATE] = "pending"
    m, _ = step(m, obs=Observation(labels=labels, layout=LayoutCheck(recarve=(1, 2))), policy=Policy(), now=5.0)
    assert m.phase is Phase.PAUSE  # no workloads phase
    m, _ = step(m, obs=Observation(labels=labels), policy=Policy(operands=()), now=5.0)
    m, actions = step(m, obs=Observation(labels=labels), policy=Policy(operands=()), now=5.0)
    assert actions == [Apply("custom-config", (1, 2))]


async def test_the_running_manager_carves_again_without_a_relabel() -> None:
    r = Rig()
    r.manager.clock = time.monotonic
    stop = asyncio.Event()
    task = asyncio.create_task(r.manager.run(interval=0.05, stop=stop, resync=60))
    try:
        deadline = time.monotonic() + 10
        while r.labels().get(MIG_CONFIG_STATE) != "success":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        r.publisher.handle(r.sim.inject_xid(2, xid=48, message="double-bit ECC error"))
        uuid = r.sim.inventory().gpus[2].uuid
        while r.stage(uuid) not in (Stage.BURN_IN, Stage.HEALTHY):
            assert time.monotonic() < deadline
            await asyncio.to_thread(r.repair_pass)
        while len(r.sim.gpu_instances(2)) != 4:
            assert time.monotonic() < deadline, "GPU 2 was not carved again"
            await asyncio.sleep(0.02)
        # The manager carves the GPU, then reports the layout: the label follows the instances, within the deadline.
        while r.labels()[MIG_CONFIG_STATE] != "success":
            assert time.monotonic() < deadline, f"the state stayed {r.labels()[MIG_CONFIG_STATE]} after the carve"
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


PLUGIN_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "nvidia-device-plugin-daemonset-x1", "namespace": "gpu-operator"},
    "spec": {
        "nodeName": NODE_NAME,
        "nodeSelector": {f"{DEPLOY_PREFIX}device-plugin": "true"},
        "containers": [{"name": "p"}],
    },
    "status": {"phase": "Running"},
}


async def test_the_device_plugin_announces_the_new_mig_devices_after_its_restart() -> None:
    """Through the real gRPC plugin and kubelet peer: the plugin stops while paused (its DaemonSet
    pod leaves the node, as in test_chain.py), and once back announces GPU 1's new MIG devices."""
    r = Rig()
    r.cluster.create(PLUGIN_POD)
    node = await start_sim_node(backend=r.sim, config=plugin_config("version: v1\nflags:\n  migStrategy: mixed\n"))
    try:
        r.manager.reconcile()
        assert r.labels()[MIG_CONFIG_STATE] == "success"

        def announced() -> set[str]:
            return {d.mig_uuid or "" for res in node.plugin.resources for d in res.devices if d.gpu_index == 1}

        def present() -> set[str]:
            return {m.uuid for g in r.sim.inventory().gpus if g.index == 1 for m in g.mig_devices}

        assert announced() == present() and len(present()) == 4
        r.publisher.handle(r.sim.inject_xid(1, xid=48, message="double-bit ECC error"))
        uuid = r.sim.inventory().gpus[1].uuid
        for _ in range(10):
            r.repair_pass()
            if r.stage(uuid) in (Stage.BURN_IN, Stage.HEALTHY):
                break
        assert not present()  # the reset took GPU 1's MIG devices
        r.manager.reconcile()
        assert r.labels()[f"{DEPLOY_PREFIX}device-plugin"] == PAUSED_FOR_MIG_CHANGE
        await node.plugin.stop()
        r.cluster.delete(POD, name=PLUGIN_POD["metadata"]["name"], namespace="gpu-operator")
        r.manager.reconcile()
        assert r.labels()[f"{DEPLOY_PREFIX}device-plugin"] == "true"
        assert len(present()) == 4
        r.cluster.create(PLUGIN_POD)
        await node.restart_plugin()
        await node.kubelet.wait_for(lambda: announced() == present())
        assert r.labels()[MIG_CONFIG_STATE] == "success"
    finally:
        await node.stop()


async def test_nvml_let_go_during_a_round_is_news_of_a_reset_without_a_quarantine() -> None:
    """A reset by someone else than the loop (no quarantine on the Node) while the MIG manager had
    let go of NVML and a round was due (here an unrelated Node change woke it): once NVML is back it
    looks and carves again. A release and take-back while it sleeps is not seen (no callback from
    the release follower): only the loop's quarantine covers that."""
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    view = ReleasableView(sim)
    cluster = MemoryCluster([_node()])
    manager = MigManager(cluster, backend=view, node=NODE_NAME, config=CONFIG, policy=Policy(timeout_s=60, operands=()))
    manager.clock = time.monotonic
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(interval=0.05, stop=stop, resync=60))
    try:
        deadline = time.monotonic() + 10
        while cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"].get(MIG_CONFIG_STATE) != "success":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        view.release()
        cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {"unrelated": "x"}}})
        await asyncio.sleep(0.2)  # the woken manager waits for NVML
        sim.reset_gpu(5)
        view.reacquire()
        while len(sim.gpu_instances(5)) != 7:
            assert time.monotonic() < deadline, "GPU 5 was not carved again"
            await asyncio.sleep(0.02)
        assert cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"][MIG_CONFIG_STATE] == "success"
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
