"""The MIG manager and the DRA driver never change one GPU's MIG layout at once (``kube.mig_owner``).

The DRA driver with partitionable devices names the GPUs it owns in a Node annotation before it
publishes them; the MIG manager, its change already ``pending``, refuses a layout that would touch
one of them (state ``failed``, the reason annotation, a Warning Event: what the doctor reads). The
DRA driver refuses a partitionable Prepare while a change is ``pending``. Both run here over one
in-memory cluster and one simulated H100 node, as they do over one Node in a cluster."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dra.build import build_driver
from dra.conftest import Allocate
from dra.fakeclock import Clock
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE, MIG_CONFIG_STATE_REASON
from gpuchain.common.scratch import scratch_dir
from gpuchain.dra.claims import allocation_status, resource_claim
from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import EVENT, NODE
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DEVICE_PLUGIN, DRA
from gpuchain.kube.errors import ForbiddenError
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.mig_owner import DRA_MIG_GPUS, mig_change_pending
from gpuchain.mig.agent import Phase, Policy
from gpuchain.mig.apply import apply
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager

Build = Callable[..., DraDriver]


@pytest.fixture
def node_cluster(cluster: MemoryCluster, h100_sim: SimBackend) -> MemoryCluster:
    """The cluster with the simulated node's Node object (nothing else on it)."""
    name = h100_sim.topology.node
    cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}})
    return cluster


@pytest.fixture
def make(node_cluster: MemoryCluster, short_dir: Path, clock: Clock, h100_sim: SimBackend) -> Build:
    def build(**options: bool) -> DraDriver:
        return build_driver(h100_sim, node_cluster, short_dir, clock, **options)

    return build


def _node(cluster: MemoryCluster, sim: SimBackend) -> dict[str, Any]:
    return cluster.get(NODE, name=sim.topology.node)


def _annotations(cluster: MemoryCluster, sim: SimBackend) -> dict[str, str]:
    return dict(_node(cluster, sim)["metadata"].get("annotations") or {})


def _labels(cluster: MemoryCluster, sim: SimBackend) -> dict[str, str]:
    return dict(_node(cluster, sim)["metadata"].get("labels") or {})


CONFIG = default_config()


def _manager(cluster: MemoryCluster, sim: SimBackend) -> MigManager:
    return MigManager(
        cluster, backend=sim, node=sim.topology.node, config=CONFIG, policy=Policy(timeout_s=60, operands=())
    )


def _relabel(cluster: MemoryCluster, sim: SimBackend, labels: dict[str, str | None]) -> None:
    cluster.patch(NODE, name=sim.topology.node, patch={"metadata": {"labels": labels}})


def test_the_driver_names_the_gpus_whose_mig_layout_it_owns_on_its_node(
    make: Build, node_cluster: MemoryCluster, h100_sim: SimBackend
) -> None:
    make(partitionable_mig=True).publish()
    assert _annotations(node_cluster, h100_sim)[DRA_MIG_GPUS] == "0,1,2,3,4,5,6,7"
    version = _node(node_cluster, h100_sim)["metadata"]["resourceVersion"]
    make(partitionable_mig=True).publish()  # a restart: nothing new to announce, no Node write
    assert _node(node_cluster, h100_sim)["metadata"]["resourceVersion"] == version
    make().publish()  # restarted without partitions: the GPUs are the MIG manager's again
    assert DRA_MIG_GPUS not in _annotations(node_cluster, h100_sim)


class _NoNodePatch(MemoryCluster):
    """The cluster as a role without patch on Nodes sees it (the chart without dra.partitionableMig)."""

    def patch(self, kind: Any, name: str, patch: Any, namespace: str | None = None) -> Any:
        if kind == NODE:
            raise ForbiddenError(f"nodes {name} is forbidden: cannot patch")
        return super().patch(kind, name=name, patch=patch, namespace=namespace)


def test_a_stale_announcement_it_may_not_take_back_is_warned_of_and_serving_goes_on(
    h100_sim: SimBackend, short_dir: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = _NoNodePatch()
    name = h100_sim.topology.node
    cluster.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {DRA_MIG_GPUS: "0,1"}}}
    )
    build_driver(h100_sim, cluster, short_dir, clock).publish()
    assert cluster.list(RESOURCE_SLICE)  # published all the same
    assert _annotations(cluster, h100_sim)[DRA_MIG_GPUS] == "0,1"
    assert f"kubectl annotate node {name} {DRA_MIG_GPUS}-" in caplog.text
    with pytest.raises(ForbiddenError):  # announcing GPUs it would publish as partitionable is never skipped
        build_driver(h100_sim, cluster, short_dir, clock, partitionable_mig=True).publish()


