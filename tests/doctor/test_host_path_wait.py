"""An operand pod whose sandbox waits on a host directory a lower link makes, read from its state once the Events
that said so have expired (kube-apiserver --event-ttl, one hour): the kubelet mounts a pod's volumes before it asks
the runtime for a sandbox (kubernetes pkg/kubelet/kubelet.go SyncPod) and checks a hostPath of type Directory exists
(pkg/volume/hostpath/host_path.go checkType), so a pod with no sandbox on a Ready node, whose only volume that can be
missing is the driver's directory, waits on the driver (gpuchain.doctor.evidence.waits_on_host_path).

Fixture: GKE's device plugin DaemonSet as the simulator renders it (GoogleCloudPlatform/container-engine-accelerators
cmd/nvidia_gpu/device-plugin.yaml volumes; /home/kubernetes/bin/nvidia of type Directory, as GKE's own copy has it),
on a node pool GKE installed no driver on; node names and versions are made up."""

from __future__ import annotations

import copy
from typing import Any

from doctor.small_cluster import built
from sim.heldout.harness import as_the_kubelet_writes

from gpuchain.doctor.diagnose import run_doctor
from gpuchain.doctor.model import Report, Severity
from gpuchain.kube import EVENT, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NODE = "gke-train-t4-pool-4c1d9e2a-b7xq"
SCENARIO = (
    "name: t\nstack: gke\nnodes:\n"
    f"  - {{name: {NODE}, preset: t4-x4, osImage: Container-Optimized OS from Google, "
    "labels: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}}\n"
)
MISSING = 'MountVolume.SetUp failed for volume "nvidia" : hostPath type check failed: /home/kubernetes/bin/nvidia is not a directory'


def _edits(kubelet: str) -> list[Any]:
    return [
        {
            "do": "node",
            "node": NODE,
            "labels": {"cloud.google.com/gke-gpu-driver-version": None},
            "capacity": {"nvidia.com/gpu": None},
            "allocatable": {"nvidia.com/gpu": None},
            "nodeInfo": {"kubeletVersion": kubelet},
        },
        {
            "do": "pod",
            "daemonset": "nvidia-gpu-device-plugin-large-cos",
            "node": NODE,
            "phase": "Pending",
            "containers": [{"name": "nvidia-gpu-device-plugin", "state": {"waiting": "ContainerCreating"}}],
            "events": [{"reason": "FailedMount", "count": 12, "message": MISSING}],
        },
    ]


def _events_expired(sim: SimCluster) -> None:
    as_the_kubelet_writes(sim.cluster)
    for ev in sim.cluster.list(EVENT):
        sim.cluster.delete(EVENT, name=name_of(ev), namespace=namespace_of(ev))


def _roots(report: Report) -> list[tuple[str, str | None]]:
    return [(f.id, f.node) for f in report.findings if f.root and f.severity is Severity.ERROR]


def _report(*more: Any, kubelet: str = "v1.31.5-gke.1023000") -> Report:
    sim = built(SCENARIO, *_edits(kubelet), *more, _events_expired)
    return run_doctor(sim.cluster, reader=sim.read_log)


def test_the_plugins_pod_without_a_sandbox_waits_on_the_driver_gke_did_not_install() -> None:
    report = _report()
    assert _roots(report) == [("driver.not-installed", NODE)]
    found = next(f for f in report.findings if f.root)
    assert any("hostPath /home/kubernetes/bin/nvidia (type Directory)" in e for e in found.evidence)
    assert "gpu-driver-version=default" in found.fix and "daemonset-preloaded.yaml" in found.fix


def _with_volume(volume: dict[str, Any]) -> Any:
    def edit(sim: SimCluster) -> None:
        for p in sim.cluster.list(POD, namespace="kube-system"):
            if name_of(p).startswith("nvidia-gpu-device-plugin"):
                spec = copy.deepcopy(p["spec"])
                spec["volumes"] = [*spec["volumes"], volume]
                sim.cluster.patch(POD, name=name_of(p), namespace="kube-system", patch={"spec": spec})

    return edit


def test_a_volume_that_may_be_missing_besides_leaves_the_wait_unexplained() -> None:
    """A ConfigMap the pod mounts may be what is missing: the state alone does not say which volume failed."""
    report = _report(_with_volume({"name": "config", "configMap": {"name": "plugin-config"}}))
    assert ("driver.not-installed", NODE) not in _roots(report)
    # A must-exist hostPath no link of the chain makes (the kubelet's own directory moved) is as ambiguous.
    other = _report(
        _with_volume({"name": "kubelet", "hostPath": {"path": "/var/lib/k0s/kubelet", "type": "Directory"}})
    )
    assert ("driver.not-installed", NODE) not in _roots(other)


def test_a_kubelet_before_1_29_shows_no_sandbox_condition_and_proves_nothing() -> None:
    """Before 1.29 a pod without a sandbox and one pulling its image both read ContainerCreating."""
    assert ("driver.not-installed", NODE) not in _roots(_report(kubelet="v1.27.16-gke.1000"))


def test_an_event_that_names_the_pod_speaks_for_it_instead() -> None:
    """A FailedCreatePodSandBox Event says the volumes were mounted and the runtime refused the sandbox: the state
    reading is for a pod no Event names."""
    refused = {
        "do": "pod",
        "daemonset": "nvidia-gpu-device-plugin-large-cos",
        "node": NODE,
        "events": [
            {
                "reason": "FailedCreatePodSandBox",
                "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for "
                'sandbox "8f1e": plugin type="gke" failed (add): no IP addresses available in range set',
            }
        ],
    }
    sim = built(SCENARIO, *_edits("v1.31.5-gke.1023000"), refused)
    for ev in sim.cluster.list(EVENT):
        if ev.get("reason") == "FailedMount":
            sim.cluster.delete(EVENT, name=name_of(ev), namespace=namespace_of(ev))
    as_the_kubelet_writes(sim.cluster)
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert ("driver.not-installed", NODE) not in _roots(report)
