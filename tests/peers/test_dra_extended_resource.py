"""The ``nvidia.com/gpu`` bridge on the real kube-apiserver and kube-scheduler (v1.37.2, with the
``DRAExtendedResource`` gate, KEP-5004): a pod that asks for ``nvidia.com/gpu: 1`` the device plugin
way, on a node whose GPUs only gpuchain's DRA driver publishes, is Pending while no DeviceClass names
the resource; with the chart's ``dra.extendedResource`` class (``whole-gpu.gpuchain.io``) the
scheduler makes the pod's claim itself, allocates it a whole GPU, and the driver prepares it. The
class selects whole GPUs: free MIG devices do not serve ``nvidia.com/gpu``.

The node is a Node object with no kubelet (``peers.scheduler_only``); its allocatable has no
``nvidia.com/gpu`` at all, as on a node without a device plugin.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.kinds import DEVICE_CLASS, DRIVER, RESOURCE_CLAIM, RESOURCE_SLICE, whole_gpu_class
from gpuchain.dra.slices import slice_name
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.kube import LiveCluster
from gpuchain.kube.allocator import DRA
from gpuchain.kube.errors import NotFoundError
from peers.apiserver import ApiServer
from peers.node import wait_for
from peers.scheduler_only import SchedulerOnlyNode, kube_scheduler, live_cluster

NODE = "bridge-node"
NS = "gpu-bridge"
TOPOLOGY = f"""node: {NODE}
gpus:
  - model: H100-80GB
    count: 1
    mig: {{1g.10gb: 7}}
  - model: H100-80GB
    count: 1
"""
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"
"""The annotation the scheduler puts on the claim it makes for a pod's extended resources."""


@pytest.fixture
def scheduler(apiserver: ApiServer) -> Iterator[subprocess.Popen]:
    with kube_scheduler(apiserver, "kube-scheduler-bridge.log") as proc:
        yield proc


@pytest.fixture
def live(apiserver: ApiServer) -> Iterator[LiveCluster]:
    with live_cluster(apiserver, NODE, NS) as cluster:
        yield cluster
        # the class is cluster-wide: left behind, it would send other tests' nvidia.com/gpu pods to DRA
        with contextlib.suppress(NotFoundError):
            cluster.delete(DEVICE_CLASS, name=whole_gpu_class()["metadata"]["name"])


def _pod(apiserver: ApiServer, name: str) -> dict:  # type: ignore[type-arg]
    return dict(apiserver.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}"))


def test_nvidia_gpu_request_is_served_by_a_whole_dra_gpu_only_through_the_class(
    apiserver: ApiServer, scheduler: subprocess.Popen, live: LiveCluster, tmp_path: Path
) -> None:
    node = SchedulerOnlyNode(apiserver, NODE, NS)
    node.create()
    sim = SimBackend(load_yaml_model(Topology, text=TOPOLOGY))
    whole = next(g for g in sim.inventory().gpus if not g.mig_enabled)
    config = DriverConfig(node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", unlabelled=DRA)
    driver = DraDriver(sim, cluster=live, config=config)
    driver.publish()
    devices = live.get(RESOURCE_SLICE, name=slice_name(NODE))["spec"]["devices"]
    kinds = {d["name"]: d["attributes"]["type"]["string"] for d in devices}
    assert sorted(kinds.values()) == ["gpu"] + ["mig"] * 7
    (gpu_device,) = [name for name, kind in kinds.items() if kind == "gpu"]

    # without a class naming nvidia.com/gpu the node has none to offer
    node.gpu_pod("before", 1)
    cond = wait_for("plain GPU pod refused", lambda: node.unschedulable("before"), 60)
    assert "nvidia.com/gpu" in cond["message"]
    assert not live.list(RESOURCE_CLAIM, namespace=NS)
    apiserver.request("DELETE", f"/api/v1/namespaces/{NS}/pods/before", {"gracePeriodSeconds": 0})

    created = apiserver.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", whole_gpu_class())
    assert created["spec"]["extendedResourceName"] == "nvidia.com/gpu", "dropped: is DRAExtendedResource on?"

    node.gpu_pod("bridged", 1)
    wait_for("bridged pod bound", lambda: _pod(apiserver, "bridged")["spec"].get("nodeName") == NODE or None, 60)
    (claim,) = live.list(RESOURCE_CLAIM, namespace=NS)
    assert claim["metadata"]["annotations"][EXTENDED_CLAIM] == "true"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["device"]) == (DRIVER, gpu_device)
    status = _pod(apiserver, "bridged")["status"]["extendedResourceClaimStatus"]
    assert status["resourceClaimName"] == claim["metadata"]["name"]
    assert status["requestMappings"][0]["resourceName"] == "nvidia.com/gpu"

    # the driver prepares the scheduler's claim like any other: the whole GPU
    prepared = driver.prepare(ClaimRef(NS, claim["metadata"]["uid"], claim["metadata"]["name"]))
    assert [d.uuid for d in prepared.devices] == [whole.uuid]

    # seven MIG devices are free, but nvidia.com/gpu means a whole GPU
    node.gpu_pod("no-whole-gpu-left", 1)
    wait_for("second plain GPU pod refused", lambda: node.unschedulable("no-whole-gpu-left"), 60)
    assert len(live.list(RESOURCE_CLAIM, namespace=NS)) == 1
