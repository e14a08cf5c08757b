"""MIG as partitionable devices on the real kube-apiserver and kube-scheduler (v1.37.2, with the
``DRAPartitionableDevices`` gate): the server takes the driver's layout (the counter sets in a slice
of their own, each GPU's devices in another), and the counters are what the scheduler allocates
by, so two claims for overlapping MIG placements are never both allocated, placements that do not
overlap are, and the full GPU and its MIG devices exclude each other.

The node is a Node object with no kubelet: the scheduler binds pods to it and writes the claims'
allocations, which is all this test asks of it; then the driver prepares the allocated device from
the claim the scheduler wrote, creating the MIG instance on the simulated GPU.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.kube import LiveCluster
from gpuchain.kube.allocator import DRA
from peers.apiserver import ApiServer
from peers.node import wait_for
from peers.scheduler_only import SchedulerOnlyNode, kube_scheduler, live_cluster

NODE = "partition-node"
NS = "gpu"
TOPOLOGY = f"node: {NODE}\ngpus:\n  - model: H100-80GB\n    count: 2\n"


@pytest.fixture
def scheduler(apiserver: ApiServer) -> Iterator[subprocess.Popen]:
    with kube_scheduler(apiserver, "kube-scheduler-partitions.log") as proc:
        yield proc


@pytest.fixture
def live(apiserver: ApiServer) -> Iterator[LiveCluster]:
    with live_cluster(apiserver, NODE, NS) as cluster:
        yield cluster


def _claim_and_pod(node: SchedulerOnlyNode, name: str, cel: str) -> None:
    """A claim for one device matching ``cel`` and a pod using it (the scheduler allocates the claim)."""
    node.claim_and_pod(name, {"selectors": [{"cel": {"expression": cel}}]})


def _placement(profile: str, start: int, gpu: int) -> str:
    attrs = f'device.attributes["{DRIVER}"]'
    is_mig = f'{attrs}.type == "mig" && {attrs}.index == {gpu}'  # first: only MIG devices have the others
    return f'{is_mig} && {attrs}.migProfile == "{profile}" && {attrs}.memorySliceStart == {start}'


def _whole(gpu: int) -> str:
    attrs = f'device.attributes["{DRIVER}"]'
    return f'{attrs}.type == "gpu" && {attrs}.index == {gpu}'


def test_counters_keep_overlapping_placements_and_the_whole_gpu_apart(
    apiserver: ApiServer, scheduler: subprocess.Popen, live: LiveCluster, tmp_path: Path
) -> None:
    node = SchedulerOnlyNode(apiserver, NODE, NS)
    node.create()
    sim = SimBackend(load_yaml_model(Topology, text=TOPOLOGY))
    config = DriverConfig(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", unlabelled=DRA, partitionable_mig=True
    )
    driver = DraDriver(sim, cluster=live, config=config)
    published = driver.publish()
    assert driver.partitions_served, "the API server dropped the shared counters: is DRAPartitionableDevices on?"
    counters = live.get(RESOURCE_SLICE, name=f"{NODE}-{DRIVER}-counters-0")
    assert [c["name"] for c in counters["spec"]["sharedCounters"]] == ["gpu-0-counter-set", "gpu-1-counter-set"]
    assert counters["spec"]["sharedCounters"][0]["counters"]["memory-slice-7"] == {"value": "1"}
    gpu0 = live.get(RESOURCE_SLICE, name=f"{NODE}-{DRIVER}-gpu-0")
    assert gpu0["spec"]["devices"][1]["consumesCounters"][0]["counterSet"] == "gpu-0-counter-set"
    assert gpu0["spec"]["pool"]["resourceSliceCount"] == 4  # the plain slice, the counters, two GPUs
    assert "gpu-0-mig-4g40gb-3-0" in published.devices

    # GPU 0: a 4g.40gb at slice 0 ...
    _claim_and_pod(node, "four-at-0", _placement("4g.40gb", 0, 0))
    assert wait_for("4g.40gb at 0 allocated", lambda: node.scheduled("four-at-0"), 60) == "gpu-0-mig-4g40gb-3-0"
    # ... so a 3g.40gb at slice 0 (slices 0-3 again) is not allocated ...
    _claim_and_pod(node, "three-at-0", _placement("3g.40gb", 0, 0))
    wait_for("3g.40gb at 0 refused", lambda: node.unschedulable("three-at-0"), 60)
    # ... while a 3g.40gb at slice 4 (slices 4-7, 3 of the 7 compute slices left) is
    _claim_and_pod(node, "three-at-4", _placement("3g.40gb", 4, 0))
    assert wait_for("3g.40gb at 4 allocated", lambda: node.scheduled("three-at-4"), 60) == "gpu-0-mig-3g40gb-2-4"
    # the whole GPU 0 is not free any more
    _claim_and_pod(node, "whole-0", _whole(0))
    wait_for("whole GPU 0 refused", lambda: node.unschedulable("whole-0"), 60)

    # GPU 1: the whole GPU first, then not even the smallest MIG device on it
    _claim_and_pod(node, "whole-1", _whole(1))
    assert wait_for("whole GPU 1 allocated", lambda: node.scheduled("whole-1"), 60) == "gpu-1"
    _claim_and_pod(node, "small-on-1", _placement("1g.10gb", 6, 1))
    wait_for("1g.10gb on GPU 1 refused", lambda: node.unschedulable("small-on-1"), 60)
    for name in ("three-at-0", "whole-0", "small-on-1"):
        assert not node.claim(name).get("status", {}).get("allocation"), name

    # the driver prepares what the scheduler allocated: the MIG instance at the allocated placement
    claim = live.get(RESOURCE_CLAIM, name="three-at-4", namespace=NS)
    ref = ClaimRef(NS, claim["metadata"]["uid"], "three-at-4")
    prepared = driver.prepare(ref)
    (instance,) = sim.gpu_instances(0)
    assert (instance.profile, instance.start) == ("3g.40gb", 4)
    assert prepared.devices[0].uuid == sim.inventory().gpu(0).mig_devices[0].uuid
    assert driver.unprepare(ref) and sim.gpu_instances(0) == ()
