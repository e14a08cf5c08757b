"""GPUs that cannot be used whatever the stack does (issue 26, the twelfth held-out set's classes): MIG mode on with
no MIG device carved (the layout gone after a reboot) is the MIG link, a GPU that fell off the bus is the node's own
hardware. Each rule on a small simulated cluster edited the way the real components leave it; the upstream facts
each test stands on are named in it."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, plugin_pod
from doctor.test_doctor_pending_workloads import pending_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

#: NVIDIA's device plugin's start-up lines (cmd/nvidia-device-plugin/main.go@v0.14.5) and nothing after them: with
#: the mixed strategy and no MIG device on a GPU in MIG mode there is no resource to serve, so it registers none.
STARTED = (
    "I0101 00:00:00.000000       1 main.go:154] Starting FS watcher.\n"
    "I0101 00:00:00.000000       1 main.go:161] Starting OS watcher.\n"
    "I0101 00:00:00.000000       1 main.go:176] Starting Plugins.\n"
    "I0101 00:00:00.000000       1 main.go:234] Loading configuration.\n"
    "I0101 00:00:00.000000       1 main.go:242] Updating config with default resource matching patterns.\n"
    "I0101 00:00:00.000000       1 main.go:253] \nRunning with config:\n"
    '{"version": "v1", "flags": {"migStrategy": "mixed"}}\n'
    "I0101 00:00:00.000000       1 main.go:256] Retrieving plugins.\n"
)
RUNNING = {"name": "nvidia-device-plugin-ctr", "ready": True, "state": {"running": True}}
#: The kubelet's Node status after the reboot: a resource registered before it that no plugin serves now stays in
#: capacity at 0 (kubernetes pkg/kubelet/cm/devicemanager/manager.go@v1.34.4 GetCapacity's deleted resources,
#: which kubelet_node_status.go sets to 0).
MIG_ZERO = {
    "do": "node",
    "node": "m",
    "capacity": {"nvidia.com/gpu": None, "nvidia.com/mig-1g.5gb": 0},
    "allocatable": {"nvidia.com/gpu": None, "nvidia.com/mig-1g.5gb": 0},
}
STANDALONE = (
    "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: a100-40gb-x8, hostDriver: 550.54.15}\n"
)


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_mig_resources_at_zero_under_a_running_plugin_are_the_mig_layout_lost_in_a_reboot() -> None:
    """The plugin runs with the mixed strategy and serves nothing, the node's MIG resource reads 0: MIG mode
    survived the reboot, the instances did not. The repair is mig-parted's on a node no MIG manager serves
    (NVIDIA/mig-parted: nvidia-mig-parted apply -c <layout>, and its nvidia-mig-manager.service, which applies
    MIG_PARTED_SELECTED_CONFIG at boot), not a restart of the plugin; the Pending pods are its consequence."""
    report = diagnosed(
        STANDALONE,
        MIG_ZERO,
        plugin_pod("m", RUNNING, STARTED),
        pending_pod(
            "train",
            "0/3 nodes are available: 1 Insufficient nvidia.com/mig-1g.5gb.",
            {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}}}]},
        ),
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("mig.no-instances", "mig", "m")
    assert "nvidia.com/mig-1g.5gb: 0" in " ".join(root.evidence)
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "nvidia-mig-parted apply" in root.fix and "-c all-1g.5gb" in root.fix
    assert (
        "systemctl enable nvidia-mig-manager.service" in root.fix
        and "MIG_PARTED_SELECTED_CONFIG=all-1g.5gb" in root.fix
    )
    pending = next(f for f in report.findings if f.id == "workload.insufficient-gpu")
    assert not pending.root and "mig.no-instances" in pending.cause


def test_a_plugin_that_registered_its_mig_resource_is_a_lost_registration_not_a_lost_layout() -> None:
    """The same capacity under a plugin whose log registered the MIG resource (NVIDIA/k8s-device-plugin
    internal/plugin/server.go "Registered device plugin for '%s' with Kubelet"): the kubelet dropped a registration
    the plugin made (NVIDIA/k8s-device-plugin#1228), so the MIG devices exist; not this rule."""
    log = (
        STARTED
        + "I0101 00:00:01.000000 1 server.go:165] Registered device plugin for 'nvidia.com/mig-1g.5gb' with Kubelet\n"
    )
    report = diagnosed(STANDALONE, MIG_ZERO, plugin_pod("m", RUNNING, log))
    assert [(f.id, f.link) for f in _roots(report)] == [("device-plugin.not-registered", "device-plugin")]


def test_nvidia_smis_empty_mig_table_in_any_log_is_the_mig_link() -> None:
    """nvidia-smi prints its MIG devices table only when a GPU has MIG mode on; "No MIG devices found" in it (as
    NVIDIA's MIG user guide shows after nvidia-smi -mig 1) is MIG on with nothing carved, whoever logged it."""
    smi = (
        "| MIG devices:                                                                |\n"
        "|  No MIG devices found                                                       |\n"
    )
    report = diagnosed(STANDALONE, MIG_ZERO, plugin_pod("m", RUNNING, STARTED + smi))
    (root,) = _roots(report)
    assert (root.id, root.link) == ("mig.no-instances", "mig")
    assert "catalog: nvidia-smi.no-mig-devices" in " ".join(root.evidence)


def test_cuda_validation_refused_on_a_mig_capable_gpu_is_the_mig_layout_not_the_toolkit() -> None:
    """The operator validator's CUDA step (NVIDIA's vectorAdd sample: "Failed to allocate device vector A (error code
    %s)!") fails with CUDA's text for cudaErrorDevicesUnavailable on a MIG-capable node that announces no GPU:
    with MIG mode on and no MIG device CUDA has no device to use; the toolkit's hook did its work."""
    vector = "Failed to allocate device vector A (error code all CUDA-capable devices are busy or unavailable)!\n"
    validator = {
        "do": "pod",
        "daemonset": "nvidia-operator-validator",
        "node": "m",
        "init": [
            {"name": "driver-validation", "state": {"terminated": "Completed", "exitCode": 0}},
            {"name": "toolkit-validation", "state": {"terminated": "Completed", "exitCode": 0}},
            {
                "name": "cuda-validation",
                "restarts": 7,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "Error"},
            },
        ],
        "logs": {"cuda-validation": vector},
    }
    operator = "name: x\nstack: gpu-operator\nnodes:\n  - {name: m, preset: a100-40gb-x8}\n"
    report = diagnosed(
        operator,
        {
            "do": "node",
            "node": "m",
            "labels": {"nvidia.com/mig.capable": "true"},
            "capacity": {"nvidia.com/gpu": 0},
            "allocatable": {"nvidia.com/gpu": 0},
        },
        validator,
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("mig.no-instances", "mig", "m")
    assert "catalog: cuda.devices-unavailable" in " ".join(root.evidence)
    assert "nvidia.com/mig.config" in root.fix


#: The kubelet's admission error (pkg/kubelet/cm/devicemanager/manager.go@v1.34.4 "%v, which is unexpected") around
#: the device plugin's "unable to retrieve list of available devices: %v" (internal/rm/nvml_manager.go@v0.20.0) and
#: go-nvml's text for ERROR_GPU_IS_LOST.
LOST = (
    "Allocate failed due to rpc error: code = Unknown desc = unable to retrieve list of available devices: "
    "error creating nvml.Device 3: nvml: GPU is lost, which is unexpected"
)


def test_gpu_pods_refused_because_a_gpu_fell_off_the_bus_are_the_node_not_the_driver() -> None:
    """NVML's ERROR_GPU_IS_LOST under the plugin's allocation is the GPU gone from the bus (Xid 79): the node's
    hardware, under every link of the stack; drain it, reboot or reset the GPU, replace it if it recurs."""

    def refused(sim: SimCluster) -> None:
        pod = {"metadata": {"name": "job-0", "namespace": "default"}, "spec": {"nodeName": "m"}}
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "job-0.admission", "namespace": namespace_of(pod)},
                "involvedObject": {"kind": "Pod", "name": name_of(pod), "namespace": namespace_of(pod)},
                "type": "Warning",
                "reason": "UnexpectedAdmissionError",
                "message": LOST,
                "source": {"component": "kubelet", "host": "m"},
            }
        )

    report = diagnosed(STANDALONE, refused)
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("node.gpu-lost", "node", "m")
    assert root.action is not None and root.action.op is FixOp.NODE and root.action.changes["fact"] == "replace-gpu"
    assert "kubectl drain m" in root.fix and "replace the GPU" in root.fix
    assert "catalog: nvml.gpu-lost" in " ".join(root.evidence)
    assert not [f for f in report.findings if f.id == "driver.gpu-unavailable"]
