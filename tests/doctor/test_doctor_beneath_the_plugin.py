"""Faults the device plugin shows but does not cause, read from the components' source (issue 26, the eleventh
held-out set's classes): a GPU the plugin keeps unhealthy after an application's Xid, GPU pods whose CUDA does not
start on a node whose plugin works (the driver under it), GKE's driver installer waiting for a driver GKE was not
asked to install, and GKE's admission that tolerates the GPU taint for every GPU pod.

Upstream facts each test stands on:

- NVIDIA/k8s-device-plugin: the XidCriticalError lines ("XidCriticalError: Xid=%d on Device=%s, the device will go
  unhealthy." in nvidia.go@v0.8.2, "...; marking device as unhealthy." in internal/rm/health.go@v0.17.1); the Xids it
  skips as "Application errors: the GPU should still be healthy": 31, 43, 45 up to v0.9.0, 13 and 68 besides from
  v0.10.0 (with DP_DISABLE_HEALTHCHECKS taking a list of Xids), 109 from v0.17.1; and no release returns a device it
  marked unhealthy ("FIXME: there is no way to recover from the Unhealthy state", internal/plugin/server.go@v0.20.0).
- The CUDA runtime's error strings (cudaErrorDevicesUnavailable 46, cudaErrorInsufficientDriver 35) as PyTorch raises
  them ("CUDA error: %s", c10/cuda/CUDAException.cpp) and NVIDIA's vectorAdd sample prints them; PyTorch's
  "The NVIDIA driver on your system is too old (found version %d)" (c10/cuda/CUDAFunctions.cpp).
- GKE's device plugin's nvidia-driver-installer init container on a node without gpu-driver-version, as quoted in
  GoogleCloudPlatform/container-engine-accelerators#402 and #407; kubernetes plugin/pkg/admission/
  extendedresourcetoleration/admission.go (a toleration {key: <resource>, operator: Exists, effect: NoSchedule} for
  each extended resource a pod requests), which GKE runs.
"""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed, no_gpus
from doctor.test_doctor_pending_workloads import TAINT_MSG, pending_pod, tainted
from doctor.test_doctor_user_pods import failing_gpu_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import NOT_SIMULATED, FixOp, Report
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

#: NVIDIA's standalone plugin on node n1, which lost GPU 2 (allocatable 7 of 8).
LOST = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, lostGpus: [2]}\n"
V08 = "XidCriticalError: Xid={xid} on Device=GPU-0b1c2d3e, the device will go unhealthy."
V017 = "XidCriticalError: Xid={xid} on Device=GPU-0b1c2d3e; marking device as unhealthy."


def plugin_release(tag: str, line: str) -> Any:
    """An edit: n1's plugin runs NVIDIA's image ``tag`` and its log is ``line`` after its registration."""

    def edit(sim: SimCluster) -> None:
        pod = next(
            p for p in sim.cluster.list(POD) if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset")
        )
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        container = pod["spec"]["containers"][0]
        image = f"nvcr.io/nvidia/k8s-device-plugin:{tag}"
        sim.cluster.patch(POD, name=name, namespace=ns, patch={"spec": {"containers": [{**container, "image": image}]}})
        log = f"Registered device plugin for 'nvidia.com/gpu' with Kubelet\n{line}"
        sim.cluster.set_logs(name, namespace=ns, container=container["name"], text=log)

    return edit


def _only(report: Report, fid: str) -> Any:
    (found,) = [f for f in report.findings if f.id == fid]
    return found


def test_an_application_xid_an_old_plugin_marked_is_a_plugin_restart_and_the_release_that_skips_it() -> None:
    report = diagnosed(LOST, plugin_release("v0.8.2", V08.format(xid=13)))
    found = _only(report, "device-plugin.xid-marked")
    assert (found.link, found.node, found.root, found.severity) == ("device-plugin", "n1", True, Severity.ERROR)
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.action.changes["kind"] == "Pod" and found.action.changes["name"].startswith("nvidia-device-plugin")
    assert found.fix.startswith("kubectl -n kube-system delete pod nvidia-device-plugin")
    # v0.8.2 still marks Xid 13; v0.10.0 is the first release that skips it.
    assert "set image ds/nvidia-device-plugin-daemonset nvidia-device-plugin-ctr=" in found.fix
    assert "nvcr.io/nvidia/k8s-device-plugin:v0.10.0" in found.fix
    assert "Xid 13: Graphics Engine Exception" in " ".join(found.evidence)
    assert "nvidia-smi -r" not in found.fix and not [f for f in report.findings if f.id == "gpu.lost"]


