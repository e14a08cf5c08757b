"""The real kube-scheduler against the session's control plane, and a Node object with no kubelet
for it to bind pods to: enough to see which claims the scheduler allocates from the slices
gpuchain's driver publishes, and what it writes in their allocations.

No kubelet runs on the node and no resource-claim controller drops a claim's finalizer, so
``SchedulerOnlyNode.forget`` deletes what a test made there, finalizers included.
"""

from __future__ import annotations

import contextlib
import subprocess
import urllib.error
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM, RESOURCE_SLICE, device_class
from gpuchain.kube import LiveCluster
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DRA
from gpuchain.kube.errors import NotFoundError
from gpuchain.kube.gpu_resources import GPU
from peers.apiserver import FEATURE_GATES, ApiServer
from peers.binaries import peer_or_skip
from peers.node import POD_TOLERATIONS, stop_process

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"


@contextmanager
def kube_scheduler(apiserver: ApiServer, log_name: str) -> Iterator[subprocess.Popen]:
    """The real kube-scheduler with the control plane's feature gates, logging to ``log_name``."""
    binary = peer_or_skip("kube-scheduler")
    log = (apiserver.workdir / log_name).open("wb")
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


@contextmanager
def live_cluster(apiserver: ApiServer, node: str, ns: str) -> Iterator[LiveCluster]:
    """A client of the control plane that forgets, at the end, what the test made on ``node``."""
    cluster = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    try:
        yield cluster
    finally:
        SchedulerOnlyNode(apiserver, node, ns).forget(cluster)
        cluster.close()


@dataclass(frozen=True)
class SchedulerOnlyNode:
    """A Ready node named ``name`` whose GPUs are handed to DRA, and the namespace ``ns`` of the
    test's claims and pods."""

    apiserver: ApiServer
    name: str
    ns: str

    def create(self) -> None:
        """The node (Ready, room for pods), and gpuchain's DeviceClass and the namespace if not there yet."""
        for path, obj in (
            ("/apis/resource.k8s.io/v1/deviceclasses", device_class()),
            ("/api/v1/namespaces", {"metadata": {"name": self.ns}}),
        ):
            try:
                self.apiserver.request("POST", path, obj)
            except urllib.error.HTTPError as exc:
                if exc.code != 409:
                    raise
        labels = {ALLOCATOR_LABEL: DRA}
        self.apiserver.request("POST", "/api/v1/nodes", {"metadata": {"name": self.name, "labels": labels}})
        node = self.apiserver.request("GET", f"/api/v1/nodes/{self.name}")
        room = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        node["status"] = {
            "capacity": room,
            "allocatable": room,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node"}],
        }
        self.apiserver.request("PUT", f"/api/v1/nodes/{self.name}/status", node)

    def claim_and_pod(self, name: str, exactly: dict[str, Any]) -> None:
        """A claim with one request ``gpu`` (``exactly`` added to the class and a count of one) and a
        pod using it; the scheduler allocates the claim when it places the pod."""
        request = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1, **exactly}
        self.apiserver.request(
            "POST",
            CLAIMS.format(ns=self.ns),
            {"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
        )
        self.apiserver.request(
            "POST",
            f"/api/v1/namespaces/{self.ns}/pods",
            {
                "metadata": {"name": name},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "tolerations": POD_TOLERATIONS,  # the not-ready taint a new Node gets (no kubelet here)
                    "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
                },
            },
        )

    def gpu_pod(self, name: str, gpus: int) -> None:
        """A pod asking for ``nvidia.com/gpu: <gpus>`` the device plugin way, with no claim."""
        self.apiserver.request(
            "POST",
            f"/api/v1/namespaces/{self.ns}/pods",
            {
                "metadata": {"name": name},
                "spec": {
                    "tolerations": POD_TOLERATIONS,
                    "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(gpus)}}}],
                },
            },
        )

    def claim(self, name: str) -> dict[str, Any]:
        return dict(self.apiserver.request("GET", f"{CLAIMS.format(ns=self.ns)}/{name}"))

    def results(self, name: str) -> list[dict[str, Any]] | None:
        """The allocation results of claim ``name`` once its pod is bound to this node, else None."""
        pod = self.apiserver.request("GET", f"/api/v1/namespaces/{self.ns}/pods/{name}")
        results = self.claim(name).get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
        if pod["spec"].get("nodeName") != self.name or not results:
            return None
        return list(results)

    def scheduled(self, name: str) -> str | None:
        """The device allocated to claim ``name`` once its pod is bound, else None."""
        results = self.results(name)
        return str(results[0]["device"]) if results else None

    def unschedulable(self, name: str) -> dict[str, Any] | None:
        """The pod's PodScheduled=False condition once the scheduler gave up on it for now, else None."""
        pod = self.apiserver.request("GET", f"/api/v1/namespaces/{self.ns}/pods/{name}")
        for cond in pod.get("status", {}).get("conditions", []):
            if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
                return dict(cond)
        return None

    def forget(self, cluster: LiveCluster) -> None:
        """Delete the test's pods and claims (finalizers dropped) and the node's slices."""
        self.apiserver.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods", {"gracePeriodSeconds": 0})
        for claim in cluster.list(RESOURCE_CLAIM, namespace=self.ns):
            name = claim["metadata"]["name"]
            # A claim the scheduler made for a pod (extended resources through DRA) is the pod's: the garbage
            # collector may delete it between the list and the patch, as the pods just went.
            with contextlib.suppress(NotFoundError):
                cluster.patch(RESOURCE_CLAIM, name=name, patch={"metadata": {"finalizers": None}}, namespace=self.ns)
                cluster.delete(RESOURCE_CLAIM, name=name, namespace=self.ns)
        for obj in cluster.list(RESOURCE_SLICE, field_selector=f"spec.nodeName={self.name}"):
            with contextlib.suppress(NotFoundError):  # collected with the node already
                cluster.delete(RESOURCE_SLICE, name=obj["metadata"]["name"])
