"""MIG as partitionable devices on the real kube-apiserver and kube-scheduler (v1.34.4, with the
``DRAPartitionableDevices`` gate): the counters gpuchain's driver publishes are what the scheduler
allocates by, so two claims for overlapping MIG placements are never both allocated, placements
that do not overlap are, and the full GPU and its MIG devices exclude each other.

The node is a Node object with no kubelet: the scheduler binds pods to it and writes the claims'
allocations, which is all this test asks of it; then the driver prepares the allocated device from
the claim the scheduler wrote, creating the MIG instance on the simulated GPU.
"""

from __future__ import annotations

import contextlib
import subprocess
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuchain.common.yamlfile import load_yaml_model
from gpuchain.dra.driver import ClaimRef, DraDriver, DriverConfig
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM, RESOURCE_SLICE, device_class
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.kube import LiveCluster
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DRA
from gpuchain.kube.errors import NotFoundError
from peers.apiserver import FEATURE_GATES, ApiServer
from peers.binaries import peer_or_skip
from peers.node import POD_TOLERATIONS, stop_process, wait_for

NODE = "partition-node"
NS = "gpu"
TOPOLOGY = f"node: {NODE}\ngpus:\n  - model: H100-80GB\n    count: 2\n"


@pytest.fixture
def scheduler(apiserver: ApiServer) -> Iterator[subprocess.Popen]:
    """The real kube-scheduler against the session's control plane, with its feature gates."""
    binary = peer_or_skip("kube-scheduler")
    log = (apiserver.workdir / "kube-scheduler-partitions.log").open("wb")
    proc = subprocess.Popen(
        [str(binary), f"--kubeconfig={apiserver.kubeconfig}", "--leader-elect=false", "--secure-port=0",
         f"--feature-gates={FEATURE_GATES}", "--v=1"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield proc
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture
def live(apiserver: ApiServer) -> Iterator[LiveCluster]:
    cluster = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    try:
        yield cluster
    finally:
        _forget_claims(apiserver, cluster)
        cluster.close()


def _forget_claims(apiserver: ApiServer, cluster: LiveCluster) -> None:
    """Delete this test's pods and claims; no resource-claim controller runs to drop the claims'
    finalizer, so it is dropped here."""
    apiserver.request("DELETE", f"/api/v1/namespaces/{NS}/pods", {"gracePeriodSeconds": 0})
    for claim in cluster.list(RESOURCE_CLAIM, NS):
        name = claim["metadata"]["name"]
        cluster.patch(RESOURCE_CLAIM, name, {"metadata": {"finalizers": None}}, NS)
        with contextlib.suppress(NotFoundError):
            cluster.delete(RESOURCE_CLAIM, name, NS)
    for obj in cluster.list(RESOURCE_SLICE, field_selector=f"spec.nodeName={NODE}"):
        with contextlib.suppress(NotFoundError):  # collected with the node already
            cluster.delete(RESOURCE_SLICE, obj["metadata"]["name"])


def _node(apiserver: ApiServer) -> None:
    """A Ready node with room for pods, its GPUs handed to DRA (no kubelet: nothing runs there)."""
    apiserver.request("POST", "/api/v1/nodes", {"metadata": {"name": NODE, "labels": {ALLOCATOR_LABEL: DRA}}})
    node = apiserver.request("GET", f"/api/v1/nodes/{NODE}")
    room = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    node["status"] = {
        "capacity": room,
        "allocatable": room,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node"}],
    }
    apiserver.request("PUT", f"/api/v1/nodes/{NODE}/status", node)


def _claim_and_pod(apiserver: ApiServer, name: str, cel: str) -> None:
    """A claim for one device matching ``cel`` and a pod using it (the scheduler allocates the claim)."""
    exactly = {
        "deviceClassName": DRIVER,
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": cel}}],
    }
    apiserver.request(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims",
        {"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    )
    apiserver.request(
        "POST",
        f"/api/v1/namespaces/{NS}/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "tolerations": POD_TOLERATIONS,  # the not-ready taint a new Node gets (no kubelet here)
                "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            },
        },
    )


def _placement(profile: str, start: int, gpu: int) -> str:
    attrs = f'device.attributes["{DRIVER}"]'
    is_mig = f'{attrs}.type == "mig" && {attrs}.index == {gpu}'  # first: only MIG devices have the others
    return f'{is_mig} && {attrs}.migProfile == "{profile}" && {attrs}.memorySliceStart == {start}'


def _whole(gpu: int) -> str:
    attrs = f'device.attributes["{DRIVER}"]'
    return f'{attrs}.type == "gpu" && {attrs}.index == {gpu}'


def _scheduled(apiserver: ApiServer, name: str) -> str | None:
    """The device allocated to claim ``name`` once its pod is bound, else None."""
    pod = apiserver.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
    claim = apiserver.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{name}")
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    if pod["spec"].get("nodeName") != NODE or not results:
        return None
    return str(results[0]["device"])


def _unschedulable(apiserver: ApiServer, name: str) -> dict[str, Any] | None:
    """The pod's PodScheduled=False condition once the scheduler gave up on it for now, else None."""
    pod = apiserver.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
    for cond in pod.get("status", {}).get("conditions", []):
        if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
            return dict(cond)
    return None


def test_counters_keep_overlapping_placements_and_the_whole_gpu_apart(
    apiserver: ApiServer, scheduler: subprocess.Popen, live: LiveCluster, tmp_path: Path
) -> None:
    try:
        apiserver.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class())
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise
    _node(apiserver)
    sim = SimBackend(load_yaml_model(Topology, TOPOLOGY))
    config = DriverConfig(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state", unlabelled=DRA, partitionable_mig=True
    )
    driver = DraDriver(sim, live, config)
    published = driver.publish()
    assert driver.partitions_served, "the API server dropped the shared counters: is DRAPartitionableDevices on?"
    gpu0 = live.get(RESOURCE_SLICE, f"{NODE}-{DRIVER}-gpu-0")
    assert gpu0["spec"]["sharedCounters"][0]["counters"]["memory-slice-7"] == {"value": "1"}
    assert gpu0["spec"]["devices"][1]["consumesCounters"][0]["counterSet"] == "gpu-0-counter-set"
    assert "gpu-0-mig-4g40gb-3-0" in published.devices

    # GPU 0: a 4g.40gb at slice 0 ...
    _claim_and_pod(apiserver, "four-at-0", _placement("4g.40gb", 0, 0))
    assert wait_for("4g.40gb at 0 allocated", lambda: _scheduled(apiserver, "four-at-0"), 60) == "gpu-0-mig-4g40gb-3-0"
    # ... so a 3g.40gb at slice 0 (slices 0-3 again) is not allocated ...
    _claim_and_pod(apiserver, "three-at-0", _placement("3g.40gb", 0, 0))
    wait_for("3g.40gb at 0 refused", lambda: _unschedulable(apiserver, "three-at-0"), 60)
    # ... while a 3g.40gb at slice 4 (slices 4-7, 3 of the 7 compute slices left) is
    _claim_and_pod(apiserver, "three-at-4", _placement("3g.40gb", 4, 0))
    assert wait_for("3g.40gb at 4 allocated", lambda: _scheduled(apiserver, "three-at-4"), 60) == "gpu-0-mig-3g40gb-2-4"
    # the whole GPU 0 is not free any more
    _claim_and_pod(apiserver, "whole-0", _whole(0))
    wait_for("whole GPU 0 refused", lambda: _unschedulable(apiserver, "whole-0"), 60)

    # GPU 1: the whole GPU first, then not even the smallest MIG device on it
    _claim_and_pod(apiserver, "whole-1", _whole(1))
    assert wait_for("whole GPU 1 allocated", lambda: _scheduled(apiserver, "whole-1"), 60) == "gpu-1"
    _claim_and_pod(apiserver, "small-on-1", _placement("1g.10gb", 6, 1))
    wait_for("1g.10gb on GPU 1 refused", lambda: _unschedulable(apiserver, "small-on-1"), 60)
    for name in ("three-at-0", "whole-0", "small-on-1"):
        claim = apiserver.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{name}")
        assert not claim.get("status", {}).get("allocation"), name

    # the driver prepares what the scheduler allocated: the MIG instance at the allocated placement
    claim = live.get(RESOURCE_CLAIM, "three-at-4", NS)
    ref = ClaimRef(NS, claim["metadata"]["uid"], "three-at-4")
    prepared = driver.prepare(ref)
    (instance,) = sim.gpu_instances(0)
    assert (instance.profile, instance.start) == ("3g.40gb", 4)
    assert prepared.devices[0].uuid == sim.inventory().gpu(0).mig_devices[0].uuid
    assert driver.unprepare(ref) and sim.gpu_instances(0) == ()
