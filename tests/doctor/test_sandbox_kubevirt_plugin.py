"""A GPU node served by NVIDIA's KubeVirt GPU device plugin deployed on its own (no GPU Operator): it needs no GPU stack,
and the NVIDIA runtime made its default runtime keeps the plugin from starting.

Fixtures: a simulated cluster with no stack, its GPU node's capacity without nvidia.com/gpu (GPUs bound to vfio-pci), and
the plugin's DaemonSet (image nvcr.io/nvidia/kubevirt-gpu-device-plugin, NVIDIA/kubevirt-gpu-device-plugin README). The
refusal is the OCI runtime's start error quoting the hook and nvidia-container-cli's own wording ("nvidia-container-cli:
initialization error: %s", NVIDIA/libnvidia-container src/cli/configure.c) with the CUDA error for a node with no GPU the
NVIDIA driver owns ("no CUDA-capable device is detected", cudaErrorNoDevice).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp

NODES = """
name: kubevirt
stack: none
nodes:
  - {name: kv, preset: t4-x4, containerRuntime: "docker://20.10.7"}
"""
PLUGIN = {
    "do": "add-daemonset",
    "namespace": "kube-system",
    "name": "nvidia-kubevirt-gpu-dp-daemonset",
    "image": "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.2.1",
    "labels": {"name": "nvidia-kubevirt-gpu-dp-ds"},
    "containers": ["nvidia-kubevirt-gpu-dp-ctr"],
    "nodes": ["kv"],
}
NO_GPU_RESOURCE = {
    "do": "node",
    "node": "kv",
    "capacity": {"nvidia.com/gpu": None},
    "allocatable": {"nvidia.com/gpu": None},
}
REFUSED = (
    'Error: failed to start container "nvidia-kubevirt-gpu-dp-ctr": Error response from daemon: OCI runtime create '
    "failed: container_linux.go:380: starting container process caused: process_linux.go:545: container init caused: "
    "Running hook #0:: error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: initialization error: "
    "cuda error: no cuda-capable device is detected: unknown"
)


def _crashing(message: str) -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-kubevirt-gpu-dp-daemonset",
        "namespace": "kube-system",
        "node": "kv",
        "containers": [
            {
                "name": "nvidia-kubevirt-gpu-dp-ctr",
                "restarts": 12,
                "state": {"waiting": "CrashLoopBackOff"},
                "last": {"terminated": "ContainerCannotRun", "exitCode": 128},
            }
        ],
        "events": [{"reason": "Failed", "count": 12, "message": message}],
    }


def test_the_nvidia_runtime_as_default_keeps_the_kubevirt_plugin_from_starting_and_runc_goes_back() -> None:
    report = diagnosed(NODES, NO_GPU_RESOURCE, PLUGIN, _crashing(REFUSED))
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    (root,) = errors
    assert (root.id, root.link, root.node) == ("vm.nvidia-runtime-default", "toolkit", "kv")
    assert root.action is not None and root.action.op is FixOp.NODE
    assert "daemon.json" in root.fix and "default-runtime" in root.fix  # the node's runtime is Docker
    assert any(e.startswith("refused: nvidia-container-cli") for e in root.evidence)


def test_a_running_kubevirt_plugin_node_needs_no_gpu_stack() -> None:
    report = diagnosed(NODES, NO_GPU_RESOURCE, PLUGIN)
    assert [f.id for f in report.findings if f.severity is not Severity.INFO] == []
    (chain,) = report.chains
    assert {lk.name: lk.state.value for lk in chain.links}["device-plugin"] == "ok"


def test_the_kubevirt_plugin_failing_for_another_reason_is_the_device_plugin_link() -> None:
    report = diagnosed(NODES, NO_GPU_RESOURCE, PLUGIN, _crashing("Back-off restarting failed container"))
    (root,) = [f for f in report.findings if f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("vm.plugin-failing", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.DELETE


def test_without_the_kubevirt_plugin_a_gpu_node_with_no_stack_still_misses_one() -> None:
    report = diagnosed(NODES)
    assert [f.id for f in report.findings if f.root] == ["stack.missing"]