def test_the_mig_manager_refuses_a_layout_on_the_dra_drivers_gpus(
    make: Build, node_cluster: MemoryCluster, h100_sim: SimBackend
) -> None:
    make(partitionable_mig=True).publish()
    _relabel(node_cluster, h100_sim, {MIG_CONFIG: "all-1g.10gb"})
    manager = _manager(node_cluster, h100_sim)
    assert manager.reconcile().phase is Phase.IDLE
    labels = _labels(node_cluster, h100_sim)
    assert labels[MIG_CONFIG_STATE] == "failed"
    reason = _annotations(node_cluster, h100_sim)[MIG_CONFIG_STATE_REASON]
    assert "would change GPU 0, 1, 2, 3, 4, 5, 6, 7" in reason and "DRA driver gpu.gpuchain.io" in reason
    assert "--partitionable-mig" in reason
    events = [e for e in node_cluster.list(EVENT) if e["reason"] == "MigConfigFailed"]
    assert [e["type"] for e in events] == ["Warning"] and reason in events[0]["message"]
    assert not any(h100_sim.mig_mode(g.index).current for g in h100_sim.inventory().gpus)  # nothing touched

    make().publish()  # the DRA plugin gives the GPUs up: the next MIG manager applies the layout
    assert _manager(node_cluster, h100_sim).reconcile().outcome == "success"
    assert all(h100_sim.mig_mode(g.index).current for g in h100_sim.inventory().gpus)


def test_a_layout_the_gpus_already_have_is_no_change_to_refuse(
    make: Build, node_cluster: MemoryCluster, h100_sim: SimBackend
) -> None:
    make(partitionable_mig=True).publish()
    _relabel(node_cluster, h100_sim, {MIG_CONFIG: "all-disabled"})  # MIG is off on every GPU already
    assert _manager(node_cluster, h100_sim).reconcile().outcome == "success"


def test_a_partitionable_prepare_waits_out_a_mig_change(
    make: Build, node_cluster: MemoryCluster, h100_sim: SimBackend, allocate: Allocate
) -> None:
    driver = make(partitionable_mig=True)
    driver.publish()
    _relabel(node_cluster, h100_sim, {MIG_CONFIG_STATE: "pending"})  # the MIG manager's change is under way
    node = h100_sim.topology.node
    ref = allocate("mig", node, ["gpu-2-mig-3g40gb-2-4"])
    with pytest.raises(PrepareError, match=r"the MIG manager is changing this node's MIG layout"):
        driver.prepare(ref)
    assert h100_sim.gpu_instances(2) == () and driver.checkpoint.get(ref.uid) is None
    with pytest.raises(PrepareError, match="MIG manager is changing"):
        driver.prepare(allocate("whole", node, ["gpu-3"]))  # a partitionable GPU's full device: MIG mode too

    _relabel(node_cluster, h100_sim, {MIG_CONFIG_STATE: "failed"})  # the change is over (refused, here)
    prepared = driver.prepare(ref)
    assert prepared.devices[0].created is not None and len(h100_sim.gpu_instances(2)) == 1


def test_on_a_device_plugin_node_the_driver_leaves_the_mig_managers_layout_alone(
    make: Build, node_cluster: MemoryCluster, h100_sim: SimBackend
) -> None:
    """The chart runs the DRA plugin on every GPU node; where the node is the device plugin's, the
    static MIG layout is the MIG manager's, not instances an interrupted Prepare left."""
    _relabel(node_cluster, h100_sim, {ALLOCATOR_LABEL: DEVICE_PLUGIN})
    apply(h100_sim, config=CONFIG, name="all-balanced")
    layout = {g.index: h100_sim.gpu_instances(g.index) for g in h100_sim.inventory().gpus}
    driver = make(partitionable_mig=True)
    driver.publish()
    assert driver.withheld and DRA_MIG_GPUS not in _annotations(node_cluster, h100_sim)
    assert {g.index: h100_sim.gpu_instances(g.index) for g in h100_sim.inventory().gpus} == layout
    # handed over to DRA: the driver announces the GPUs, then takes the layout down (docs/dra.md)
    _relabel(node_cluster, h100_sim, {ALLOCATOR_LABEL: DRA})
    driver.node_changed(_node(node_cluster, h100_sim))
    assert _annotations(node_cluster, h100_sim)[DRA_MIG_GPUS] == "0,1,2,3,4,5,6,7"
    assert all(h100_sim.gpu_instances(g.index) == () for g in h100_sim.inventory().gpus)