def test_xid_109_is_skipped_from_v0_17_1_and_a_release_that_skips_it_already_gets_the_variable() -> None:
    older = _only(diagnosed(LOST, plugin_release("v0.15.0", V017.format(xid=109))), "device-plugin.xid-marked")
    assert "k8s-device-plugin:v0.17.1" in older.fix
    # A release that skips the Xid by default marks it only where it was told to (DP_ENABLE_HEALTHCHECKS): the
    # variable that skips it is what lasts.
    newer = _only(diagnosed(LOST, plugin_release("v0.17.4", V017.format(xid=13))), "device-plugin.xid-marked")
    assert "set env ds/nvidia-device-plugin-daemonset DP_DISABLE_HEALTHCHECKS=13" in newer.fix


def test_under_the_operator_the_lasting_change_goes_to_the_policy_it_renders_the_plugin_from() -> None:
    operator = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, lostGpus: [2]}\n"
    found = _only(diagnosed(operator, plugin_release("v0.17.4", V017.format(xid=13))), "device-plugin.xid-marked")
    assert found.fix.startswith("kubectl -n gpu-operator delete pod nvidia-device-plugin-daemonset-")
    assert '{"spec":{"devicePlugin":{"env":[{"name":"DP_DISABLE_HEALTHCHECKS","value":"13"}]}}}' in found.fix


@pytest.mark.parametrize("xid", [48, 95])
def test_a_hardware_xid_keeps_the_hardware_repair(xid: int) -> None:
    """48 (double-bit ECC), 95 (uncontained ECC): NVIDIA's Xid catalog resets the GPU for both, so the GPU itself
    needs the reset (79 and 94: test_doctor_xid_classes)."""
    found = _only(diagnosed(LOST, plugin_release("v0.8.2", V08.format(xid=xid))), "gpu.lost")
    assert found.action is not None and found.action.op is FixOp.HARDWARE and "nvidia-smi -r" in found.fix


def test_an_application_xid_on_a_gpu_nvml_calls_lost_is_still_the_hardware() -> None:
    line = V08.format(xid=43) + "\nFailed to get device handle: GPU is lost"
    report = diagnosed(LOST, plugin_release("v0.8.2", line))
    assert _only(report, "gpu.lost").action.op is FixOp.HARDWARE
    assert not [f for f in report.findings if f.id == "device-plugin.xid-marked"]


#: NVIDIA/k8s-device-plugin internal/rm/health.go@v0.17.1: NVML's ERROR_NOT_SUPPORTED registering a GPU's events.
TOO_OLD = "Device GPU-0b1c2d3e is too old to support healthchecking.\nMarking device GPU-0b1c2d3e as unhealthy: 3"


def test_gpus_the_plugin_marks_unhealthy_for_its_own_reason_get_its_release_not_a_gpu_reset() -> None:
    found = _only(diagnosed(LOST, plugin_release("v0.17.1", TOO_OLD)), "device-plugin.marked-unhealthy")
    assert (found.link, found.node, found.root, found.severity) == ("device-plugin", "n1", True, Severity.ERROR)
    assert "nvcr.io/nvidia/k8s-device-plugin:v0.19.0" in found.fix and "DP_DISABLE_HEALTHCHECKS=all" in found.fix
    assert "nvidia-smi -r" not in found.fix
    assert "device plugin log: Device GPU-0b1c2d3e is too old to support healthchecking." in found.evidence
    # With an Xid of the GPU's own in the log, the GPU is what failed.
    lost = diagnosed(LOST, plugin_release("v0.17.1", TOO_OLD + "\n" + V017.format(xid=48)))
    assert _only(lost, "gpu.lost").action.op is FixOp.HARDWARE
    assert not [f for f in lost.findings if f.id == "device-plugin.marked-unhealthy"]


# -- CUDA that does not start on a node whose plugin works ----------------------------------------------------------

#: As Azure/AKS#4870 quotes PyTorch on a GPU node of an AKS GPU pool (A10 there; the preset is a stand-in).
BUSY = "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"
AKS = "name: t\nstack: aks\nnodes:\n  - {name: n1, preset: t4-x4, labels: {kubernetes.azure.com/accelerator: nvidia}}\n"
STANDALONE = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n"


def test_cuda_busy_on_a_managed_gpu_pool_is_the_driver_and_the_pools_node_image_upgrade() -> None:
    report = diagnosed(AKS, failing_gpu_pod(said=BUSY))
    found = _only(report, "workload.cuda-unusable")
    assert (found.link, found.node, found.root, found.severity) == ("driver", "n1", True, Severity.ERROR)
    assert "catalog: cuda.devices-unavailable (NVIDIA/cuda-samples " in " ".join(found.evidence)
    # The pool from the node's kubernetes.azure.com/agentpool label (the simulator names it after the node group).
    assert "az aks nodepool upgrade" in found.fix and "--name gpu --node-image-only" in found.fix
    assert "kubectl delete pod -n ml train-7c9f8-abcde" in found.fix
    assert found.action is not None and found.action.outside_cluster and NOT_SIMULATED in found.action.changes
    assert [f.id for f in report.findings if f.severity is Severity.ERROR] == ["workload.cuda-unusable"]


