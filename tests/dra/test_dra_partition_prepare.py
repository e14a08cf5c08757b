"""The driver with ``partitionable_mig``: the counter sets in a slice of their own and each MIG-capable
GPU's devices in another, the MIG device created on Prepare and destroyed on Unprepare, and no
instance left behind by a crash or a failed record.

The in-memory API server here refuses what Kubernetes 1.35 and later refuse (``CountersApart``); the
real 1.37 server takes the same layout in ``tests/peers/test_dra_partitions_scheduler.py``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from dra.build import build_driver
from dra.fakeclock import Clock

from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.dra import cdi, slices
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import DRIVER, RESOURCE_SLICE
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.kube.allocator import DRA
from gpuchain.kube.errors import InvalidError
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.port import ApplyResult

Allocate = Callable[[str, str, list[str]], ClaimRef]
NODE = "h100-node"


class CountersApart(MemoryCluster):
    """An API server of Kubernetes 1.35 or later: a ResourceSlice holds counter sets or devices,
    not both (1.37's validation message; ``pkg/apis/resource/validation``)."""

    def apply(self, obj: dict, live: dict | None = None, known_live: bool = False) -> ApplyResult:
        spec = obj.get("spec", {})
        if obj.get("kind") == "ResourceSlice" and spec.get("sharedCounters") and spec.get("devices") is not None:
            raise InvalidError(
                f"ResourceSlice {obj['metadata']['name']}: spec: only one of `sharedCounters` or `devices` is allowed"
            )
        return super().apply(obj, live=live, known_live=known_live)


@pytest.fixture
def cluster() -> MemoryCluster:
    return CountersApart()


@pytest.fixture
def make_partitioning(cluster: MemoryCluster, short_dir: Path, clock: Clock) -> Callable[[SimBackend], DraDriver]:
    """A DRA-only node's driver with partitionable MIG (built again to model a plugin restart)."""

    def build(sim: SimBackend) -> DraDriver:
        return build_driver(sim, cluster, short_dir, clock, partitionable_mig=True)

    return build


def _slices(cluster: MemoryCluster) -> dict[str, dict]:
    found = cluster.list(RESOURCE_SLICE, field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}")
    return {s["metadata"]["name"]: s for s in found}


def test_counter_sets_and_each_gpus_devices_in_slices_of_one_pool(
    h100_sim: SimBackend, make_partitioning: Callable[[SimBackend], DraDriver], cluster: MemoryCluster
) -> None:
    driver = make_partitioning(h100_sim)
    published = driver.publish()
    live = _slices(cluster)
    counters = slices.counter_slice_name(NODE, 0)
    assert set(live) == {slices.slice_name(NODE), counters} | {slices.gpu_slice_name(NODE, i) for i in range(8)}
    assert {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in live.values()} == {
        (1, 10)
    }
    assert live[slices.slice_name(NODE)]["spec"]["devices"] == []
    # the eight counter sets together, in a slice without devices
    assert "devices" not in live[counters]["spec"]
    assert [c["name"] for c in live[counters]["spec"]["sharedCounters"]] == [f"gpu-{i}-counter-set" for i in range(8)]
    # each GPU's devices without counter sets, consuming their GPU's set only
    gpu3 = live[slices.gpu_slice_name(NODE, 3)]["spec"]
    assert "sharedCounters" not in gpu3
    assert {use["counterSet"] for d in gpu3["devices"] for use in d["consumesCounters"]} == {"gpu-3-counter-set"}
    assert "gpu-3" in published.devices and "gpu-3-mig-3g40gb-2-4" in published.devices
    assert driver.publish().changed is False
    # switched off: the counters and the GPUs' own slices go, the plain slice lists the GPUs again, one generation up
    plain = make_partitioning(h100_sim)
    plain.partitions_served = False
    again = plain.publish()
    assert again.changed and again.generation == 2
    assert set(_slices(cluster)) == {slices.slice_name(NODE)}
    assert _slices(cluster)[slices.slice_name(NODE)]["spec"]["pool"]["resourceSliceCount"] == 1
    assert len(again.devices) == 8


def test_more_than_eight_gpus_take_a_second_counter_slice(
    make_partitioning: Callable[[SimBackend], DraDriver], cluster: MemoryCluster
) -> None:
    sim = SimBackend(load_yaml_model(Topology, text=f"node: {NODE}\ngpus:\n  - model: H100-80GB\n    count: 9\n"))
    make_partitioning(sim).publish()
    live = _slices(cluster)
    sets = [live[slices.counter_slice_name(NODE, k)]["spec"]["sharedCounters"] for k in (0, 1)]
    assert [len(s) for s in sets] == [8, 1] and sets[1][0]["name"] == "gpu-8-counter-set"
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in live.values()} == {len(live)} == {12}


