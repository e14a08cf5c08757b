"""GPU shares as consumable capacity (``dra.shares``): the shared devices the slice builder renders,
the request-policy rules of the 1.34 API server (``validateMultiAllocatableDeviceCapacity``), and
Prepare giving each share its MPS limits, keyed by the scheduler's share id."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from dra.build import build_driver, shared_claim
from dra.conftest import NODE
from dra.fakeclock import Clock

from gpuchain.dra import cdi, shares, slices
from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import RESOURCE_SLICE
from gpuchain.dra.shares import Share
from gpuchain.gpu.mps import MpsLimits
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import ApplyResult


def test_shared_gpus_carry_their_capacities_with_request_policies(h100_sim: SimBackend) -> None:
    inventory = h100_sim.inventory()
    devices = slices.render_devices(inventory, shared=True)
    gpu = inventory.gpus[0]
    memory = f"{gpu.memory_mib}Mi"
    assert devices[0]["allowMultipleAllocations"] is True
    assert devices[0]["capacity"] == {
        # a claim that states no memory takes all of it: a claim written for a whole GPU keeps it
        "memory": {
            "value": memory,
            "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"}},
        },
        # a claim that states no SMs books none: time-sliced beside the others
        "multiprocessors": {
            "value": str(gpu.multiprocessors),
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": str(gpu.multiprocessors), "step": "1"}},
        },
    }
    assert all(d["allowMultipleAllocations"] for d in devices) and len(devices) == 8
    slices.check_devices(devices)  # what the API server checks beyond its schema: it would take them
    unshared = slices.render_devices(inventory)
    assert not any("allowMultipleAllocations" in d for d in unshared)
    assert [{k: v for k, v in d.items() if k not in ("allowMultipleAllocations", "capacity")} for d in devices] == [
        {k: v for k, v in d.items() if k != "capacity"} for d in unshared
    ]


def test_mig_devices_are_not_shared(mig_sim: SimBackend) -> None:
    devices = slices.render_devices(mig_sim.inventory(), shared=True)
    mig = [d for d in devices if d["attributes"]["type"] == {"string": "mig"}]
    assert mig and not any("allowMultipleAllocations" in d for d in mig)
    assert all(d["allowMultipleAllocations"] for d in devices if d["attributes"]["type"] == {"string": "gpu"})


def _capacity(policy: dict[str, Any], value: str = "100") -> dict[str, Any]:
    return {"value": value, "requestPolicy": policy}


@pytest.mark.parametrize(
    ("capacity", "multiple", "says"),
    [
        (_capacity({"default": "10"}), False, "needs allowMultipleAllocations"),
        (_capacity({"default": "10", "validValues": ["10"], "validRange": {"min": "0"}}), True, "exclusive"),
        (_capacity({"validRange": {"min": "0"}}), True, "default is required"),
        (_capacity({"default": "5", "validRange": {"min": "10"}}), True, "min <= default"),
        (_capacity({"default": "50", "validRange": {"min": "0", "max": "200"}}), True, "max <= value"),
        (_capacity({"default": "150", "validRange": {"min": "0", "max": "100"}}), True, "default <= max"),
        (_capacity({"default": "15", "validRange": {"min": "0", "step": "10"}}), True, "multiple of step"),
        (_capacity({"default": "20", "validRange": {"min": "0", "max": "95", "step": "10"}}), True, "multiple"),
        (_capacity({"default": "20", "validRange": {"min": "50", "step": "60"}}), True, "min <= default"),
        (_capacity({"default": "60", "validRange": {"min": "50", "step": "60"}}), True, r"min \+ step"),
        (_capacity({"default": "30", "validValues": ["10", "20"]}), True, "not one of validValues"),
        (_capacity({"default": "20", "validValues": ["20", "10"]}), True, "ascending"),
        (_capacity({"default": "20", "validValues": ["20", "200"]}), True, "within the value"),
    ],
)
def test_request_policies_the_api_server_refuses(capacity: dict[str, Any], multiple: bool, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        shares.check_capacity("device 'gpu-0'", name="memory", capacity=capacity, multiple=multiple)


def test_request_policies_the_api_server_takes() -> None:
    for policy in (
        {},  # no valid values: any amount within the value
        {"default": "1Gi", "validValues": ["1Gi", "2Gi", "4Gi"]},
        {"default": "2Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}},
        {"default": "0", "validRange": {"min": "0"}},
    ):
        shares.check_capacity("device 'gpu-0'", name="memory", capacity=_capacity(policy, "8Gi"), multiple=True)
    device = {"name": "gpu-0", "capacity": {"memory": _capacity({"default": "1"})}}
    with pytest.raises(slices.SliceError, match="allowMultipleAllocations"):
        slices.check_devices([device])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("40Gi", 40 * 2**30),
        ("81559Mi", 81559 * 2**20),
        ("66", 66),
        ("1.5k", 1500),
        ("2e3", 2000),
        ("100m", Fraction(1, 10)),
    ],
)
def test_quantities(text: str, value: Fraction | int) -> None:
    assert shares.quantity(text) == value


def test_a_quantity_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        shares.quantity("40 GiB")


def test_a_claims_limits_per_gpu_in_container_order() -> None:
    half = Share(share_id="a", memory_mib=40960, multiprocessors=66, gpu_multiprocessors=132)
    quarter = Share(share_id="b", memory_mib=20480, multiprocessors=33, gpu_multiprocessors=132)
    memory_only = Share(share_id="c", memory_mib=10240, multiprocessors=0, gpu_multiprocessors=132)
    assert shares.limits([("GPU-1", None)]) == MpsLimits()
    limits = shares.limits([("GPU-1", None), ("GPU-2", half), ("GPU-3", quarter)])
    assert limits == MpsLimits(((1, 40960), (2, 20480)), 25)  # the smaller SM share of the two GPUs
    assert limits.client_env() == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=40960M,2=20480M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
    }
    # two shares of one GPU: one GPU in the container, their memory and SMs added up
    assert shares.limits([("GPU-2", half), ("GPU-2", quarter)]) == MpsLimits(((0, 61440),), 75)
    assert shares.limits([("GPU-2", memory_only)]).client_env() == {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M"}


def test_a_result_without_share_id_is_no_share(h100_sim: SimBackend) -> None:
    gpu = h100_sim.inventory().gpus[0]
    assert shares.share_of({"device": "gpu-0"}, gpu) is None
    booked = shares.share_of({"shareID": "s1", "consumedCapacity": {"memory": "40Gi", "multiprocessors": "33"}}, gpu)
    assert booked == Share(share_id="s1", memory_mib=40960, multiprocessors=33, gpu_multiprocessors=gpu.multiprocessors)
    # capacities the result does not list were booked at their defaults: all the memory, no SMs
    assert shares.share_of({"shareID": "s2"}, gpu) == Share(
        share_id="s2", memory_mib=gpu.memory_mib, multiprocessors=0, gpu_multiprocessors=gpu.multiprocessors
    )


@pytest.fixture
def sharing(cluster: MemoryCluster, short_dir: Path, clock: Clock, h100_sim: SimBackend) -> DraDriver:
    return _driver(cluster, short_dir, clock, h100_sim)


def _driver(cluster: MemoryCluster, short_dir: Path, clock: Clock, sim: SimBackend) -> DraDriver:
    return build_driver(sim, cluster, short_dir, clock, gpu_shares=True)


def _env(short_dir: Path, ref: ClaimRef) -> list[str]:
    return list(json.loads(cdi.spec_path(short_dir / "cdi", ref.uid).read_text())["containerEdits"]["env"])


def test_prepare_gives_each_share_its_limits(
    sharing: DraDriver, cluster: MemoryCluster, short_dir: Path, clock: Clock, h100_sim: SimBackend
) -> None:
    sharing.publish()
    live = cluster.get(RESOURCE_SLICE, name=slices.slice_name(NODE))
    assert all(d["allowMultipleAllocations"] for d in live["spec"]["devices"])
    gpu0 = h100_sim.inventory().gpus[0]
    one = shared_claim(
        cluster, "one", [{"device": "gpu-0", "shareID": "share-1", "consumedCapacity": {"memory": "40Gi"}}], NODE
    )
    two = shared_claim(
        cluster,
        "two",
        [{"device": "gpu-0", "shareID": "share-2", "consumedCapacity": {"memory": "20Gi", "multiprocessors": "66"}}],
        NODE,
    )
    first, second = sharing.prepare(one), sharing.prepare(two)
    assert first.devices[0].cdi_ids == (cdi.cdi_id(one.uid, "gpu-0-share-1"),)
    assert second.devices[0].cdi_ids == (cdi.cdi_id(two.uid, "gpu-0-share-2"),)
    assert first.devices[0].device == second.devices[0].device == "gpu-0"  # the kubelet's name stays the device's
    assert _env(short_dir, one) == [f"NVIDIA_VISIBLE_DEVICES={gpu0.uuid}", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M"]
    assert _env(short_dir, two) == [
        f"NVIDIA_VISIBLE_DEVICES={gpu0.uuid}",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",
        f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={100 * 66 // gpu0.multiprocessors}",
    ]
    # a reboot empties the CDI directory; a restarted plugin writes the same spec from its checkpoint
    cdi.remove_spec(short_dir / "cdi", two.uid)
    restarted = _driver(cluster, short_dir, clock, h100_sim)
    assert restarted.prepare(two) == second
    assert _env(short_dir, two)[1:] == [
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
    ]
    assert restarted.unprepare(one) and restarted.unprepare(two)
    assert not cdi.spec_path(short_dir / "cdi", one.uid).exists()


def test_an_exclusive_allocation_of_a_shared_gpu_has_no_limits(
    sharing: DraDriver, cluster: MemoryCluster, short_dir: Path
) -> None:
    sharing.publish()
    ref = shared_claim(cluster, "whole", [{"device": "gpu-1"}], NODE)
    prepared = sharing.prepare(ref)
    assert prepared.devices[0].share is None and prepared.devices[0].cdi_ids == (cdi.cdi_id(ref.uid, "gpu-1"),)
    assert [e for e in _env(short_dir, ref) if e.startswith("CUDA_MPS")] == []


def test_a_share_of_a_mig_device_is_refused(
    cluster: MemoryCluster, short_dir: Path, clock: Clock, mig_sim: SimBackend
) -> None:
    driver = _driver(cluster, short_dir, clock, mig_sim)
    published = driver.publish()
    mig = next(name for name in published.devices if "-mig-" in name)
    ref = shared_claim(
        cluster, "mig-share", [{"device": mig, "shareID": "s", "consumedCapacity": {"memory": "1Gi"}}], driver.node
    )
    with pytest.raises(PrepareError, match="only whole GPUs are shared"):
        driver.prepare(ref)
    assert driver.checkpoint.get(ref.uid) is None


class NoConsumableCapacity(MemoryCluster):
    """An API server without the DRAConsumableCapacity gate: it drops ``allowMultipleAllocations`` and
    the capacities' ``requestPolicy`` on write."""

    def apply(self, obj: Obj, live: Obj | None = None, known_live: bool = False) -> ApplyResult:
        if obj.get("kind") == "ResourceSlice":
            devices = [
                {
                    **{k: v for k, v in d.items() if k != "allowMultipleAllocations"},
                    "capacity": {n: {"value": c["value"]} for n, c in d.get("capacity", {}).items()},
                }
                for d in obj["spec"]["devices"]
            ]
            obj = {**obj, "spec": {**obj["spec"], "devices": devices}}
        return super().apply(obj, live=live, known_live=known_live)


def test_a_server_without_consumable_capacity_gets_the_gpus_unshared(
    short_dir: Path, clock: Clock, h100_sim: SimBackend
) -> None:
    cluster = NoConsumableCapacity()
    driver = _driver(cluster, short_dir, clock, h100_sim)
    first = driver.publish()
    assert driver.shares_served is False
    live = cluster.get(RESOURCE_SLICE, name=slices.slice_name(NODE))
    assert live["spec"]["devices"] == slices.render_devices(h100_sim.inventory())  # as without --gpu-shares
    again = driver.publish()
    assert not again.changed and again.generation == first.generation  # no new generation on every resync


@pytest.mark.parametrize("preset", ["h100-80gb-x8", "h100-80gb-x8-mig-mixed", "l4-x2"])
@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
def test_shared_slices_pass_the_api_schema(preset: str, version: str) -> None:
    """Field names and shapes as the API's schema has them (strict: an unknown field fails)."""
    sim = SimBackend.from_preset(preset)
    obj = slices.resource_slice(
        sim.topology.node, devices=slices.render_devices(sim.inventory(), shared=True), generation=1
    )
    slices.check_slice(obj)
    kubernetes_validate.validate(obj, version, strict=True)