def test_cuda_busy_on_a_node_of_ones_own_sets_the_compute_mode_back() -> None:
    found = _only(diagnosed(STANDALONE, failing_gpu_pod(said=BUSY)), "workload.cuda-unusable")
    assert "nvidia-smi -c DEFAULT" in found.fix and "az aks" not in found.fix


def test_pytorch_finding_the_driver_too_old_is_the_driver_to_upgrade() -> None:
    said = (
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver"
    )
    found = _only(diagnosed(STANDALONE, failing_gpu_pod(said=said)), "workload.cuda-unusable")
    assert "catalog: pytorch.driver-too-old (pytorch/pytorch " in " ".join(found.evidence)
    # The pod's image names its CUDA (12.4): the fix names that release's driver floor (links/cuda_repair.py).
    assert "carries CUDA 12.4, which needs an NVIDIA driver 525.60.13 or newer" in found.fix
    assert "upgrade the node's NVIDIA driver package to 525.60.13 or newer" in found.fix


def test_cuda_words_on_a_node_whose_plugin_announces_nothing_are_left_to_the_walk() -> None:
    report = diagnosed(STANDALONE, no_gpus("n1"), failing_gpu_pod(said=BUSY))
    assert not [f for f in report.findings if f.id == "workload.cuda-unusable"]


# -- GKE -------------------------------------------------------------------------------------------------------------

GKE = (
    "name: t\nstack: gke\nnodes:\n  - {name: gke-nap-1, preset: l4-x2, osImage: Container-Optimized OS from Google, "
    "labels: {cloud.google.com/gke-accelerator: nvidia-l4, cloud.google.com/gke-nodepool: nap-g2-standard-8-gpu1}}\n"
)
#: The init container's log as #407 quotes it.
WAITING = "GPU driver auto installation is disabled.\nWaiting for GPU driver libraries to be available.\n"


def test_gkes_installer_waiting_for_a_driver_gke_was_not_asked_for_is_the_driver_and_its_pool_setting() -> None:
    installer = {
        "do": "pod",
        "daemonset": "nvidia-gpu-device-plugin",
        "namespace": "kube-system",
        "node": "gke-nap-1",
        "phase": "Pending",
        "init": [{"name": "nvidia-driver-installer", "state": {"running": True}}],
        "logs": {"nvidia-driver-installer": WAITING},
    }
    report = diagnosed(GKE, installer, no_gpus("gke-nap-1"))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("driver.not-installed", "driver", "gke-nap-1")
    assert "says: GPU driver auto installation is disabled." in root.evidence
    assert "gpu-driver-version=default" in root.fix
    assert "nodeSelector cloud.google.com/gke-gpu-driver-version: default" in root.fix


def test_gkes_plugin_finding_no_driver_device_on_the_host_is_the_driver_and_the_installer_daemonset() -> None:
    # GoogleCloudPlatform/container-engine-accelerators cmd/nvidia_gpu/nvidia_gpu.go: the plugin mounts the host's /dev
    # and logs its GPU manager's failed start every five seconds; Go's os.Stat words a missing path "stat <path>: ...".
    line = "E0316 09:02:11.104512       1 nvidia_gpu.go:140] failed to start GPU device manager: stat /dev/nvidiactl: no such file or directory"
    plugin = {
        "do": "pod",
        "daemonset": "nvidia-gpu-device-plugin",
        "namespace": "kube-system",
        "node": "gke-nap-1",
        "containers": [{"name": "nvidia-gpu-device-plugin", "ready": False, "state": {"running": True}}],
        "logs": {
            "nvidia-gpu-device-plugin": f"I0316 09:02:11.104231       1 nvidia_gpu.go:75] device-plugin started\n{line}\n"
        },
    }
    report = diagnosed(GKE, plugin, no_gpus("gke-nap-1"))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("driver.not-installed", "driver", "gke-nap-1")
    assert "daemonset-preloaded.yaml" in root.fix
    assert not [f for f in report.findings if f.link == "device-plugin" and f.severity is Severity.ERROR]


def test_on_gke_a_gpu_pod_is_never_told_to_tolerate_the_gpu_taint_its_admission_tolerates() -> None:
    report = diagnosed(GKE, tainted("gke-nap-1"), pending_pod("job", TAINT_MSG))
    assert not [f for f in report.findings if f.id == "workload.untolerated-taint"]
    # Another taint is not one the admission adds a toleration for.
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    report = diagnosed(GKE, tainted("gke-nap-1", taint=other), pending_pod("job", TAINT_MSG))
    assert _only(report, "workload.untolerated-taint").link == "node"