def test_a_gpu_slice_left_in_the_1_34_layout_is_replaced(
    h100_sim: SimBackend, make_partitioning: Callable[[SimBackend], DraDriver], cluster: MemoryCluster
) -> None:
    """A slice a 1.34 server stored with its counter set beside its devices: a merge patch would keep
    the set, which a newer server refuses beside devices, so the driver deletes and creates it."""
    old = slices.resource_slice(
        NODE,
        devices=[{"name": "gpu-0"}],
        generation=1,
        name=slices.gpu_slice_name(NODE, 0),
        shared_counters=[{"name": "gpu-0-counter-set", "counters": {"memory": {"value": "1Mi"}}}],
    )
    cluster.create(old)
    make_partitioning(h100_sim).publish()
    gpu0 = _slices(cluster)[slices.gpu_slice_name(NODE, 0)]["spec"]
    assert "sharedCounters" not in gpu0 and gpu0["pool"]["generation"] == 2
    assert gpu0["devices"][0]["consumesCounters"][0]["counterSet"] == "gpu-0-counter-set"


def test_prepare_creates_the_mig_device_and_unprepare_destroys_it(
    h100_sim: SimBackend,
    make_partitioning: Callable[[SimBackend], DraDriver],
    allocate: Allocate,
    short_dir: Path,
) -> None:
    driver = make_partitioning(h100_sim)
    driver.publish()
    assert not h100_sim.mig_mode(2).current
    ref = allocate("mig", NODE, ["gpu-2-mig-3g40gb-2-4"])
    prepared = driver.prepare(ref)
    (instance,) = h100_sim.gpu_instances(2)
    assert (instance.profile, instance.start) == ("3g.40gb", 4)
    (mig,) = h100_sim.inventory().gpu(2).mig_devices
    assert prepared.devices[0].uuid == mig.uuid
    spec = json.loads(cdi.spec_path(short_dir / "cdi", ref.uid).read_text())
    assert mig.uuid in json.dumps(spec)
    # the checkpoint knows which instance to destroy, across a restart
    restarted = make_partitioning(h100_sim)
    restarted.publish()
    assert len(h100_sim.gpu_instances(2)) == 1  # held by a prepared claim: not an orphan
    assert restarted.prepare(ref) == prepared
    assert restarted.unprepare(ref) is True
    assert h100_sim.gpu_instances(2) == ()
    assert restarted.unprepare(ref) is False  # again: nothing to do


def test_the_whole_gpu_switches_mig_off_again(
    h100_sim: SimBackend, make_partitioning: Callable[[SimBackend], DraDriver], allocate: Allocate
) -> None:
    driver = make_partitioning(h100_sim)
    driver.publish()
    first = allocate("mig", NODE, ["gpu-0-mig-1g10gb-0-6"])
    driver.prepare(first)
    assert h100_sim.mig_mode(0).current
    whole = allocate("whole", NODE, ["gpu-0"])
    with pytest.raises(PrepareError, match="still has MIG instances"):
        driver.prepare(whole)  # the scheduler would not allocate both (counters); the driver refuses too
    driver.unprepare(first)
    prepared = driver.prepare(whole)
    assert not h100_sim.mig_mode(0).current
    assert prepared.devices[0].uuid == h100_sim.inventory().gpu(0).uuid


def test_ampere_needing_a_reset_is_refused_not_half_done(
    make_partitioning: Callable[[SimBackend], DraDriver], allocate: Allocate
) -> None:
    sim = SimBackend.from_preset("a100-40gb-x8", node=NODE)
    sim.mig_mode_needs_reset = True
    sim.set_mig_mode(1, True)
    sim.reset_gpu(1)  # GPU 1 in MIG mode: placements only; the others are plain GPUs
    driver = make_partitioning(sim)
    published = driver.publish()
    assert "gpu-1" not in published.devices and "gpu-1-mig-1g5gb-0-0" in published.devices
    assert "gpu-0" in published.devices and not any(d.startswith("gpu-0-mig") for d in published.devices)
    prepared = driver.prepare(allocate("small", NODE, ["gpu-1-mig-1g5gb-0-3"]))
    assert [gi.start for gi in sim.gpu_instances(1)] == [3]
    assert prepared.devices[0].created is not None


