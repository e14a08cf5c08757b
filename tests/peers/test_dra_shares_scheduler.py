"""GPU shares as consumable capacity on the real kube-apiserver and kube-scheduler (v1.37.2, with the
``DRAConsumableCapacity`` gate): the scheduler books each claim's ``capacity.requests`` against the
capacities gpuchain's driver publishes with ``--gpu-shares``, so two claims asking for half a GPU's
memory each land on the same GPU under two share ids, a third that does not fit beside them is not
allocated, and the driver prepares each with its own MPS limits from what the scheduler booked.

The node is a Node object with no kubelet (``peers.scheduler_only``): the scheduler binds pods to it
and writes the claims' allocations; the driver prepares them from the claims the scheduler wrote.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.dra import cdi, slices
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.kinds import RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.dra.shares import quantity
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.kube import LiveCluster
from gpuchain.kube.allocator import DRA
from peers.apiserver import ApiServer
from peers.node import wait_for
from peers.scheduler_only import SchedulerOnlyNode, kube_scheduler, live_cluster

NODE = "shares-node"
NS = "gpu-shares"
TOPOLOGY = f"node: {NODE}\ngpus:\n  - model: H100-80GB\n    count: 1\n"


@pytest.fixture
def scheduler(apiserver: ApiServer) -> Iterator[subprocess.Popen]:
    with kube_scheduler(apiserver, "kube-scheduler-shares.log") as proc:
        yield proc


@pytest.fixture
def live(apiserver: ApiServer) -> Iterator[LiveCluster]:
    with live_cluster(apiserver, NODE, NS) as cluster:
        yield cluster


def _asking(**requests: str) -> dict[str, object]:
    return {"capacity": {"requests": requests}}


def test_two_half_gpu_claims_share_one_gpu_and_a_third_does_not_fit(
    apiserver: ApiServer, scheduler: subprocess.Popen, live: LiveCluster, tmp_path: Path
) -> None:
    node = SchedulerOnlyNode(apiserver, NODE, NS)
    node.create()
    sim = SimBackend(load_yaml_model(Topology, text=TOPOLOGY))
    gpu = sim.inventory().gpus[0]
    config = DriverConfig(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", unlabelled=DRA, gpu_shares=True
    )
    driver = DraDriver(sim, cluster=live, config=config)
    driver.publish()
    assert driver.shares_served, "the API server dropped allowMultipleAllocations: is DRAConsumableCapacity on?"
    (device,) = live.get(RESOURCE_SLICE, name=slices.slice_name(NODE))["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Mi"
    assert not driver.publish().changed  # what the API server wrote back is what was published

    half = gpu.memory_mib // 2
    node.claim_and_pod("half-a", _asking(memory=f"{half}Mi"))
    node.claim_and_pod("half-b", _asking(memory=f"{half}Mi", multiprocessors=str(gpu.multiprocessors // 2)))
    a = wait_for("first half allocated", lambda: node.results("half-a"), 60)
    b = wait_for("second half allocated", lambda: node.results("half-b"), 60)
    assert a[0]["device"] == b[0]["device"] == "gpu-0"
    assert a[0]["shareID"] and b[0]["shareID"] and a[0]["shareID"] != b[0]["shareID"]
    assert quantity(a[0]["consumedCapacity"]["memory"]) == half * 2**20
    assert b[0]["consumedCapacity"]["multiprocessors"] == str(gpu.multiprocessors // 2)

    # 1 MiB is left on the GPU (its memory is odd): a claim for 1Gi does not fit, nor does one
    # that states no memory (it would take all of it)
    node.claim_and_pod("one-more-gi", _asking(memory="1Gi"))
    node.claim_and_pod("whole", {})
    wait_for("1Gi refused", lambda: node.unschedulable("one-more-gi"), 60)
    wait_for("whole GPU refused", lambda: node.unschedulable("whole"), 60)
    for name in ("one-more-gi", "whole"):
        assert not node.claim(name).get("status", {}).get("allocation"), name

    # the driver prepares each share with its own limits, from what the scheduler booked
    envs = {}
    for name in ("half-a", "half-b"):
        claim = live.get(RESOURCE_CLAIM, name=name, namespace=NS)
        ref = ClaimRef(NS, claim["metadata"]["uid"], name)
        prepared = driver.prepare(ref)
        share_id = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
        assert prepared.devices[0].cdi_ids == (cdi.cdi_id(ref.uid, f"gpu-0-{share_id}"),)
        spec = json.loads(cdi.spec_path(tmp_path / "cdi", ref.uid).read_text())
        envs[name] = spec["containerEdits"]["env"]
    assert envs["half-a"] == [f"NVIDIA_VISIBLE_DEVICES={gpu.uuid}", f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={half}M"]
    assert envs["half-b"] == [
        f"NVIDIA_VISIBLE_DEVICES={gpu.uuid}",
        f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={half}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
    ]
