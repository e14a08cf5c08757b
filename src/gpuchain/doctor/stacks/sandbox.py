"""The GPU Operator's sandbox (VM) operands by name, and which of their containers' logs the gather step reads.

Names as NVIDIA/gpu-operator renders them (assets/state-vfio-manager, state-vgpu-manager, state-sandbox-validation,
state-vgpu-device-manager, state-sandbox-device-plugin, state-kata-device-plugin @v26.7.0). They run on a node whose
``nvidia.com/gpu.workload.config`` is vm-passthrough or vm-vgpu (controllers/state_manager.go), in the operator's
namespace, and are no operand of the container chain: the doctor's sandbox walk (`gpuchain.doctor.links.sandbox`)
finds them by their DaemonSet.
"""

from __future__ import annotations

from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.structs import LogKey, Snapshot, Stack
from gpuchain.kube.objects import Obj

WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
SANDBOX_WORKLOADS = ("vm-passthrough", "vm-vgpu")
#: The vGPU type the vGPU device manager applies, and its outcome (NVIDIA/vgpu-device-manager).
VGPU_CONFIG, VGPU_CONFIG_STATE = "nvidia.com/vgpu.config", "nvidia.com/vgpu.config.state"
#: DaemonSet -> the operand's deploy-label suffix (nvidia.com/gpu.deploy.<suffix>).
DAEMONSETS = {
    "nvidia-vfio-manager": "vfio-manager",
    "nvidia-vgpu-manager-daemonset": "vgpu-manager",
    "nvidia-sandbox-validator": "sandbox-validator",
    "nvidia-vgpu-device-manager": "vgpu-device-manager",
    "nvidia-sandbox-device-plugin-daemonset": "sandbox-device-plugin",
    "nvidia-kata-sandbox-device-plugin-daemonset": "kata-sandbox-device-plugin",
}
#: At most how many sandbox containers' logs one gather reads.
MAX_SANDBOX_LOGS = 4


def sandbox_log_candidates(snapshot: Snapshot, stack: Stack) -> list[tuple[LogKey, Obj]]:
    """The sandbox operands' containers whose log says why a VM node's chain stops, with their statuses: a
    validation held running (the validator logs what it waits for: the GPUs' virtual functions, vfio-pci) and a
    container that crashes. No pass over the pods on a cluster without a VM node."""
    default = ((stack.policy_obj or {}).get("spec") or {}).get("sandboxWorkloads") or {}
    if not (default.get("enabled") is True and default.get("defaultWorkload") in SANDBOX_WORKLOADS) and not any(
        ((n.get("metadata") or {}).get("labels") or {}).get(WORKLOAD_CONFIG) in SANDBOX_WORKLOADS
        for n in snapshot.nodes
    ):
        return []
    out: list[tuple[LogKey, Obj]] = []
    for pod in snapshot.pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != stack.namespace or owner_ds(pod) not in DAEMONSETS:
            continue
        status = pod.get("status") or {}
        for cs in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
            state = cs.get("state") or {}
            held = bool(state.get("running")) and not cs.get("ready")
            crashing = (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff" or (
                (state.get("terminated") or {}).get("reason") not in (None, "Completed")
            )
            if held or crashing:
                out.append(((str(meta.get("namespace")), str(meta.get("name")), str(cs.get("name"))), cs))
                break  # the first container held is the one the pod waits in
    return sorted(out, key=lambda c: c[0])[:MAX_SANDBOX_LOGS]