def test_a_failed_record_or_a_crash_leaves_no_instance(
    h100_sim: SimBackend,
    make_partitioning: Callable[[SimBackend], DraDriver],
    allocate: Allocate,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = make_partitioning(h100_sim)
    driver.publish()
    ref = allocate("mig", NODE, ["gpu-4-mig-2g20gb-1-2"])

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(driver.checkpoint, "add", full)
    with pytest.raises(PrepareError, match="nothing was prepared"):
        driver.prepare(ref)
    assert h100_sim.gpu_instances(4) == ()
    assert not cdi.spec_path(short_dir / "cdi", ref.uid).exists()
    monkeypatch.undo()
    # a crash between creating the instance and recording the claim: the restarted plugin destroys it
    gi = h100_sim.create_gpu_instance(4, profile="2g.20gb", start=2)
    h100_sim.create_compute_instance(4, gi_id=gi)
    make_partitioning(h100_sim).publish()  # the restarted plugin publishes first
    assert h100_sim.gpu_instances(4) == ()


def test_an_unhealthy_parent_refuses_its_placements(
    h100_sim: SimBackend, make_partitioning: Callable[[SimBackend], DraDriver], allocate: Allocate
) -> None:
    driver = make_partitioning(h100_sim)
    driver.publish()
    published = driver.on_event(h100_sim.inject_xid(6, xid=48))
    assert published is not None and not any(d.startswith("gpu-6") for d in published.devices)
    with pytest.raises(PrepareError, match="unhealthy"):
        driver.prepare(allocate("mig", NODE, ["gpu-6-mig-1g10gb-0-0"]))
    assert h100_sim.gpu_instances(6) == ()
    states = driver.device_states()
    assert states["withdrawn"] == len(slices.render_gpu_slices(h100_sim.inventory())[6].devices)


class NoPartitionGate(MemoryCluster):
    """An API server without the DRAPartitionableDevices gate: it drops ``sharedCounters`` and
    ``consumesCounters`` from a ResourceSlice without an error, as 1.34 and 1.35 do."""

    def apply(self, obj: dict, live: dict | None = None, known_live: bool = False) -> ApplyResult:
        if obj.get("kind") == "ResourceSlice":
            spec = {k: v for k, v in obj["spec"].items() if k != "sharedCounters"}
            if "devices" in spec:
                spec["devices"] = [{k: v for k, v in d.items() if k != "consumesCounters"} for d in spec["devices"]]
            obj = {**obj, "spec": spec}
        return super().apply(obj, live=live, known_live=known_live)


def test_without_the_gate_the_gpus_are_published_as_before(
    h100_sim: SimBackend, short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = NoPartitionGate()
    config = DriverConfig(
        node=NODE, cdi_dir=short_dir / "cdi", state_dir=short_dir / "state", unlabelled=DRA, partitionable_mig=True
    )
    driver = DraDriver(h100_sim, cluster=cluster, config=config)
    published = driver.publish()
    assert not driver.partitions_served
    assert "DRAPartitionableDevices" in caplog.text
    # placements without their counters could all be allocated at once: none is left published
    assert published.devices == tuple(f"gpu-{i}" for i in range(8))
    assert set(_slices(cluster)) == {slices.slice_name(NODE)}
    assert _slices(cluster)[slices.slice_name(NODE)]["spec"]["pool"]["resourceSliceCount"] == 1


def test_switching_partitions_on_keeps_the_mig_devices_of_prepared_claims(
    mig_sim: SimBackend,
    make_driver: Callable[[SimBackend], DraDriver],
    make_partitioning: Callable[[SimBackend], DraDriver],
    allocate: Allocate,
) -> None:
    static = make_driver(mig_sim)  # the mixed preset: GPUs 0-5 in MIG mode with a static layout
    static.publish()
    in_use = mig_sim.inventory().gpu(0).mig_devices[0]
    static.prepare(allocate("static", mig_sim.topology.node, [slices.mig_device_name(in_use)]))
    make_partitioning(mig_sim).publish()  # restarted with --partitionable-mig
    assert [m.uuid for m in mig_sim.inventory().gpu(0).mig_devices] == [in_use.uuid]  # its pod still has it
    assert mig_sim.inventory().gpu(1).mig_devices == ()  # no claim held GPU 1's layout


class CountersTogether(MemoryCluster):
    """An API server of Kubernetes 1.34 with the DRAPartitionableDevices gate: a device may consume
    only the counter sets of its own slice (1.34's validation message)."""

    def apply(self, obj: dict, live: dict | None = None, known_live: bool = False) -> ApplyResult:
        spec = obj.get("spec", {})
        here = {c["name"] for c in spec.get("sharedCounters", [])}
        for device in spec.get("devices") or [] if obj.get("kind") == "ResourceSlice" else []:
            for use in device.get("consumesCounters", []):
                if use["counterSet"] not in here:
                    raise InvalidError(
                        f"ResourceSlice {obj['metadata']['name']}: consumesCounters.counterSet: Invalid value: "
                        f"{use['counterSet']!r}: must reference a counterSet defined in the ResourceSlice sharedCounters"
                    )
        return super().apply(obj, live=live, known_live=known_live)


def test_a_1_34_server_refusing_the_layout_gets_the_gpus_without_partitions(
    h100_sim: SimBackend, short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = CountersTogether()
    config = DriverConfig(
        node=NODE, cdi_dir=short_dir / "cdi", state_dir=short_dir / "state", unlabelled=DRA, partitionable_mig=True
    )
    driver = DraDriver(h100_sim, cluster=cluster, config=config)
    published = driver.publish()
    assert not driver.partitions_served and "Kubernetes before 1.35 wants counter sets" in caplog.text
    assert published.devices == tuple(f"gpu-{i}" for i in range(8))
    live = _slices(cluster)
    assert set(live) == {slices.slice_name(NODE)}
    assert live[slices.slice_name(NODE)]["spec"]["pool"]["resourceSliceCount"] == 1