def test_instances_a_crash_left_wait_for_a_mig_change_to_end(
    make: Build, node_cluster: MemoryCluster, h100_sim: SimBackend
) -> None:
    h100_sim.set_mig_mode(4, True)
    gi = h100_sim.create_gpu_instance(4, profile="2g.20gb", start=2)
    h100_sim.create_compute_instance(4, gi_id=gi)  # made by a Prepare that crashed before recording its claim
    _relabel(node_cluster, h100_sim, {MIG_CONFIG_STATE: "pending"})
    driver = make(partitionable_mig=True)
    driver.publish()
    assert len(h100_sim.gpu_instances(4)) == 1  # the MIG manager is at work: not now
    _relabel(node_cluster, h100_sim, {MIG_CONFIG_STATE: "success"})
    driver.publish()  # the next resync
    assert h100_sim.gpu_instances(4) == ()


# ---- both agents, their steps interleaved at random ---------------------------------------------

LAYOUTS = ["all-1g.10gb", "all-disabled", "all-balanced", "all-3g.40gb"]
SEQ_STEP = st.one_of(
    st.tuples(st.just("label"), st.sampled_from(LAYOUTS)),
    st.tuples(st.just("mig")),
    st.tuples(st.just("dra-start"), st.booleans()),
    st.tuples(st.just("prepare"), st.integers(0, 400)),
    st.tuples(st.just("unprepare"), st.integers(0, 63)),
    st.tuples(st.just("resync")),
)


def _gpu_states(sim: SimBackend) -> dict[int, Any]:
    return {g.index: (sim.mig_mode(g.index), sim.gpu_instances(g.index)) for g in sim.inventory().gpus}


def _claim_instances(driver: DraDriver | None) -> set[tuple[int, int, str, int]]:
    if driver is None:
        return set()
    return {
        (c.gpu_index, c.gi_id, c.profile, c.start)
        for claim in driver.checkpoint.claims()
        for d in claim.devices
        if (c := d.created) is not None
    }


@settings(max_examples=150)
# A MIG device prepared for a claim, then a layout asked for: the MIG manager must keep off its GPU
# (kept as an explicit case: random draws rarely line up five manager steps after a Prepare).
@example(steps=[("dra-start", True), ("prepare", 1), ("label", "all-1g.10gb"), *[("mig",)] * 6])
@given(steps=st.lists(SEQ_STEP, max_size=30))
def test_the_mig_manager_and_the_dra_driver_never_change_one_gpu_at_once(steps: list[tuple[Any, ...]]) -> None:
    """After every step of either agent, in any order: the MIG manager changed no GPU holding a MIG
    device a prepared claim has, the DRA driver changed no GPU while a MIG change was pending, and
    every claim's MIG device still exists."""
    root = scratch_dir("dra-mig-")  # one per drawn example, so not the per-test short_dir fixture
    try:
        sim = SimBackend.from_preset("h100-80gb-x8")
        name = sim.topology.node
        cluster = MemoryCluster([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}}])
        manager = _manager(cluster, sim)
        driver: DraDriver | None = None
        claims: list[ClaimRef] = []
        serial = 0
        for op, *args in steps:
            before = _gpu_states(sim)
            held = {gpu for gpu, *_ in _claim_instances(driver)}
            pending = mig_change_pending(_node(cluster, sim))
            dra_acts = op in ("dra-start", "prepare", "resync")
            if op == "label":
                _relabel(cluster, sim, {MIG_CONFIG: args[0]})
            elif op == "mig":
                manager.transition()
            elif op == "dra-start":
                driver = build_driver(sim, cluster, root, Clock(), partitionable_mig=bool(args[0]))
                driver.publish()
            elif op == "resync" and driver is not None:
                driver.publish()
            elif op == "prepare" and driver is not None and (devices := driver.publish().devices):
                serial += 1
                claim = cluster.create(resource_claim(f"c{serial}", namespace="default"))
                allocation = allocation_status(name, [("gpu", devices[int(args[0]) % len(devices)])])
                cluster.patch_status(RESOURCE_CLAIM, name=f"c{serial}", status=allocation, namespace="default")
                ref = ClaimRef("default", claim["metadata"]["uid"], f"c{serial}")
                try:
                    driver.prepare(ref)
                    claims.append(ref)
                except PrepareError:
                    pass
            elif op == "unprepare" and driver is not None and claims:
                driver.unprepare(claims.pop(int(args[0]) % len(claims)))
            after = _gpu_states(sim)
            changed = {i for i in before if before[i] != after[i]}
            if op == "mig":
                assert not changed & held, f"the MIG manager changed GPU {sorted(changed & held)} under a claim"
            if dra_acts and pending:
                assert not changed, f"the DRA driver changed GPU {sorted(changed)} during a MIG change"
            live = {(g, gi.gi_id, gi.profile, gi.start) for g in range(8) for gi in sim.gpu_instances(g)}
            assert _claim_instances(driver) <= live, "a prepared claim's MIG device is gone"
    finally:
        shutil.rmtree(root, ignore_errors=True)
